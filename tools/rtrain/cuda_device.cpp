// The CUDA device of rtrain run, built into the plug-in rtrain_cuda.so (CUDA builds
// only; rtrain loads it with dlopen so that rtrain itself needs no CUDA library): cuBLAS
// for the matrix products, kernels/mlp's CUDA kernels for the rest, NCCL for the
// gradient all-reduce, on a stream of its own so that it overlaps the backward pass.
// Untested on hardware until a GPU is lent: tests/gpu/gpu-check.sh runs it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "comm.hpp"
#include "device.hpp"
#include "rkit/error.hpp"

namespace rkit::rtrain {
namespace {

namespace k = kernels;

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw Error(Exit::Software, fmt::format("--device cuda: {}: {}", what, cudaGetErrorString(rc)));
}
void check(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(Exit::Software, fmt::format("--device cuda: {}: cuBLAS status {}", what, static_cast<int>(rc)));
}
void check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess)
    throw Error(Exit::Unavailable, fmt::format("--device cuda: {}: {}", what, ncclGetErrorString(rc)));
}

// Buckets all-reduced (averaged) by NCCL on a stream of their own, each after the
// compute stream has produced its gradients.
class NcclReducer : public GradReducer {
 public:
  NcclReducer(Communicator& comm, cudaStream_t compute, float* grads,
              std::vector<std::pair<std::size_t, std::size_t>> buckets, float scale)
      : compute_(compute), grads_(grads), buckets_(std::move(buckets)), world_(comm.world()) {
    (void)scale;  // ncclAvg divides by the world size, the scale rtrain asks for
    if (world_ > 1) {
      ncclUniqueId id{};
      if (comm.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      comm.broadcast(&id, sizeof id, 0);
      check(ncclCommInitRank(&nccl_, world_, id, comm.rank()), "ncclCommInitRank");
    }
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (cudaEvent_t* e : {&start_, &compute_done_, &comm_done_}) check(cudaEventCreate(e), "cudaEventCreate");
    ready_events_.resize(buckets_.size());
    for (cudaEvent_t& e : ready_events_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclReducer() override {
    if (nccl_) ncclCommDestroy(nccl_);
    for (cudaEvent_t e : ready_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : {start_, compute_done_, comm_done_}) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }
  void begin_step() override {
    started_ = false;
    bytes_ = 0;
  }
  void ready(std::size_t b) override {
    if (world_ == 1) return;
    check(cudaEventRecord(ready_events_[b], compute_), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream_, ready_events_[b], 0), "cudaStreamWaitEvent");
    if (!started_) check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    started_ = true;
    float* p = grads_ + buckets_[b].first;
    bytes_ += ring_bytes_sent(Collective::Allreduce, buckets_[b].second * sizeof(float), static_cast<unsigned>(world_));
    check(ncclAllReduce(p, p, buckets_[b].second, ncclFloat, ncclAvg, nccl_, stream_), "ncclAllReduce");
  }
  CommTimes wait() override {
    CommTimes t;
    if (world_ == 1 || !started_) return t;
    check(cudaEventRecord(comm_done_, stream_), "cudaEventRecord");
    check(cudaEventRecord(compute_done_, compute_), "cudaEventRecord");
    check(cudaStreamWaitEvent(compute_, comm_done_, 0), "cudaStreamWaitEvent");  // the optimizer sees summed gradients
    check(cudaEventSynchronize(comm_done_), "cudaEventSynchronize");
    check(cudaEventSynchronize(compute_done_), "cudaEventSynchronize");
    float comm_ms = 0, tail_ms = 0;
    check(cudaEventElapsedTime(&comm_ms, start_, comm_done_), "cudaEventElapsedTime");
    check(cudaEventElapsedTime(&tail_ms, compute_done_, comm_done_), "cudaEventElapsedTime");
    t.comm_s = comm_ms / 1e3;
    t.exposed_s = std::max(0.0f, tail_ms) / 1e3;  // the all-reduce's part after the backward pass ended
    t.bytes_sent = bytes_;                        // NCCL's ring (its all-reduce on a few ranks): the textbook volume
    return t;
  }

 private:
  cudaStream_t compute_, stream_ = nullptr;
  float* grads_;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  int world_;
  ncclComm_t nccl_ = nullptr;
  std::vector<cudaEvent_t> ready_events_;
  cudaEvent_t start_ = nullptr, compute_done_ = nullptr, comm_done_ = nullptr;
  bool started_ = false;
  std::uint64_t bytes_ = 0;
};

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int local_rank) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count == 0) throw Error(Exit::Unavailable, "--device cuda: no GPU visible");
    ordinal_ = local_rank % count;
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties");
    name_ = fmt::format("cuda:{} {}", ordinal_, prop.name);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
    check(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");  // fp32, no TF32: as the CPU
    scalar_ = static_cast<double*>(alloc_bytes(sizeof(double)));
  }
  ~CudaDevice() override {
    cudaStreamSynchronize(stream_);
    for (void* p : blocks_) cudaFree(p);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return name_; }
  std::string libraries() const override {
    int runtime = 0, blas = 0, nccl = 0;
    cudaRuntimeGetVersion(&runtime);  // 1000 major + 10 minor
    cublasGetVersion(blas_, &blas);   // 10000 major + 100 minor + patch, as NCCL's since 2.9
    ncclGetVersion(&nccl);
    auto dotted = [](int v) { return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100); };
    return fmt::format("CUDA runtime {}.{}, cuBLAS {}, NCCL {}", runtime / 1000, runtime % 1000 / 10, dotted(blas),
                       dotted(nccl));
  }
  void* alloc_bytes(std::size_t bytes) override {
    void* p = nullptr;
    if (const cudaError_t rc = cudaMalloc(&p, std::max<std::size_t>(bytes, 1)); rc != cudaSuccess)
      throw Error(Exit::Unavailable, fmt::format("--device cuda: cannot allocate {} bytes on {}: {}", bytes, name_,
                                                 cudaGetErrorString(rc)));
    blocks_.push_back(p);
    check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemset");
    return p;
  }
  void copy_in(void* dst, const void* host, std::size_t bytes) override {
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy to the GPU");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // the host buffer may change next
  }
  void copy_out(void* host, const void* src, std::size_t bytes) override {
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy from the GPU");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void gemm(bool ta, bool tb, int m, int n, int kk, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) override {
    // Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: the operands swap.
    check(cublasSgemm(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, kk, &alpha, b, ldb,
                      a, lda, &beta, c, ldc),
          "cublasSgemm");
  }
  void bias_act_forward(k::Activation act, std::size_t m, std::size_t n, const float* bias, float* z,
                        float* y) override {
    check(k::bias_act_forward(act, m, n, bias, z, y, stream_), "bias_act_forward");
  }
  void bias_act_backward(k::Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                         float* dbias) override {
    check(k::bias_act_backward(act, m, n, z, dy, dz, dbias, stream_), "bias_act_backward");
  }
  double mse_loss(std::size_t m, std::size_t kk, const float* pred, const float* target, float scale,
                  float* dpred) override {
    check(k::mse_loss(m, kk, pred, target, scale, dpred, scalar_, stream_), "mse_loss");
    return read_scalar();
  }
  double cross_entropy_loss(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels, float scale,
                            float* dlogits) override {
    check(k::cross_entropy_loss(m, c, logits, labels, scale, dlogits, scalar_, stream_), "cross_entropy_loss");
    return read_scalar();
  }
  std::size_t count_correct(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels) override {
    std::vector<float> host_logits(m * c);
    std::vector<std::int32_t> host_labels(m);
    copy_out(host_logits.data(), logits, host_logits.size() * sizeof(float));
    copy_out(host_labels.data(), labels, host_labels.size() * sizeof(std::int32_t));
    return k::count_correct_ref(m, c, host_logits.data(), host_labels.data());  // evaluation only
  }
  double sum_squares(std::size_t n, const float* x) override {
    check(k::sum_squares(n, x, scalar_, stream_), "sum_squares");
    return read_scalar();
  }
  void adamw(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
             const k::AdamwStep& s) override {
    check(k::adamw_update(n, params, grads, exp_avg, exp_avg_sq, s, stream_), "adamw_update");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  std::unique_ptr<GradReducer> make_reducer(Communicator& comm, float* grads,
                                            std::vector<std::pair<std::size_t, std::size_t>> buckets,
                                            float scale) override {
    return std::make_unique<NcclReducer>(comm, stream_, grads, std::move(buckets), scale);
  }

 private:
  double read_scalar() {
    double v = 0;
    copy_out(&v, scalar_, sizeof v);
    return v;
  }
  int ordinal_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  double* scalar_ = nullptr;
  std::vector<void*> blocks_;
};

}  // namespace
}  // namespace rkit::rtrain

// The plug-in's entry point (device.cpp): a CudaDevice, or null with `error` set.
extern "C" __attribute__((visibility("default"))) rkit::rtrain::Device* rkit_rtrain_make_cuda_device(
    int local_rank, char* error, std::size_t error_size) {
  try {
    return new rkit::rtrain::CudaDevice(local_rank);
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}
