// File: stats.hpp
//
// The statistics rbench reports for repeated measurements, and the test that tells
// a real difference between two runs from noise.
//
//   Summary s = summarize(samples);               // median, min, max, mean, cv
//   double p = mann_whitney_p(base, fresh);       // two-sided; small p: a real difference
#pragma once

#include <cstddef>
#include <vector>

namespace rkit::rbench {

struct Summary {
  std::size_t n = 0;
  double median = 0, min = 0, max = 0, mean = 0;
  double stddev = 0;  // sample standard deviation (n - 1)
  double cv = 0;      // stddev / mean; 0 when the mean is 0
};

// Throws std::invalid_argument on an empty sample.
Summary summarize(std::vector<double> samples);

// The samples each test needs for a verdict (the issue: "with >= 9 repetitions").
inline constexpr std::size_t kMinTestSamples = 9;

// Two-sided p-value of the Mann-Whitney U test that a and b come from the same
// distribution (normal approximation with tie and continuity corrections; fine from
// about 8 samples each). 1 when every value is tied.
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace rkit::rbench
