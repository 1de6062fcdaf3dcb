// The CUDA device of rtrain run, built into the plug-in rtrain_cuda.so (CUDA builds
// only; rtrain loads it with dlopen so that rtrain itself needs no CUDA library): cuBLAS
// for the matrix products, kernels/mlp's CUDA kernels for the rest, NCCL for the
// gradient all-reduce, on a stream of its own so that it overlaps the backward pass, and
// for the sharded and model-parallel strategies' collectives (NcclComm).
// Untested on hardware until a GPU is lent: tests/gpu/gpu-check.sh runs it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "comm.hpp"
#include "device.hpp"
#include "device_comm.hpp"
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

// The strategies' collectives on the GPU (device_comm.hpp): NCCL over the group's ranks,
// met through its host communicator (rank 0's unique id broadcast over it). Collectives
// run on one stream in call order; sends and receives on two more, by direction (towards
// higher ranks: a pipeline's activations; towards lower: its gradients), so that no send
// waits behind a receive of the other direction. Each operation first waits for what the
// compute stream has enqueued so far; wait_for makes the compute stream wait for the
// operation's end. Time in collectives: their events' elapsed times, read once done.
class NcclComm final : public DeviceComm {
 public:
  NcclComm(Communicator& host, std::unique_ptr<Communicator> owned, cudaStream_t compute)
      : host_(host), owned_(std::move(owned)), compute_(compute) {
    ncclUniqueId id{};
    if (host_.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_.broadcast(&id, sizeof id, 0);
    check(ncclCommInitRank(&nccl_, host_.world(), id, host_.rank()), "ncclCommInitRank");
    for (cudaStream_t& st : streams_) check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclComm() override {
    drain();
    for (auto& [ticket, op] : ops_) release(op);
    for (cudaEvent_t e : timed_) cudaEventDestroy(e);
    for (cudaEvent_t e : plain_) cudaEventDestroy(e);
    cudaEventDestroy(ready_);
    if (nccl_) ncclCommDestroy(nccl_);
    for (cudaStream_t st : streams_) cudaStreamDestroy(st);
  }

  Communicator& host() const override { return host_; }

  Ticket start_allreduce(float* data, std::size_t n, float scale, std::string what) override {
    add_bytes(Collective::Allreduce, n);
    return enqueue(kCollectives, what, [&](cudaStream_t st) {
      with_op(scale, [&](ncclRedOp_t op) { return ncclAllReduce(data, data, n, ncclFloat, op, nccl_, st); });
    });
  }
  Ticket start_reduce_scatter(float* data, std::size_t block, float scale, float* keep, std::string what) override {
    add_bytes(Collective::ReduceScatter, block * world_size());
    return enqueue(kCollectives, what, [&](cudaStream_t st) {
      with_op(scale, [&](ncclRedOp_t op) { return ncclReduceScatter(data, keep, block, ncclFloat, op, nccl_, st); });
    });
  }
  Ticket start_allgather(float* data, std::size_t block, std::string what) override {
    add_bytes(Collective::Allgather, block * world_size());
    const float* mine = data + static_cast<std::size_t>(rank()) * block;  // in place, as NCCL defines it
    return enqueue(kCollectives, what, [&](cudaStream_t st) {
      check(ncclAllGather(mine, data, block, ncclFloat, nccl_, st), "ncclAllGather");
    });
  }
  Ticket send(int peer, const float* data, std::size_t n) override {
    check_peer(peer);
    sent_.send_recv += n * sizeof(float);
    return enqueue(peer > rank() ? kUp : kDown, "send",
                   [&](cudaStream_t st) { check(ncclSend(data, n, ncclFloat, peer, nccl_, st), "ncclSend"); });
  }
  Ticket recv(int peer, float* data, std::size_t n) override {
    check_peer(peer);
    return enqueue(peer < rank() ? kUp : kDown, "recv",
                   [&](cudaStream_t st) { check(ncclRecv(data, n, ncclFloat, peer, nccl_, st), "ncclRecv"); });
  }
  double wait_for(Ticket t) override {
    if (const auto it = ops_.find(t); it != ops_.end())  // else done and accounted for already
      check(cudaStreamWaitEvent(compute_, it->second.end, 0), "cudaStreamWaitEvent");
    return 0;
  }
  // What is in flight, given up on (the communicator aborted) when NCCL reports an error
  // or nothing moves for the host communicator's timeout.
  void drain() noexcept override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    for (cudaStream_t st : streams_)
      while (nccl_ && cudaStreamQuery(st) == cudaErrorNotReady) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(nccl_, &async);
        if ((async != ncclSuccess && async != ncclInProgress) || std::chrono::steady_clock::now() > deadline) {
          ncclCommAbort(nccl_);
          nccl_ = nullptr;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
  }
  CommCounters counters() const override {
    for (auto it = ops_.begin(); it != ops_.end();) {
      if (cudaEventQuery(it->second.end) != cudaSuccess) {
        ++it;
        continue;
      }
      if (it->second.start) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, it->second.start, it->second.end) == cudaSuccess) sent_.busy_s += ms / 1e3;
      }
      release(it->second);
      it = ops_.erase(it);
    }
    CommCounters c = host_.counters();
    c += sent_;
    return c;
  }
  std::unique_ptr<DeviceComm> subgroup(const std::vector<int>& members, const std::string& name) override {
    std::unique_ptr<Communicator> sub = host_.subgroup(members, name);
    Communicator& ref = *sub;
    return std::make_unique<NcclComm>(ref, std::move(sub), compute_);
  }
  // The host's collectives only: a slice on the host says nothing of when the GPU ran one.
  void set_tracer(Tracer* tracer, int tid) override { host_.set_tracer(tracer, tid); }

 private:
  enum Lane { kCollectives, kUp, kDown };
  struct Op {
    cudaEvent_t start = nullptr, end = nullptr;  // start: collectives only (timed)
  };

  std::size_t world_size() const { return static_cast<std::size_t>(host_.world()); }
  void add_bytes(Collective c, std::size_t floats) {
    sent_[c] += ring_bytes_sent(c, floats * sizeof(float), static_cast<unsigned>(host_.world()));
  }
  void check_peer(int peer) const {
    if (peer < 0 || peer >= host_.world() || peer == host_.rank())
      throw Error(Exit::Software,
                  fmt::format("NCCL send/recv with rank {}: not another rank of {}", peer, host_.world()));
  }
  // NCCL's operator for a sum times `scale`: the sum, the average, else a sum of inputs
  // each multiplied first (destroyed once the call using it is enqueued).
  template <typename Call>
  void with_op(float scale, Call call) {
    if (scale == 1.0f) return check(call(ncclSum), "NCCL collective");
    if (scale == 1.0f / static_cast<float>(host_.world())) return check(call(ncclAvg), "NCCL collective");
    ncclRedOp_t op{};
    check(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, nccl_), "ncclRedOpCreatePreMulSum");
    const ncclResult_t rc = call(op);
    ncclRedOpDestroy(op, nccl_);
    check(rc, "NCCL collective");
  }
  template <typename Launch>
  Ticket enqueue(Lane lane, const std::string& what, Launch launch) {
    if (!nccl_)
      throw Error(Exit::Unavailable, fmt::format("--device cuda: {}: the NCCL communicator was aborted", what));
    const cudaStream_t st = streams_[lane];
    check(cudaEventRecord(ready_, compute_), "cudaEventRecord");  // captured now: reusable at once
    check(cudaStreamWaitEvent(st, ready_, 0), "cudaStreamWaitEvent");
    Op op;
    if (lane == kCollectives) {
      op.start = take(timed_, true);
      check(cudaEventRecord(op.start, st), "cudaEventRecord");
    }
    launch(st);
    op.end = take(lane == kCollectives ? timed_ : plain_, lane == kCollectives);
    check(cudaEventRecord(op.end, st), "cudaEventRecord");
    ops_.emplace(++count_, op);
    return count_;
  }
  static cudaEvent_t take(std::vector<cudaEvent_t>& pool, bool timed) {
    if (!pool.empty()) {
      const cudaEvent_t e = pool.back();
      pool.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
    return e;
  }
  void release(const Op& op) const {
    if (op.start) {
      timed_.push_back(op.start);
      timed_.push_back(op.end);
    } else {
      plain_.push_back(op.end);
    }
  }

  Communicator& host_;
  std::unique_ptr<Communicator> owned_;  // a subgroup's
  cudaStream_t compute_;
  ncclComm_t nccl_ = nullptr;
  std::array<cudaStream_t, 3> streams_{};  // by Lane
  cudaEvent_t ready_ = nullptr;
  mutable std::map<Ticket, Op> ops_;  // in flight, or done and not yet accounted for
  mutable std::vector<cudaEvent_t> timed_, plain_;
  mutable CommCounters sent_;
  Ticket count_ = 0;
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
  void copy(void* dst, const void* src, std::size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpy on the GPU");
  }
  void fill_zero(float* x, std::size_t n) override {
    check(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), "cudaMemset");
  }
  void scale_add(std::size_t n, float beta, float* y, const float* x) override {
    const float one = 1.0f;  // y = 1 x + beta y, in place (cuBLAS allows C = B)
    const int rows = static_cast<int>(n);
    check(cublasSgeam(blas_, CUBLAS_OP_N, CUBLAS_OP_N, rows, 1, &one, x, rows, &beta, y, rows, y, rows), "cublasSgeam");
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
  std::unique_ptr<DeviceComm> collectives(Communicator& comm) override {
    return std::make_unique<NcclComm>(comm, nullptr, stream_);
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
