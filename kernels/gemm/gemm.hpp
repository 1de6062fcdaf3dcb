// File: kernels/gemm/gemm.hpp
//
// Single-precision matrix multiply, row-major: C = alpha * A·B + beta * C, where A is
// m x k (row i at a + i*lda), B is k x n (row i at b + i*ldb) and C is m x n (row i at
// c + i*ldc). As in BLAS, C is not read when beta == 0 (NaNs there do not spread), and
// k == 0 leaves beta * C.
//
//   rkit::kernels::sgemm_ref(m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);        // CPU, everywhere
//   cudaError_t rc = rkit::kernels::sgemm(m, n, k, 1.0f, da, k, db, n, 0.0f, dc, n, stream);
//
// sgemm_ref is the specification: each entry is summed in double, in order of k, and
// rounded once to float. sgemm (CUDA builds only: RKIT_HAVE_CUDA=1) is a tiled kernel,
// 128x128 blocks of C over k-slices of 8, each of 256 threads computing an 8x8
// patch from shared memory (double-buffered), with float4 loads where the pointers
// are 16-byte aligned and the leading dimensions multiples of 4; any m, n, k works.
// Its sums are in float, in another order: it agrees with the reference to within
// about k * FLT_EPSILON * sum|alpha*a*b| + |beta*c| per entry.
#pragma once

#if defined(RKIT_HAVE_CUDA) && RKIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rkit::kernels {

// The CPU reference. Arguments as above; lda >= k, ldb >= n, ldc >= n (not checked).
void sgemm_ref(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c,
               int ldc);

#if defined(RKIT_HAVE_CUDA) && RKIT_HAVE_CUDA
// Enqueues the multiply on `stream` (device pointers) and returns the launch's status:
// cudaErrorInvalidValue for negative sizes, lda < max(1, k), ldb or ldc < max(1, n), or
// m over 8,388,480 rows (the grid's limit); cudaSuccess without a launch when m or n is 0.
// Errors of the kernel itself show at the next synchronisation, as for any launch.
cudaError_t sgemm(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc, cudaStream_t stream);
#endif

}  // namespace rkit::kernels
