// kernels/stream: STREAM's kernels on the GPU (see stream.hpp). One element per thread
// in a grid-stride loop; the products and sums use __dmul_rn/__dadd_rn so that nvcc
// cannot fuse them into an FMA, which would round differently from the reference.
#include <algorithm>
#include <cstddef>

#include "stream.hpp"

namespace rkit::kernels {
namespace {

constexpr unsigned kThreads = 256;
constexpr std::size_t kMaxBlocks = 1u << 20;  // beyond that the grid-stride loop takes over

dim3 grid_for(std::size_t n) {
  return dim3(static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks)));
}

__device__ __forceinline__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

__global__ void copy_kernel(double* dst, const double* x, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dst[i] = x[i];
}

// dst may be x (stream.hpp), so no pointer is __restrict__.
__global__ void scale_kernel(double* dst, const double* x, double q, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dst[i] = __dmul_rn(q, x[i]);
}

__global__ void add_kernel(double* dst, const double* x, const double* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dst[i] = __dadd_rn(x[i], y[i]);
}

__global__ void triad_kernel(double* dst, const double* x, const double* y, double q, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dst[i] = __dadd_rn(x[i], __dmul_rn(q, y[i]));
}

__global__ void fill_kernel(double* x, double value, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) x[i] = value;
}

__global__ void count_mismatches_kernel(const double* x, double expected, std::size_t n, unsigned long long* count) {
  unsigned long long mine = 0;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) mine += !(x[i] == expected);
  if (mine) atomicAdd(count, mine);
}

}  // namespace

cudaError_t stream_copy(double* dst, const double* x, std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  copy_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, x, n);
  return cudaGetLastError();
}

cudaError_t stream_scale(double* dst, const double* x, double q, std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, x, q, n);
  return cudaGetLastError();
}

cudaError_t stream_add(double* dst, const double* x, const double* y, std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, x, y, n);
  return cudaGetLastError();
}

cudaError_t stream_triad(double* dst, const double* x, const double* y, double q, std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  triad_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, x, y, q, n);
  return cudaGetLastError();
}

cudaError_t stream_fill(double* x, double value, std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, value, n);
  return cudaGetLastError();
}

cudaError_t stream_count_mismatches(const double* x, double expected, std::size_t n, unsigned long long* count,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  count_mismatches_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, expected, n, count);
  return cudaGetLastError();
}

}  // namespace rkit::kernels
