// kernels/stream's CPU references (the specification of gpu.stream's kernels): each
// result is the operation rounded once, as written; dst may be an input.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "stream.hpp"

namespace {

using namespace rkit::kernels;

std::vector<double> ramp(std::size_t n, double start) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + 0.1 * static_cast<double>(i);
  return v;
}

TEST(stream_ref, EachKernelComputesItsFormulaExactly) {
  const std::size_t n = 1003;
  const double q = 0.4;
  const std::vector<double> x = ramp(n, 0.3), y = ramp(n, -7.1);
  std::vector<double> dst(n, -1);
  stream_copy_ref(dst.data(), x.data(), n);
  EXPECT_EQ(dst, x);
  stream_scale_ref(dst.data(), x.data(), q, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], q * x[i]) << i;
  stream_add_ref(dst.data(), x.data(), y.data(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], x[i] + y[i]) << i;
  stream_triad_ref(dst.data(), x.data(), y.data(), q, n);
  for (std::size_t i = 0; i < n; ++i) {
    volatile double qy = q * y[i];  // rounded on its own: no fused multiply-add
    ASSERT_EQ(dst[i], x[i] + qy) << i;
  }
}

TEST(stream_ref, InPlaceAndEmpty) {
  std::vector<double> a = {1, 2, 3}, b = {10, 20, 30};
  stream_scale_ref(a.data(), a.data(), 2.0, a.size());
  EXPECT_EQ(a, (std::vector<double>{2, 4, 6}));
  stream_triad_ref(a.data(), a.data(), b.data(), 0.5, a.size());
  EXPECT_EQ(a, (std::vector<double>{7, 14, 21}));
  stream_add_ref(a.data(), a.data(), b.data(), 0);  // n == 0: nothing
  EXPECT_EQ(a, (std::vector<double>{7, 14, 21}));
}

// gpu.stream's recurrence (a=0.1, b=0.2, c=0, q=0.4) stays finite and non-zero for
// far more rounds than any run makes.
TEST(stream_ref, TheSuiteRecurrenceStaysInRange) {
  double a = 0.1, b = 0.2, c = 0.0;
  for (int round = 0; round < 10000; ++round) {
    stream_copy_ref(&c, &a, 1);
    stream_scale_ref(&b, &c, 0.4, 1);
    stream_add_ref(&c, &a, &b, 1);
    stream_triad_ref(&a, &b, &c, 0.4, 1);
  }
  EXPECT_GT(a, 1e-300);
  EXPECT_GT(b, 1e-300);
  EXPECT_GT(c, 1e-300);
}

}  // namespace
