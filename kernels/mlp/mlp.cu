// kernels/mlp: the MLP's bias + activation, losses, squared norm and AdamW on the GPU
// (see mlp.hpp).
//
// Elementwise work is one element per thread in a grid-stride loop. Every sum is
// deterministic: each thread adds its elements in a fixed order (in double), a block
// combines its threads' sums in a fixed tree in shared memory (or a warp by a xor
// butterfly), and a second kernel adds the blocks' sums in a fixed order; how the work
// is split depends only on the sizes, never on the device or on timing, and no float
// is added atomically. Where the blocks' sums need room (more than one block), it is
// taken from the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on `stream`).
//
// AdamW uses __fmul_rn, __fadd_rn, __fdiv_rn and __fsqrt_rn so that nvcc can neither
// fuse nor approximate: it rounds as adamw_update_ref does, bit for bit.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "mlp.hpp"

namespace rkit::kernels {
namespace {

constexpr unsigned kThreads = 256;
constexpr std::size_t kMaxBlocks = 1u << 20;  // beyond that the grid-stride loop takes over
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

dim3 grid_for(std::size_t count) {
  return dim3(static_cast<unsigned>(std::min((count + kThreads - 1) / kThreads, kMaxBlocks)));
}

__device__ __forceinline__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// The sum of every thread's `value` in the block (blockDim.x a power of two, at most
// 1024), in a fixed tree; the result in thread 0. `scratch` holds blockDim.x doubles.
__device__ double block_sum(double value, double* scratch) {
  const unsigned t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    if (t < width) scratch[t] += scratch[t + width];
    __syncthreads();
  }
  return scratch[0];
}

// *out = values[0] + ... + values[count - 1], one block of kFinalThreads: thread t adds
// values t, t + kFinalThreads, ... in order, then the block's tree.
constexpr unsigned kFinalThreads = 1024;
__global__ void final_sum_kernel(std::size_t count, const double* values, double* out) {
  __shared__ double scratch[kFinalThreads];
  double sum = 0;
  for (std::size_t at = threadIdx.x; at < count; at += kFinalThreads) sum += values[at];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *out = sum;
}

// Blocks of the first pass of a sum over `count` elements: about 2048 elements a block,
// at most kFinalThreads blocks (the final pass's width).
unsigned reduction_blocks(std::size_t count) {
  const std::size_t per_block = std::size_t{kThreads} * 8;
  return static_cast<unsigned>(std::clamp<std::size_t>((count + per_block - 1) / per_block, 1, kFinalThreads));
}

// Device memory for a kernel's partial sums, freed (stream-ordered) on destruction.
class Partials {
 public:
  Partials(std::size_t count, cudaStream_t stream) : stream_(stream) {
    if (count > 0) rc_ = cudaMallocAsync(reinterpret_cast<void**>(&ptr_), count * sizeof(double), stream);
  }
  ~Partials() {
    if (ptr_) (void)cudaFreeAsync(ptr_, stream_);
  }
  Partials(const Partials&) = delete;
  Partials& operator=(const Partials&) = delete;
  cudaError_t status() const { return rc_; }
  double* get() const { return ptr_; }

