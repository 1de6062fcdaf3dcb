// The CPU device of rtrain run: host memory, OpenBLAS for GEMM, kernels/mlp's *_cpu
// operators for the rest, Gloo (comm.hpp) for the gradient all-reduce.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "comm.hpp"
#include "device.hpp"
#include "device_comm.hpp"
#include "rkit/cpus.hpp"
#include "rkit/error.hpp"

extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads() __attribute__((weak));

namespace rkit::rtrain {
namespace {

namespace k = kernels;

class CpuReducer : public GradReducer {
 public:
  CpuReducer(Communicator& comm, float* grads, std::vector<std::pair<std::size_t, std::size_t>> buckets, float scale)
      : comm_(comm) {
    comm_.set_buckets(grads, std::move(buckets), scale);
  }
  void begin_step() override { comm_.begin_step(); }
  void ready(std::size_t bucket) override { comm_.ready(bucket); }
  CommTimes wait() override { return comm_.wait(); }

 private:
  Communicator& comm_;
};

class CpuDevice : public Device {
 public:
  explicit CpuDevice(int threads) {
    if (threads <= 0) threads = static_cast<int>(usable_cpus());
    if (threads <= 0) threads = 1;
    if (openblas_set_num_threads) openblas_set_num_threads(threads);
    threads_ = openblas_get_num_threads ? openblas_get_num_threads() : 1;
  }
  ~CpuDevice() override {
    for (void* p : blocks_) std::free(p);
  }
  std::string name() const override {
    return fmt::format("cpu ({} BLAS thread{})", threads_, threads_ == 1 ? "" : "s");
  }
  void* alloc_bytes(std::size_t bytes) override {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded > 0 ? rounded : 64);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    blocks_.push_back(p);
    return p;
  }
  void copy_in(void* dst, const void* host, std::size_t bytes) override { std::memcpy(dst, host, bytes); }
  void copy_out(void* host, const void* src, std::size_t bytes) override { std::memcpy(host, src, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memmove(dst, src, bytes); }
  void fill_zero(float* x, std::size_t n) override { std::fill(x, x + n, 0.0f); }
  void scale_add(std::size_t n, float beta, float* y, const float* x) override {
    for (std::size_t i = 0; i < n; ++i) y[i] = beta * y[i] + x[i];
  }
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
  }
  void bias_act_forward(k::Activation act, std::size_t m, std::size_t n, const float* bias, float* z,
                        float* y) override {
    k::bias_act_forward_cpu(act, m, n, bias, z, y);
  }
  void bias_act_backward(k::Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                         float* dbias) override {
    k::bias_act_backward_cpu(act, m, n, z, dy, dz, dbias);
  }
  double mse_loss(std::size_t m, std::size_t kk, const float* pred, const float* target, float scale,
                  float* dpred) override {
    return k::mse_loss_cpu(m, kk, pred, target, scale, dpred);
  }
  double cross_entropy_loss(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels, float scale,
                            float* dlogits) override {
    return k::cross_entropy_loss_cpu(m, c, logits, labels, scale, dlogits);
  }
  std::size_t count_correct(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels) override {
    return k::count_correct_ref(m, c, logits, labels);
  }
  double sum_squares(std::size_t n, const float* x) override { return k::sum_squares_cpu(n, x); }
  void adamw(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
             const k::AdamwStep& s) override {
    k::adamw_update_cpu(n, params, grads, exp_avg, exp_avg_sq, s);
  }
  void synchronize() override {}
  std::unique_ptr<GradReducer> make_reducer(Communicator& comm, float* grads,
                                            std::vector<std::pair<std::size_t, std::size_t>> buckets,
                                            float scale) override {
    return std::make_unique<CpuReducer>(comm, grads, std::move(buckets), scale);
  }
  std::unique_ptr<DeviceComm> collectives(Communicator& comm) override { return gloo_device_comm(comm); }

 private:
  int threads_ = 1;
  std::vector<void*> blocks_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) { return std::make_unique<CpuDevice>(threads); }

}  // namespace rkit::rtrain
