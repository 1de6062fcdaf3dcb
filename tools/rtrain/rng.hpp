// File: rtrain/rng.hpp
//
// A counter-based random number generator: value i of stream s under seed k is a pure
// function of (k, s, i), so any value can be computed again after a restart, in any
// order, on any rank. It carries no state to checkpoint beyond the seed.
//
//   CounterRng rng(seed, stream);
//   double u = rng.uniform(i);   // in [0, 1)
#pragma once

#include <cstdint>

namespace rkit::rtrain {

// splitmix64's finaliser: a bijection of 64-bit words with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class CounterRng {
 public:
  constexpr CounterRng(std::uint64_t seed, std::uint64_t stream) : key_(mix64(mix64(seed) ^ stream)) {}
  // 64 random bits for counter i.
  constexpr std::uint64_t bits(std::uint64_t i) const { return mix64(key_ ^ mix64(i)); }
  // A double uniform in [0, 1), 53 bits.
  constexpr double uniform(std::uint64_t i) const { return static_cast<double>(bits(i) >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t key_;
};

}  // namespace rkit::rtrain
