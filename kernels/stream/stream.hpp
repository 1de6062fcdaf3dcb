// File: kernels/stream/stream.hpp
//
// STREAM's four kernels over arrays of n doubles, as gpu.stream measures them, plus
// the helpers that check and fill its arrays:
//   copy   dst = x              scale  dst = q * x
//   add    dst = x + y          triad  dst = x + q * y
//
//   rkit::kernels::stream_triad_ref(a, b, c, 0.4, n);                    // CPU, everywhere
//   cudaError_t rc = rkit::kernels::stream_triad(da, db, dc, 0.4, n, stream);
//
// Each result is rounded as written, with no fused multiply-add (the CUDA kernels use
// __dmul_rn/__dadd_rn, the references are built with -ffp-contract=off), so the CUDA
// kernels and the references agree bit for bit. The arrays must not overlap, except
// that dst may be x itself.
#pragma once

#include <cstddef>

#if defined(RKIT_HAVE_CUDA) && RKIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rkit::kernels {

// The CPU references.
void stream_copy_ref(double* dst, const double* x, std::size_t n);
void stream_scale_ref(double* dst, const double* x, double q, std::size_t n);
void stream_add_ref(double* dst, const double* x, const double* y, std::size_t n);
void stream_triad_ref(double* dst, const double* x, const double* y, double q, std::size_t n);

#if defined(RKIT_HAVE_CUDA) && RKIT_HAVE_CUDA
// Enqueue on `stream` (device pointers); return the launch's status (cudaSuccess
// without a launch when n is 0).
cudaError_t stream_copy(double* dst, const double* x, std::size_t n, cudaStream_t stream);
cudaError_t stream_scale(double* dst, const double* x, double q, std::size_t n, cudaStream_t stream);
cudaError_t stream_add(double* dst, const double* x, const double* y, std::size_t n, cudaStream_t stream);
cudaError_t stream_triad(double* dst, const double* x, const double* y, double q, std::size_t n, cudaStream_t stream);
// x[i] = value for every i.
cudaError_t stream_fill(double* x, double value, std::size_t n, cudaStream_t stream);
// Adds to *count (device memory, the caller zeroes it) the number of i with x[i] != expected
// (a NaN never equals).
cudaError_t stream_count_mismatches(const double* x, double expected, std::size_t n, unsigned long long* count,
                                    cudaStream_t stream);
#endif

}  // namespace rkit::kernels
