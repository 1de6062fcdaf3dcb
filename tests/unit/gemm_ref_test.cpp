// kernels/gemm's CPU reference (the specification of the CUDA kernel) against a long
// double triple loop and against OpenBLAS, on odd shapes, padded leading dimensions and
// the BLAS corner cases (beta == 0 does not read C, k == 0, m or n == 0). Suites are
// named after the files under test (gemm_ref.cpp) so that `ctest -R gemm` finds them.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gemm.hpp"
#include "rkit/rng.hpp"

namespace {

using rkit::kernels::sgemm_ref;

struct Shape {
  int m, n, k;
};

// Row-major matrices with padding: A m x k (lda), B k x n (ldb), C m x n (ldc).
struct Problem {
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
  std::vector<float> a, b, c;
};

float random_value(std::uint64_t& seed) {
  const std::uint64_t z = rkit::mix64(seed += rkit::kGolden64);
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1p-52 - 1.0);
}

constexpr float kPadding = 1234.5f;  // every element outside the matrices: must stay as it is

Problem make_problem(Shape s, int pad, float alpha, float beta, std::uint64_t seed) {
  Problem p{s.m, s.n, s.k, s.k + pad, s.n + pad, s.n + pad, alpha, beta, {}, {}, {}};
  p.a.assign(static_cast<std::size_t>(std::max(p.m, 1)) * p.lda, kPadding);
  p.b.assign(static_cast<std::size_t>(std::max(p.k, 1)) * p.ldb, kPadding);
  p.c.assign(static_cast<std::size_t>(std::max(p.m, 1)) * p.ldc, kPadding);
  for (int i = 0; i < p.m; ++i)
    for (int l = 0; l < p.k; ++l) p.a[static_cast<std::size_t>(i) * p.lda + l] = random_value(seed);
  for (int l = 0; l < p.k; ++l)
    for (int j = 0; j < p.n; ++j) p.b[static_cast<std::size_t>(l) * p.ldb + j] = random_value(seed);
  for (int i = 0; i < p.m; ++i)
    for (int j = 0; j < p.n; ++j) p.c[static_cast<std::size_t>(i) * p.ldc + j] = random_value(seed);
  return p;
}

// alpha * sum_l a_il b_lj + beta * c_ij in long double, and the sum of the terms'
// magnitudes (the scale of the rounding errors any order of summation makes).
struct Exact {
  long double value, magnitude;
};
Exact exact_entry(const Problem& p, int i, int j) {
  long double sum = 0, magnitude = 0;
  for (int l = 0; l < p.k; ++l) {
    const long double term = static_cast<long double>(p.a[static_cast<std::size_t>(i) * p.lda + l]) *
                             p.b[static_cast<std::size_t>(l) * p.ldb + j];
    sum += term;
    magnitude += std::fabs(term);
  }
  const long double c = p.c[static_cast<std::size_t>(i) * p.ldc + j];
  long double value = static_cast<long double>(p.alpha) * sum;
  if (p.beta != 0) value += static_cast<long double>(p.beta) * c;
  return {value, std::fabs(static_cast<long double>(p.alpha)) * magnitude +
                     (p.beta != 0 ? std::fabs(static_cast<long double>(p.beta) * c) : 0)};
}

const Shape kShapes[] = {{1, 1, 1},       {1, 7, 3},   {3, 5, 7},   {17, 33, 65},  {64, 64, 64},
                         {127, 129, 131}, {5, 1, 300}, {1, 200, 9}, {128, 128, 8}, {129, 127, 257}};

TEST(gemm_ref, MatchesALongDoubleTripleLoopToOneRounding) {
  for (Shape s : kShapes) {
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.5f, -0.5f}, std::pair{-2.0f, 1.0f}}) {
      for (int pad : {0, 3}) {
        SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k << " alpha " << alpha << " beta " << beta
                                        << " pad " << pad);
        Problem p = make_problem(s, pad, alpha, beta, 7);
        const Problem before = p;
        sgemm_ref(p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta, p.c.data(), p.ldc);
        for (int i = 0; i < p.m; ++i) {
          for (int j = 0; j < p.ldc; ++j) {
            const float got = p.c[static_cast<std::size_t>(i) * p.ldc + j];
            if (j >= p.n) {
              ASSERT_EQ(got, kPadding) << "padding of C written at " << i << "," << j;
              continue;
            }
            // Summed in double and rounded once: half an ulp of float, plus double's
            // own rounding (far below it).
            const Exact e = exact_entry(before, i, j);
            const long double tolerance = std::fabs(e.value) * FLT_EPSILON / 2 + e.magnitude * 1e-13L;
            ASSERT_LE(std::fabs(got - e.value), tolerance) << "C[" << i << "][" << j << "]";
          }
        }
        EXPECT_EQ(p.a, before.a);
        EXPECT_EQ(p.b, before.b);
      }
    }
  }
}

TEST(gemm_ref, AgreesWithOpenBlas) {
  for (Shape s : kShapes) {
    SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k);
    Problem p = make_problem(s, 2, 0.75f, 0.25f, 11);
    std::vector<float> blas = p.c;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                p.beta, blas.data(), p.ldc);
    const Problem before = p;
    sgemm_ref(p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta, p.c.data(), p.ldc);
    for (int i = 0; i < p.m; ++i)
      for (int j = 0; j < p.n; ++j) {
        // OpenBLAS sums k products in float, in its own order: within (k + 2) eps of the
        // magnitudes (the classic bound), here doubled.
        const Exact e = exact_entry(before, i, j);
        const std::size_t at = static_cast<std::size_t>(i) * p.ldc + j;
        ASSERT_LE(std::fabs(static_cast<long double>(p.c[at]) - blas[at]), 2 * (p.k + 2) * FLT_EPSILON * e.magnitude)
            << "C[" << i << "][" << j << "]";
      }
  }
}

TEST(gemm_ref, BetaZeroDoesNotReadC) {
  Problem p = make_problem({9, 11, 13}, 1, 1.0f, 0.0f, 3);
  for (int i = 0; i < p.m; ++i)
    for (int j = 0; j < p.n; ++j)
      p.c[static_cast<std::size_t>(i) * p.ldc + j] = std::numeric_limits<float>::quiet_NaN();
  sgemm_ref(p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta, p.c.data(), p.ldc);
  for (int i = 0; i < p.m; ++i)
    for (int j = 0; j < p.n; ++j)
      ASSERT_TRUE(std::isfinite(p.c[static_cast<std::size_t>(i) * p.ldc + j])) << i << "," << j;
}

TEST(gemm_ref, KZeroScalesCByBeta) {
  Problem p = make_problem({4, 6, 0}, 0, 3.0f, 0.5f, 5);
  const std::vector<float> before = p.c;
  sgemm_ref(p.m, p.n, 0, p.alpha, p.a.data(), 1, p.b.data(), p.ldb, p.beta, p.c.data(), p.ldc);
  for (std::size_t i = 0; i < p.c.size(); ++i) EXPECT_EQ(p.c[i], before[i] * 0.5f) << i;
}

TEST(gemm_ref, EmptyMatricesTouchNothing) {
  std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, kPadding);
  sgemm_ref(0, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
  sgemm_ref(2, 0, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
  for (float x : c) EXPECT_EQ(x, kPadding);
}

}  // namespace