 private:
  double* ptr_ = nullptr;
  cudaStream_t stream_;
  cudaError_t rc_ = cudaSuccess;
};

// --- bias + activation ---------------------------------------------------------------

template <Activation kAct>
__device__ __forceinline__ float activate(float z) {
  if constexpr (kAct == Activation::Gelu) return z * normcdff(z);
  if constexpr (kAct == Activation::Relu) return z < 0.0f ? 0.0f : z;  // as the reference: NaN stays NaN
  return z;
}

// dy * act'(z).
template <Activation kAct>
__device__ __forceinline__ float backprop(float z, float dy) {
  if constexpr (kAct == Activation::Gelu) return dy * (normcdff(z) + z * (kInvSqrt2Pi * expf(-0.5f * z * z)));
  if constexpr (kAct == Activation::Relu) return __fmul_rn(dy, z > 0.0f ? 1.0f : 0.0f);  // a NaN dy spreads
  return dy;
}

template <Activation kAct>
__global__ void forward_kernel(std::size_t count, std::size_t n, const float* bias, float* z, float* y) {
  for (std::size_t at = first_index(); at < count; at += grid_stride()) {
    const float v = __fadd_rn(z[at], bias[at % n]);
    z[at] = v;
    y[at] = activate<kAct>(v);
  }
}

template <Activation kAct>
cudaError_t launch_forward(std::size_t m, std::size_t n, const float* bias, float* z, float* y, cudaStream_t stream) {
  const std::size_t count = m * n;
  forward_kernel<kAct><<<grid_for(count), kThreads, 0, stream>>>(count, n, bias, z, y);
  return cudaGetLastError();
}

// Backward: block (32, kRowThreads) covers 32 columns of one chunk of rows; thread
// (x, y) sums the rows y, y + kRowThreads, ... of its chunk for column x, the block
// adds its kRowThreads sums in a tree, and with one chunk writes dbias, else its
// chunk's row of `partial` (chunks x n), which column_sums_kernel adds in order.
constexpr unsigned kTileColumns = 32, kRowThreads = 8;
constexpr std::size_t kRowsPerChunk = 256;
constexpr std::size_t kMaxChunks = 65535;  // gridDim.y

std::size_t rows_per_chunk(std::size_t m) { return std::max(kRowsPerChunk, (m + kMaxChunks - 1) / kMaxChunks); }

template <Activation kAct>
__global__ void backward_kernel(std::size_t m, std::size_t n, std::size_t chunk_rows, const float* z, const float* dy,
                                float* dz, double* partial, float* dbias) {
  __shared__ double sums[kRowThreads][kTileColumns];
  const std::size_t j = static_cast<std::size_t>(blockIdx.x) * kTileColumns + threadIdx.x;
  const std::size_t row_begin = static_cast<std::size_t>(blockIdx.y) * chunk_rows;
  const std::size_t row_end = min(m, row_begin + chunk_rows);
  double sum = 0;
  if (j < n) {
    for (std::size_t i = row_begin + threadIdx.y; i < row_end; i += kRowThreads) {
      const std::size_t at = i * n + j;
      const float d = backprop<kAct>(z[at], dy[at]);
      dz[at] = d;
      sum += d;
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (unsigned width = kRowThreads / 2; width > 0; width /= 2) {
    if (threadIdx.y < width) sums[threadIdx.y][threadIdx.x] += sums[threadIdx.y + width][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < n) {
    if (dbias)
      dbias[j] = static_cast<float>(sums[0][threadIdx.x]);
    else
      partial[static_cast<std::size_t>(blockIdx.y) * n + j] = sums[0][threadIdx.x];
  }
}

__global__ void column_sums_kernel(std::size_t chunks, std::size_t n, const double* partial, float* dbias) {
  for (std::size_t j = first_index(); j < n; j += grid_stride()) {
    double sum = 0;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) sum += partial[chunk * n + j];
    dbias[j] = static_cast<float>(sum);
  }
}

template <Activation kAct>
cudaError_t launch_backward(std::size_t m, std::size_t n, const float* z, const float* dy, float* dz, float* dbias,
                            cudaStream_t stream) {
  const std::size_t chunk_rows = rows_per_chunk(m);
  const std::size_t chunks = (m + chunk_rows - 1) / chunk_rows;
  const dim3 grid(static_cast<unsigned>((n + kTileColumns - 1) / kTileColumns), static_cast<unsigned>(chunks));
  const dim3 block(kTileColumns, kRowThreads);
  if (chunks == 1) {
    backward_kernel<kAct><<<grid, block, 0, stream>>>(m, n, chunk_rows, z, dy, dz, nullptr, dbias);
    return cudaGetLastError();
  }
  Partials partial(chunks * n, stream);
  if (partial.status() != cudaSuccess) return partial.status();
  backward_kernel<kAct><<<grid, block, 0, stream>>>(m, n, chunk_rows, z, dy, dz, partial.get(), nullptr);
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  column_sums_kernel<<<grid_for(n), kThreads, 0, stream>>>(chunks, n, partial.get(), dbias);
  return cudaGetLastError();
}

// --- losses and the squared norm -----------------------------------------------------

// Block b's sum of (pred - target)^2 into partial[b] (or *out with one block); dpred as
// the reference computes it.
__global__ void mse_kernel(std::size_t count, const float* pred, const float* target, double twice_scale, float* dpred,
                           double* partial, double* out) {
  __shared__ double scratch[kThreads];
  double sum = 0;
  for (std::size_t at = first_index(); at < count; at += grid_stride()) {
    const double d = static_cast<double>(pred[at]) - static_cast<double>(target[at]);
    sum = __fma_rn(d, d, sum);
    dpred[at] = static_cast<float>(__dmul_rn(twice_scale, d));
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) (partial ? partial[blockIdx.x] : *out) = sum;
}

__global__ void sum_squares_kernel(std::size_t count, const float* x, double* partial, double* out) {
  __shared__ double scratch[kThreads];
  double sum = 0;
  for (std::size_t at = first_index(); at < count; at += grid_stride()) {
    const double v = x[at];
    sum = __fma_rn(v, v, sum);
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) (partial ? partial[blockIdx.x] : *out) = sum;
}

// One warp per row: the max and the sum of exp(logit - max) by xor butterflies (every
// lane ends with the same, deterministic value), the row's loss into row_loss[row], then
// the gradient. The label's logit is read before the __syncwarp that precedes any write,
// so dlogits may be logits.
constexpr unsigned kWarp = 32;
__global__ void cross_entropy_kernel(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                                     float scale, float* dlogits, double* row_loss) {
  const std::size_t row = first_index() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= m) return;  // the whole warp: kThreads is a multiple of 32
  const float* in = logits + row * c;
  float* out = dlogits + row * c;
  const auto label = static_cast<std::size_t>(labels[row]);
  const float at_label = in[label];
  float max = in[0];
  for (std::size_t j = lane; j < c; j += kWarp) max = fmaxf(max, in[j]);
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2)
    max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
  double sum = 0;
  for (std::size_t j = lane; j < c; j += kWarp) sum += static_cast<double>(expf(in[j] - max));
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) row_loss[row] = (static_cast<double>(max) - static_cast<double>(at_label)) + log(sum);
  __syncwarp();
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (std::size_t j = lane; j < c; j += kWarp) {
    const float p = __fmul_rn(expf(in[j] - max), inv_sum);
    out[j] = __fsub_rn(__fmul_rn(scale, p), j == label ? scale : 0.0f);
  }
}

