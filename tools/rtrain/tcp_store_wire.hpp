// File: rtrain/tcp_store_wire.hpp — private to the store (tcp_store*.cpp): the framing of
// its messages, as tcp_store.hpp describes it.
//
// A payload is an op byte and fields, strings as a u32 length and bytes (put_*, read back
// by a Cursor); on the wire it goes as a frame: u32 length, payload, and a 32-byte tag
// over the direction's sequence number, length and payload (seal, tag_ok).
//
//   std::vector<char> msg{'G'};
//   put_str(msg, key);
//   seal(frame, k_out, seq_out++, msg);    // frame: what goes on the socket
//
// Inline: the server and the client call them for every frame. Pure functions of their
// arguments: thread-compatible.
#pragma once

#include <sodium.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "run_secret.hpp"
#include "tcp_store.hpp"

namespace rkit::rtrain::detail {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kNonce = 32, kTag = crypto_auth_hmacsha512256_BYTES;
constexpr std::size_t kMaxAwaitMs = 60000;  // the longest an await waits
static_assert(kTag == 32);

inline int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, std::numeric_limits<int>::max()));
}

inline void put_u32(std::vector<char>& out, std::size_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

inline void put_str(std::vector<char>& out, const std::string& s) {
  put_u32(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

inline void put_bytes(std::vector<char>& out, const std::vector<char>& s) {
  put_u32(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Reads a payload's fields, never past its end.
class Cursor {
 public:
  Cursor(const char* p, std::size_t n) : p_(p), n_(n) {}
  bool u8(unsigned char& v) {
    if (n_ < 1) return false;
    v = static_cast<unsigned char>(*p_);
    ++p_, --n_;
    return true;
  }
  bool u32(std::size_t& v) {
    if (n_ < 4) return false;
    v = get_u32(p_);
    p_ += 4, n_ -= 4;
    return true;
  }
  bool str(std::string& s, std::size_t max) {
    std::size_t len = 0;
    if (!u32(len) || len > max || len > n_) return false;
    s.assign(p_, len);
    p_ += len, n_ -= len;
    return true;
  }
  bool bytes(std::vector<char>& s, std::size_t max) {
    std::size_t len = 0;
    if (!u32(len) || len > max || len > n_) return false;
    s.assign(p_, p_ + len);
    p_ += len, n_ -= len;
    return true;
  }
  bool keys(std::vector<std::string>& out, const StoreLimits& l) {
    std::size_t n = 0;
    if (!u32(n) || n > l.max_keys || n > n_ / 4) return false;
    out.resize(n);
    for (auto& k : out)
      if (!str(k, l.max_key)) return false;
    return true;
  }
  bool done() const { return n_ == 0; }

 private:
  const char* p_;
  std::size_t n_;
};

// A frame's tag: HMAC(k, seq, length, payload).
inline std::array<unsigned char, kTag> frame_tag(const Key& k, std::uint64_t seq, const char* payload, std::size_t n) {
  unsigned char head[12];
  for (int i = 0; i < 8; ++i) head[i] = static_cast<unsigned char>((seq >> (8 * i)) & 0xff);
  for (int i = 0; i < 4; ++i) head[8 + i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  crypto_auth_hmacsha512256_state st;
  crypto_auth_hmacsha512256_init(&st, k.data(), k.size());
  crypto_auth_hmacsha512256_update(&st, head, sizeof head);
  crypto_auth_hmacsha512256_update(&st, reinterpret_cast<const unsigned char*>(payload), n);
  std::array<unsigned char, kTag> out;
  crypto_auth_hmacsha512256_final(&st, out.data());
  return out;
}

// Appends the frame of `payload` to `out`.
inline void seal(std::vector<char>& out, const Key& k, std::uint64_t seq, const std::vector<char>& payload) {
  put_u32(out, payload.size());
  out.insert(out.end(), payload.begin(), payload.end());
  const auto tag = frame_tag(k, seq, payload.data(), payload.size());
  out.insert(out.end(), tag.begin(), tag.end());
}

inline bool tag_ok(const Key& k, std::uint64_t seq, const char* payload, std::size_t n, const char* tag) {
  const auto want = frame_tag(k, seq, payload, n);
  return crypto_verify_32(want.data(), reinterpret_cast<const unsigned char*>(tag)) == 0;
}
}  // namespace rkit::rtrain::detail
