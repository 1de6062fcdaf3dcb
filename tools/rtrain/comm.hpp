// File: rtrain/comm.hpp
//
// The communication layer of `rtrain run`: data-parallel collectives between the worker
// processes that `rtrain launch` (or torchrun) starts, on Gloo's TCP transport, CPU only.
// As with torch's env:// rendezvous, rank 0 hosts a key-value store (TcpStore) on
// MASTER_ADDR:MASTER_PORT; every rank publishes its Gloo addresses there and connects a
// full mesh. Without RANK/WORLD_SIZE there is one rank and no communication at all.
//
//   auto comm = Communicator::connect(DistEnv::from_env(), std::chrono::seconds(60));
//   comm->set_buckets(grads.data(), {{0, 1 << 20}, {1 << 20, n - (1 << 20)}}, 1.0f / comm->world());
//   for (...) {
//     comm->begin_step();
//     ...backward of the last layers...; comm->ready(1);   // all-reduced while backward goes on
//     ...backward of the first layers...; comm->ready(0);
//     CommTimes t = comm->wait();                          // grads now hold the mean over ranks
//   }
//
// Results are bit-identical on every rank and the same run to run for a given world size
// (Gloo's ring all-reduce fixes the order of the additions; the scale is applied after
// the sum, the same way everywhere). A peer that dies or stalls past the timeout surfaces
// as an rkit::Error (Unavailable) from the next blocking call on the caller's thread.
//
// Addresses: Gloo's TCP device binds 127.0.0.1 when MASTER_ADDR is a loopback address
// (all ranks on this machine), else the address of this host's name (gethostname(2)),
// unless GLOO_SOCKET_IFNAME names an interface to use (as in PyTorch).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rkit::rtrain {

// Where this worker sits in the job, from the environment torchrun-style launchers set.
struct DistEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;

  // Reads RANK, WORLD_SIZE, LOCAL_RANK (default 0), MASTER_ADDR (default 127.0.0.1) and
  // MASTER_PORT (default 29500, 1 to 65535). Neither RANK nor WORLD_SIZE set: one rank.
  // Error(Usage) on a malformed value ("RANK='x' is not a non-negative integer"), only one
  // of RANK and WORLD_SIZE set, WORLD_SIZE < 1, RANK >= WORLD_SIZE or LOCAL_RANK >= WORLD_SIZE.
  static DistEnv from_env();
};

// A key-value store for Gloo's rendezvous over TCP, like torch's TCPStore: the host (rank
// 0) listens on `port` on every interface (SO_REUSEADDR) and serves all clients from one
// thread; every rank is a client, the host's own over loopback. Wire format, one request
// at a time per connection, lengths as little-endian u32:
//   'S' key value → 0            set (overwrites)
//   'G' key       → 0 value      get, answered once the key exists
//   'W' n key...  → 0            wait, answered once all keys exist
// Keys up to 4 KiB, values up to 256 MiB; a malformed request closes the connection.
// Thread-safe (requests are serialised).
class TcpStore : public gloo::rendezvous::Store {
 public:
  // Host: binds and listens now (port 0: a free port, see port()); Error(Unavailable) when
  // the port cannot be bound. Client: connects now, retrying until `timeout` (the host
  // may start later); Error(Unavailable) naming host:port when it cannot. `timeout` is
  // also the limit of every later get/wait that does not give its own.
  TcpStore(const std::string& host, int port, bool is_host, std::chrono::milliseconds timeout);
  ~TcpStore() override;  // stops the server thread (host); closes the connection
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  // The port the host listens on (the bound one when constructed with 0), or the client's target.
  int port() const { return port_; }

  // All three: Error(Unavailable, "store HOST:PORT: get 'k': timed out after 300 ms") when the
  // timeout passes (the connection is then reset: the next call reconnects) or the host is
  // gone; Error(Software) for a key or value over the limits.
  void set(const std::string& key, const std::vector<char>& data) override;
  // The key's value, once some client has set it.
  std::vector<char> get(const std::string& key) override;
  // Returns once all the keys exist.
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  class Server;
  void request(const std::vector<char>& msg, bool with_value, std::vector<char>* value,
               std::chrono::milliseconds timeout, const std::string& what);
  void connect_locked(std::chrono::steady_clock::time_point deadline);
  void close_locked();

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;
  std::mutex mu_;
  int fd_ = -1;  // the client connection; -1 after a timeout left a reply pending (reconnects)
};

