// File: rtrain/tcp_store.hpp
//
// rtrain's one network protocol: an authenticated, bounded key-value store over TCP, as
// torch's TCPStore but closed to strangers. rtrain run's rank 0 hosts one for Gloo's
// rendezvous (comm.hpp); rtrain launch's node 0 agent hosts one where the other nodes'
// agents join and follow the run (launch.cpp).
//
//   Key k = secret.key("workers");
//   TcpStore host("10.0.0.1", 29400, true, 30s, k);     // listens on 10.0.0.1 only
//   TcpStore peer("10.0.0.1", 29400, false, 30s, k);    // proves k, checks the host proves k
//   peer.set("a", {'1'});
//   host.get("a");                                      // {'1'}, once some peer has set it
//
// Handshake (per connection; K is the 32-byte key; HMAC is crypto_auth, HMAC-SHA512-256):
//   host → peer  "RKS1" Ns                         Ns: 32 random bytes (randombytes_buf)
//   peer → host  "RKC1" Nc HMAC(K, "rtrain.store.client.1" Ns Nc)
//   host → peer  "RKOK" HMAC(K, "rtrain.store.host.1" Ns Nc)      or "RKNO", then it closes
// The host checks the peer's proof (crypto_auth_verify, constant time) before it reads a
// request; the peer checks the host's, so that a listener without K (another run's store,
// a stranger who took the port) is detected and learns nothing it could replay. Then every
// message either way is a frame: u32 length (little-endian), payload, and a 32-byte tag
// HMAC(K_dir, u64 sequence number, u32 length, payload), K_dir = BLAKE2b(K; direction, Ns, Nc):
// a frame cannot be forged, replayed, reordered or moved to another connection.
//
// With kNoSecret (no run secret: rtrain run under torchrun on one machine) both ends must
// be on a loopback address, and each checks through the kernel (/proc/net/tcp) that the
// socket at the other end belongs to this user: other users are refused, as with a secret.
//
// Requests, one at a time per connection (payload: op byte, fields; strings as u32 length
// and bytes): 'S' key value → set; 'G' key → value, once the key exists; 'W' keys → once
// all exist; 'T' keys → for each, present or not and its value, at once; 'A' ms keys → the
// same once one exists or ms have passed (at most 60000); 'C' key value
// watch → created or not (set if absent; with watch, the host sets "KEY#closed" to "" when
// this connection closes: how node 0 learns that an agent died); 'D' keys → erased.
// Replies: status 0 and the result, or status 1 and a reason (the store is full).
//
// Limits (StoreLimits): key, value and frame sizes, total bytes and keys held, connections
// served and connections still in their handshake (a new one past that drops the oldest),
// and the handshake's deadline. One thread serves all connections with poll(2); it never
// waits on one peer, so a peer that sends nothing, garbage, or a huge claimed length stalls
// nobody: it is closed at once (a bad frame) or at its deadline (silence).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "run_secret.hpp"

namespace rkit::rtrain {

struct StoreLimits {
  std::size_t max_key = 4096;                      // bytes of a key
  std::size_t max_value = std::size_t{16} << 20;   // bytes of a value
  std::size_t max_bytes = std::size_t{256} << 20;  // all keys and values held, 64 bytes more per key
  std::size_t max_keys = std::size_t{1} << 20;
  std::size_t max_connections = 4096;  // authenticated (and at most the open-file limit less 64)
  std::size_t max_pending = 64;        // in their handshake at once
  std::chrono::milliseconds handshake_timeout{10000};
};

// The most a frame's payload may hold for `limits`: a value, its key, and the header.
std::size_t max_frame(const StoreLimits& limits);

class TcpStore : public gloo::rendezvous::Store {
 public:
  // Host: binds `host`:`port` (port 0: a free port, see port()), the first of the host's
  // addresses that can be bound, never any other interface, and serves from a thread of
  // its own; its own client connects there. Error(Unavailable) when it cannot bind.
  // Client: connects and shakes hands now, trying again until `timeout` passes (the host
  // may start later); Error(Unavailable) naming host:port when it cannot reach it,
  // Error(NoPerm) when the handshake fails (the host refused this key, or the listener
  // does not prove it: not this run's store). With kNoSecret, a host that is not a
  // loopback address is Error(Usage). `timeout` also bounds every later request.
  TcpStore(const std::string& host, int port, bool is_host, std::chrono::milliseconds timeout, const Key& key,
           StoreLimits limits = {});
  ~TcpStore() override;  // stops the server thread (host); closes the connection
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  // The port the host listens on (the bound one when constructed with 0), or the client's target.
  int port() const { return port_; }
  // The limit of the requests to come.
  void set_timeout(std::chrono::milliseconds timeout);

  // All requests: Error(Unavailable, "store HOST:PORT: get 'k': timed out after 300 ms")
  // when the timeout passes (the connection is then reset: the next call reconnects) or
  // the host is gone; Error(Software) for a key or value over the limits or a full store.
  void set(const std::string& key, const std::vector<char>& data) override;
  // The key's value, once some client has set it.
  std::vector<char> get(const std::string& key) override;
  // Returns once all the keys exist.
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // Each key's value, or nullopt when it does not exist: at once, without waiting.
  std::vector<std::optional<std::vector<char>>> try_get(const std::vector<std::string>& keys);
  // As try_get, once one of the keys exists or `wait` (at most 60 s) has passed, whichever
  // comes first: the host holds the request meanwhile, so waiting costs no polling.
  std::vector<std::optional<std::vector<char>>> await_any(const std::vector<std::string>& keys,
                                                          std::chrono::milliseconds wait);
  // Sets the key unless it exists; true when this call set it. With `watch`, the host
  // sets "KEY#closed" to "" once this client's connection closes (its process ended).
  bool create(const std::string& key, const std::vector<char>& data, bool watch = false);
  // Removes the keys (those that exist).
  void erase(const std::vector<std::string>& keys);

 private:
  class Server;
  std::vector<char> request(const std::vector<char>& payload, std::chrono::milliseconds timeout,
                            const std::string& what);
  std::vector<std::optional<std::vector<char>>> parse_lookup(const std::vector<char>& reply, std::size_t n);
  void connect_locked(std::chrono::steady_clock::time_point deadline);
  void close_locked();

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  Key key_;
  StoreLimits limits_;
  std::unique_ptr<Server> server_;
  std::mutex mu_;
  int fd_ = -1;  // the client connection; -1 after a timeout left a reply pending (reconnects)
  Key k_out_{}, k_in_{};
  std::uint64_t seq_out_ = 0, seq_in_ = 0;
};

// True when every address `host` resolves to is a loopback one (127/8, ::1).
bool is_loopback(const std::string& host);

}  // namespace rkit::rtrain
