// The CPU reference of kernels/gemm: see gemm.hpp.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "gemm.hpp"

namespace rkit::kernels {

void sgemm_ref(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c,
               int ldc) {
  if (m <= 0 || n <= 0) return;
  std::vector<double> row(static_cast<std::size_t>(n));
  for (int i = 0; i < m; ++i) {
    // Row i of A·B, accumulated in double in order of k (i-k-j: B is read along its rows).
    std::fill(row.begin(), row.end(), 0.0);
    const float* a_row = a + static_cast<std::ptrdiff_t>(i) * lda;
    for (int l = 0; l < k; ++l) {
      const double a_il = a_row[l];
      const float* b_row = b + static_cast<std::ptrdiff_t>(l) * ldb;
      for (int j = 0; j < n; ++j) row[static_cast<std::size_t>(j)] += a_il * static_cast<double>(b_row[j]);
    }
    float* c_row = c + static_cast<std::ptrdiff_t>(i) * ldc;
    for (int j = 0; j < n; ++j) {
      double v = static_cast<double>(alpha) * row[static_cast<std::size_t>(j)];
      if (beta != 0.0f) v += static_cast<double>(beta) * static_cast<double>(c_row[j]);
      c_row[j] = static_cast<float>(v);
    }
  }
}

}  // namespace rkit::kernels