// Time one step's gradient all-reduce took.
struct CommTimes {
  double comm_s = 0;     // how long the step's bucket all-reduces ran (on the worker thread)
  double exposed_s = 0;  // how long wait() blocked the caller
  // The share of the communication hidden behind computation: 1 - exposed/comm clamped
  // to [0, 1]; 1 when comm_s == 0.
  double hidden_fraction() const;
};

// Collectives among the ranks of a job. Not copyable; one per process (or, in tests, per
// thread standing for a rank). The public calls are meant for one caller thread; the
// collectives themselves run on the communicator's worker thread, one at a time in
// submission order, each with its own Gloo tag, so that all ranks stay in step as long
// as they make the same calls in the same order.
//
// Errors: a Gloo failure (peer closed its connection, I/O error, timeout) becomes
// Error(Unavailable, "rank 0 of 2: allreduce #7 (bucket 1, 4096 floats) with rank 1:
// Connection closed by peer [...]"), thrown on the caller's thread by the failing call or,
// for bucket all-reduces, by wait(); never a hang past the timeout. After a failure the
// communicator is broken: every later collective throws the same error at once.
// A SIGPIPE from writing to a dead peer's socket is blocked in the threads that write
// (the process's signal dispositions are left alone).
class Communicator {
 public:
  // world == 1: no store, no sockets, every collective is a no-op that costs nothing
  // (all-reduce and broadcast leave the data as it is; the bucket scale still applies).
  // Else rank 0 hosts the TcpStore on env.master_port, every rank connects to it (waiting
  // up to `timeout` for rank 0) and to every other rank. `timeout` also bounds every
  // collective: a peer silent for that long is an error, never a hang.
  // Error(Usage) for a rank outside [0, world) or, world > 1, a master_port outside 1 to 65535;
  // Error(Unavailable) when the store or a peer cannot be reached in time.
  static std::unique_ptr<Communicator> connect(const DistEnv& env, std::chrono::milliseconds timeout);

  // Joins the worker thread (a collective in flight finishes or times out; queued ones
  // are dropped), closes the connections and, on rank 0, stops the store.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // Blocking collectives: they return when this rank's part is done.
  // In place: data[i] becomes the sum over ranks of data[i].
  void allreduce_sum(float* data, std::size_t n);
  void allreduce_sum(double* data, std::size_t n);
  // `bytes` bytes of root's `data` copied into every rank's `data`. Error(Usage) for a bad root.
  void broadcast(void* data, std::size_t bytes, int root);
  // Returns once every rank has entered the barrier.
  void barrier();

  // Bucketed gradient all-reduce, overlapped with the backward pass.
  // set_buckets: once, before the first step (again between steps to change them):
  // `grads` is the flat float buffer, which must outlive its use here; each bucket an
  // {offset, count} range of it. The ranges must lie inside the buffer and not overlap
  // (not checked); every rank must give the same layout and scale. Error(Software) while
  // a step is open.
  void set_buckets(float* grads, std::vector<std::pair<std::size_t, std::size_t>> buckets, float scale);
  // Opens a step. Error(Software) when the previous step was not waited for.
  void begin_step();
  // Bucket `bucket`'s gradients are final: its all-reduce is queued now and runs while the
  // caller goes on; the caller must not touch the bucket until wait() returns. Any order,
  // but every rank must call ready in the same order. Error(Software) for an unknown bucket,
  // a bucket readied twice in a step, or no open step.
  void ready(std::size_t bucket);
  // Blocks until every bucket of the step is summed across ranks and multiplied by the
  // scale, closes the step and returns its times. Error(Software) when a bucket was never
  // readied; the communicator's error when an all-reduce failed.
  CommTimes wait();

 private:
  struct Worker;
  Communicator() = default;

  int rank_ = 0, world_ = 1;
  std::unique_ptr<Worker> worker_;  // null when world == 1

  float* grads_ = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  float scale_ = 1;
  bool step_open_ = false;
  std::vector<bool> readied_;
  std::uint64_t step_last_ = 0;  // the worker sequence number of the step's last queued bucket
};

}  // namespace rkit::rtrain