// --- AdamW ---------------------------------------------------------------------------

__global__ void adamw_kernel(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                             AdamwStep s) {
  const float decay = __fsub_rn(1.0f, __fmul_rn(s.lr, s.weight_decay));
  const float one_minus_beta1 = __fsub_rn(1.0f, s.beta1);
  const float one_minus_beta2 = __fsub_rn(1.0f, s.beta2);
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float g = __fmul_rn(s.grad_scale, grads[i]);
    const float p = __fmul_rn(params[i], decay);
    const float m = __fadd_rn(__fmul_rn(s.beta1, exp_avg[i]), __fmul_rn(one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(s.beta2, exp_avg_sq[i]), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias2_sqrt), s.eps);
    params[i] = __fsub_rn(p, __fdiv_rn(__fmul_rn(s.step_size, m), denom));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace

cudaError_t bias_act_forward(Activation act, std::size_t m, std::size_t n, const float* bias, float* z, float* y,
                             cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  switch (act) {
    case Activation::Identity: return launch_forward<Activation::Identity>(m, n, bias, z, y, stream);
    case Activation::Relu: return launch_forward<Activation::Relu>(m, n, bias, z, y, stream);
    case Activation::Gelu: return launch_forward<Activation::Gelu>(m, n, bias, z, y, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t bias_act_backward(Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                              float* dbias, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (m == 0) return cudaMemsetAsync(dbias, 0, n * sizeof(float), stream);  // empty sums
  switch (act) {
    case Activation::Identity: return launch_backward<Activation::Identity>(m, n, z, dy, dz, dbias, stream);
    case Activation::Relu: return launch_backward<Activation::Relu>(m, n, z, dy, dz, dbias, stream);
    case Activation::Gelu: return launch_backward<Activation::Gelu>(m, n, z, dy, dz, dbias, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t mse_loss(std::size_t m, std::size_t k, const float* pred, const float* target, float scale, float* dpred,
                     double* out, cudaStream_t stream) {
  const std::size_t count = m * k;
  if (count == 0) return cudaMemsetAsync(out, 0, sizeof(double), stream);
  const double twice_scale = 2.0 * static_cast<double>(scale);
  const unsigned blocks = reduction_blocks(count);
  if (blocks == 1) {
    mse_kernel<<<1, kThreads, 0, stream>>>(count, pred, target, twice_scale, dpred, nullptr, out);
    return cudaGetLastError();
  }
  Partials partial(blocks, stream);
  if (partial.status() != cudaSuccess) return partial.status();
  mse_kernel<<<blocks, kThreads, 0, stream>>>(count, pred, target, twice_scale, dpred, partial.get(), nullptr);
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  final_sum_kernel<<<1, kFinalThreads, 0, stream>>>(blocks, partial.get(), out);
  return cudaGetLastError();
}

cudaError_t cross_entropy_loss(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                               float scale, float* dlogits, double* out, cudaStream_t stream) {
  if (m == 0 || c == 0) return cudaMemsetAsync(out, 0, sizeof(double), stream);
  Partials row_loss(m, stream);
  if (row_loss.status() != cudaSuccess) return row_loss.status();
  const std::size_t rows_per_block = kThreads / kWarp;
  const auto blocks = static_cast<unsigned>((m + rows_per_block - 1) / rows_per_block);
  cross_entropy_kernel<<<blocks, kThreads, 0, stream>>>(m, c, logits, labels, scale, dlogits, row_loss.get());
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  final_sum_kernel<<<1, kFinalThreads, 0, stream>>>(m, row_loss.get(), out);
  return cudaGetLastError();
}

cudaError_t sum_squares(std::size_t n, const float* x, double* out, cudaStream_t stream) {
  if (n == 0) return cudaMemsetAsync(out, 0, sizeof(double), stream);
  const unsigned blocks = reduction_blocks(n);
  if (blocks == 1) {
    sum_squares_kernel<<<1, kThreads, 0, stream>>>(n, x, nullptr, out);
    return cudaGetLastError();
  }
  Partials partial(blocks, stream);
  if (partial.status() != cudaSuccess) return partial.status();
  sum_squares_kernel<<<blocks, kThreads, 0, stream>>>(n, x, partial.get(), nullptr);
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  final_sum_kernel<<<1, kFinalThreads, 0, stream>>>(blocks, partial.get(), out);
  return cudaGetLastError();
}

cudaError_t adamw_update(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                         const AdamwStep& s, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, params, grads, exp_avg, exp_avg_sq, s);
  return cudaGetLastError();
}

}  // namespace rkit::kernels
