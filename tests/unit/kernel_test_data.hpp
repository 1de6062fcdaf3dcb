// File: tests/unit/kernel_test_data.hpp
//
// Inputs and comparisons shared by the kernels' tests on the CPU (mlp_kernels_test.cpp)
// and on a GPU (tests/gpu/kernels_gpu_test.cpp): reproducible pseudo-random values,
// pre-activations with the edge cases sprinkled in, and float distances.
//
//   std::uint64_t seed = 7;
//   double x = rkit::kernel_tests::random_value(seed);             // in [-1, 1), advances seed
//   std::vector<float> z = rkit::kernel_tests::pre_activations(1000, 3);
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "rkit/rng.hpp"

namespace rkit::kernel_tests {

using rkit::mix64;  // the tests' random values: rkit/rng.hpp

// The next value of the sequence `seed` names, in [-1, 1).
inline double random_value(std::uint64_t& seed) {
  return static_cast<double>(mix64(seed += kGolden64) >> 11) * 0x1p-52 - 1.0;
}

// n values in [-scale, scale).
inline std::vector<float> random_floats(std::size_t n, double scale, std::uint64_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * random_value(seed));
  return v;
}

// Pre-activations: random in [-4, 4), every 7th one an edge case (signed zeros, large
// magnitudes, the fast erf's clamp at ±3.92, tiny values).
inline std::vector<float> pre_activations(std::size_t n, std::uint64_t seed) {
  std::vector<float> v = random_floats(n, 4.0, seed);
  constexpr float kSpecial[] = {0.0f, -0.0f, 1.0f, -1.0f, 10.0f, -10.0f, 30.0f, -30.0f, 1e-30f, -1e-30f,
                                5.5f, -5.5f, 1e4f, -1e4f, 3.92f, -3.92f, 6.2f,  -6.2f,  0.5f,   -7.0f};
  for (std::size_t i = 0; i < n; i += 7) v[i] = kSpecial[(i / 7) % std::size(kSpecial)];
  return v;
}

// Distance in representable floats (0 for +0 and -0, and between two NaNs).
inline std::int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<int>::max();
  auto ordered = [](float f) {
    const auto bits = std::bit_cast<std::uint32_t>(f);
    const std::int64_t magnitude = bits & 0x7fffffffu;
    return (bits >> 31) ? -magnitude : magnitude;
  };
  return std::llabs(ordered(a) - ordered(b));
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace rkit::kernel_tests
