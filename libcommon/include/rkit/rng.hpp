// File: rkit/rng.hpp
//
// Random bits that are a pure function of their inputs, the same on every platform, so
// that any value can be computed again (after a restart, on another rank, in a test):
// splitmix64's finaliser, and a counter-based generator built on it. One definition for
// every tool: the bits of rtrain's data, rbench's test patterns and the kernel tests agree.
//
//   CounterRng rng(seed, stream);
//   double u = rng.uniform(i);             // value i of the stream, in [0, 1)
//   std::uint64_t bits = mix64(seed += kGolden64);   // splitmix64, one step
#pragma once

#include <cstdint>

namespace rkit {

// The golden-ratio increment of splitmix64's state.
inline constexpr std::uint64_t kGolden64 = 0x9e3779b97f4a7c15ULL;

// splitmix64's finaliser: a bijection of 64-bit words with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// splitmix64's output for the state `z` before its increment: mix64(z + kGolden64).
constexpr std::uint64_t splitmix64(std::uint64_t z) { return mix64(z + kGolden64); }

// Value i of stream `stream` under `seed`, for any i, with no state to keep.
class CounterRng {
 public:
  constexpr CounterRng(std::uint64_t seed, std::uint64_t stream) : key_(splitmix64(splitmix64(seed) ^ stream)) {}
  // 64 random bits for counter i.
  constexpr std::uint64_t bits(std::uint64_t i) const { return splitmix64(key_ ^ splitmix64(i)); }
  // A double uniform in [0, 1), 53 bits.
  constexpr double uniform(std::uint64_t i) const { return static_cast<double>(bits(i) >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t key_;
};

}  // namespace rkit
