// File: rtrain/device.hpp
//
// Where `rtrain run` keeps its tensors and runs its operators: the CPU (OpenBLAS for
// the matrix products, kernels/mlp's *_cpu operators for the rest) or, through the
// plug-in rtrain_cuda.so, a CUDA GPU (cuBLAS and kernels/mlp's CUDA kernels). The
// trainer (model.hpp) is written once against this interface.
//
//   std::unique_ptr<Device> dev = make_device("cpu", threads);
//   float* w = dev->alloc(n);                       // zeroed, on the device
//   dev->copy_in(w, host.data(), n * sizeof(float));
//   dev->gemm(false, true, m, n, k, 1.0f, x, k, w, k, 0.0f, z, n);   // z = x·wᵀ
//
// Arrays are row-major float32 unless named otherwise. Operators are enqueued in order;
// results read back (copy_out, the returned sums) reflect every operator before them.
// A Device is used from one thread, except that the gradient reducer may read the
// gradients once ready_event() has been passed for them. Errors: Error(Unavailable)
// when the device cannot be used, Error(Software) for a failed operator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mlp.hpp"

namespace rkit::rtrain {

class Communicator;
class DeviceComm;

// Gradient all-reduce in buckets, overlapped with the backward pass (see comm.hpp's
// Communicator for the CPU one): set once, then per step begin, ready per bucket, wait.
struct CommTimes;
class GradReducer {
 public:
  virtual ~GradReducer() = default;
  virtual void begin_step() = 0;
  virtual void ready(std::size_t bucket) = 0;  // the bucket's gradients are enqueued on the device
  virtual CommTimes wait() = 0;                // every bucket summed and scaled
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu (2 threads)", "cuda:0 NVIDIA H200"
  // The libraries it computes and communicates with, by version, for the run's record:
  // "CUDA runtime 13.0, cuBLAS 13.1.0, NCCL 2.28.3"; "" when there are none beyond rkit's.
  virtual std::string libraries() const { return ""; }
  virtual void* alloc_bytes(std::size_t bytes) = 0;  // zeroed; freed with the device
  float* alloc(std::size_t n) { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }
  virtual void copy_in(void* dst, const void* host, std::size_t bytes) = 0;
  virtual void copy_out(void* host, const void* src, std::size_t bytes) = 0;  // waits for the data
  // On the device, in order with its operators: a copy, zeros, y = beta y + x.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill_zero(float* x, std::size_t n) = 0;
  virtual void scale_add(std::size_t n, float beta, float* y, const float* x) = 0;
  // C = alpha op(A) op(B) + beta C, row-major: op(A) is m x k, op(B) k x n.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc) = 0;
  virtual void bias_act_forward(kernels::Activation act, std::size_t m, std::size_t n, const float* bias, float* z,
                                float* y) = 0;
  virtual void bias_act_backward(kernels::Activation act, std::size_t m, std::size_t n, const float* z, const float* dy,
                                 float* dz, float* dbias) = 0;
  // The losses and the squared norm return their sums (waiting for them).
  virtual double mse_loss(std::size_t m, std::size_t k, const float* pred, const float* target, float scale,
                          float* dpred) = 0;
  virtual double cross_entropy_loss(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                                    float scale, float* dlogits) = 0;
  virtual std::size_t count_correct(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels) = 0;
  virtual double sum_squares(std::size_t n, const float* x) = 0;
  virtual void adamw(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                     const kernels::AdamwStep& s) = 0;
  virtual void synchronize() = 0;
  // The reducer for gradients in `grads` (device memory), buckets as {offset, count}
  // floats, each sum multiplied by `scale`; `comm` carries rank, world and rendezvous.
  virtual std::unique_ptr<GradReducer> make_reducer(Communicator& comm, float* grads,
                                                    std::vector<std::pair<std::size_t, std::size_t>> buckets,
                                                    float scale) = 0;
  // The collectives of the sharded and model-parallel strategies over `comm`'s ranks, on
  // this device's memory (device_comm.hpp): Gloo on the CPU, NCCL on a GPU.
  virtual std::unique_ptr<DeviceComm> collectives(Communicator& comm) = 0;
};

// "cpu" (threads: BLAS threads, 0 for every core this process may use) or "cuda" (the
// GPU LOCAL_RANK picks among those visible, through rtrain_cuda.so). Error(Unavailable)
// naming why when the device cannot be had: no plug-in, no CUDA library, no GPU.
std::unique_ptr<Device> make_device(const std::string& kind, int threads, int local_rank);

}  // namespace rkit::rtrain
