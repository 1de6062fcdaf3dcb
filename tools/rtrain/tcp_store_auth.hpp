// File: rtrain/tcp_store_auth.hpp — private to the store (tcp_store*.cpp): its handshake
// and the kernel's word on who owns a peer's socket, as tcp_store.hpp describes them.
//
//   host → peer  kHelloMagic Ns;  peer → host  kAuthMagic Nc proof(K, kClientLabel, Ns, Nc)
//   host → peer  kOkMagic proof(K, kHostLabel, Ns, Nc), or kNoMagic
//   then frames keyed by direction_key(K, kToHost / kToClient, Ns, Nc)
//
// Without a run secret (is_no_secret), each end checks peer_uid(fd) == geteuid().
// Thread-compatible; peer_uid asks the kernel (netlink, else /proc/net/tcp{,6}).
#pragma once

#include <array>
#include <cstddef>

#include "run_secret.hpp"
#include "tcp_store_wire.hpp"

namespace rkit::rtrain::detail {

constexpr char kHelloMagic[4] = {'R', 'K', 'S', '1'};
constexpr char kAuthMagic[4] = {'R', 'K', 'C', '1'};
constexpr char kOkMagic[4] = {'R', 'K', 'O', 'K'};
constexpr char kNoMagic[4] = {'R', 'K', 'N', 'O'};
constexpr std::size_t kHello = 4 + kNonce;        // "RKS1" Ns
constexpr std::size_t kAuth = 4 + kNonce + kTag;  // "RKC1" Nc proof
constexpr std::size_t kAnswer = 4 + kTag;         // "RKOK" proof ("RKNO": 4 bytes only)

constexpr const char* kClientLabel = "rtrain.store.client.1";
constexpr const char* kHostLabel = "rtrain.store.host.1";
constexpr const char* kToHost = "rtrain.store.to-host.1";
constexpr const char* kToClient = "rtrain.store.to-client.1";

// HMAC(key, label || a || b): a handshake proof.
std::array<unsigned char, kTag> proof(const Key& key, const char* label, const unsigned char* a,
                                      const unsigned char* b);
// One direction's frame key: BLAKE2b-256 keyed by K over the direction's label and both nonces.
Key direction_key(const Key& key, const char* label, const unsigned char* ns, const unsigned char* nc);

// The uid of the process at the other end of a connected TCP socket on this host; -1 unknown.
long peer_uid(int fd);

// Whether `key` is kNoSecret (all zero): the store is then for this user on loopback only.
bool is_no_secret(const Key& key);

}  // namespace rkit::rtrain::detail
