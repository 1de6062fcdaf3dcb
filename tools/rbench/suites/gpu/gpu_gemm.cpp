// Suite gpu.gemm: matrix multiply on every visible GPU, through cuBLAS and through
// rkit's own SGEMM kernel (kernels/gemm).
//
// For square sizes M = N = K (2048, 4096, 8192; 4096 and 8192 with --quick) it times
// C = Aᵀ·B with cuBLAS at fp32 (CUDA cores), tf32 (tensor cores, compute capability
// 8.0+), fp16 and bf16 inputs (8.0+ for bf16) with fp32 accumulation and fp32 C, and
// fp8 e4m3 inputs through cublasLt (8.9+, when cublasLt offers an algorithm) with a
// bf16 C; all as cuBLAS's TN layout (A stored K x M, column-major, and transposed), the
// one fp8 requires. rkit's kernel multiplies the fp32 operands row-major (its own
// layout) at the same sizes; its second row, own_sgemm_of_cublas, is its speed in % of
// cuBLAS's fp32 median there. 2·M·N·K FLOPs per multiply; each sample repeats it until
// it covers at least kMinSampleFlops, timed with CUDA events. Sizes start at 2048: at
// 1024 a tensor-core multiply takes 1-3 µs of GPU time, less than launching it takes
// the host, so the sample would measure the launch rate. After the timed runs, 256
// entries of C (the corners among them) are compared with a long double dot product of
// the operands as stored (so the inputs' own rounding is no error), relative to sum|a*b|.
// Peaks come from gpu_specs (datasheet, else computed for fp32). Params: the device
// (CUDA ordinal, PCI bus id, name), m, n, k, and the bytes per element of A and B
// (ab_bytes) and of C (c_bytes), for a roofline. A type or size that cannot run (compute
// capability, memory, no cublasLt algorithm) is named on the progress output.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gemm.hpp"
#include "gpu_runtime.hpp"
#include "gpu_specs.hpp"
#include "rkit/error.hpp"
#include "stats.hpp"
#include "suite.hpp"

namespace rkit::rbench {
namespace {

constexpr double kMinSampleFlops = 1e12;
constexpr int kCheckedEntries = 256;
constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;  // what NVIDIA suggests for Hopper

void blas_check(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const bool unavailable = status == CUBLAS_STATUS_ALLOC_FAILED || status == CUBLAS_STATUS_NOT_SUPPORTED ||
                           status == CUBLAS_STATUS_ARCH_MISMATCH || status == CUBLAS_STATUS_NOT_INITIALIZED;
  throw Error(unavailable ? Exit::Unavailable : Exit::Software,
              fmt::format("{}: {} ({})", what, cublasGetStatusString(status), cublasGetStatusName(status)));
}

// Owns a cuBLAS or cublasLt object: T is its handle type, Destroy its destructor.
template <typename T, cublasStatus_t (*Destroy)(T)>
class Owned {
 public:
  Owned() = default;
  ~Owned() {
    if (value_) (void)Destroy(value_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T* out() { return &value_; }
  T get() const { return value_; }

 private:
  T value_ = nullptr;
};
using BlasHandle = Owned<cublasHandle_t, cublasDestroy>;
using LtHandle = Owned<cublasLtHandle_t, cublasLtDestroy>;
using LtMatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtLayout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using LtPreference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// Deterministic values in [-1, 1] (splitmix64), the same on every platform.
void fill_uniform(std::vector<float>& v, std::uint64_t seed) {
  for (auto& x : v) {
    std::uint64_t z = mix64(seed += 0x9e3779b97f4a7c15ULL);
    x = static_cast<float>(static_cast<double>(z >> 11) * 0x1p-52 - 1.0);
  }
}

// A narrow binary floating-point format: fp16, bf16, fp8 e4m3.
struct NarrowFormat {
  int exponent_bits, mantissa_bits, bias;
};
constexpr NarrowFormat kFp16{5, 10, 15}, kBf16{8, 7, 127}, kE4m3{4, 3, 7};

// Bit patterns of normal numbers +-2^e * (1 + f), e in [-4, 0]: |x| in [1/16, 2), so
// the host knows each value exactly (narrow_value) and no product or sum overflows.
template <typename Bits>
std::vector<Bits> narrow_random(std::size_t count, NarrowFormat f, std::uint64_t seed) {
  std::vector<Bits> out(count);
  for (auto& bits : out) {
    const std::uint64_t z = mix64(seed += 0x9e3779b97f4a7c15ULL);
    const std::uint64_t sign = z & 1, exponent = static_cast<std::uint64_t>(f.bias - 4) + (z >> 1) % 5;
    const std::uint64_t mantissa = (z >> 8) & ((std::uint64_t{1} << f.mantissa_bits) - 1);
    bits = static_cast<Bits>(sign << (f.exponent_bits + f.mantissa_bits) | exponent << f.mantissa_bits | mantissa);
  }
  return out;
}

// The value of a normal number's bit pattern (what narrow_random makes).
double narrow_value(std::uint32_t bits, NarrowFormat f) {
  const std::uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const int exponent = static_cast<int>((bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1)) - f.bias;
  const double magnitude = std::ldexp(1.0 + mantissa / static_cast<double>(1u << f.mantissa_bits), exponent);
  return (bits >> (f.exponent_bits + f.mantissa_bits)) & 1 ? -magnitude : magnitude;
}

double bf16_value(std::uint16_t bits) {
  const std::uint32_t wide = std::uint32_t{bits} << 16;
  float x;
  std::memcpy(&x, &wide, sizeof x);
  return x;
}

// One multiply to time and check: launch() enqueues C = op(A)·op(B); a(i, l) and
// b(l, j) are op(A) and op(B) as the GPU sees them; c(i, j) reads C back.
struct GemmCase {
  std::string metric;
  std::function<void()> launch;
  std::function<double(int, int)> a, b, c;
  double bound = 0;          // allowed |error| / sum|a*b|
  std::string bound_reason;  // what the bound allows for
  Peak peak;
  int ab_bytes = 0, c_bytes = 0;  // bytes per element of A and B, and of C
};

Measurement measure(const GemmCase& g, const CudaDevice& dev, int n, cudaStream_t stream, const RunOptions& opt) {
  const double flops = 2.0 * n * n * n;
  const int calls = std::max(1, static_cast<int>(std::ceil(kMinSampleFlops / flops)));
  Measurement m;
  m.metric = g.metric;
  m.unit = "TFLOP/s";
  m.params = {{"device", dev.index}};
  m.params.update(device_identity(dev, "device"));
  m.params.update(Json{{"m", n}, {"n", n}, {"k", n}, {"ab_bytes", g.ab_bytes}, {"c_bytes", g.c_bytes}});
  for (double s : time_on_stream(stream, opt.warmup, opt.reps, [&] {
         for (int i = 0; i < calls; ++i) g.launch();
       }))
    m.samples.push_back(calls * flops / s / 1e12);

  // Entries: the four corners, then pseudo-random ones.
  std::vector<std::pair<int, int>> entries = {{0, 0}, {0, n - 1}, {n - 1, 0}, {n - 1, n - 1}};
  for (std::uint64_t e = 0; entries.size() < kCheckedEntries; ++e) {
    const std::uint64_t z = mix64(e + 0x51ed);
    entries.emplace_back(static_cast<int>(z % static_cast<std::uint64_t>(n)),
                         static_cast<int>((z >> 32) % static_cast<std::uint64_t>(n)));
  }
  double worst = 0;
  for (auto [i, j] : entries) {
    long double sum = 0, magnitude = 0;
    for (int l = 0; l < n; ++l) {
      const long double term = static_cast<long double>(g.a(i, l)) * g.b(l, j);
      sum += term;
      magnitude += std::fabs(term);
    }
    const double err = static_cast<double>(std::fabs(g.c(i, j) - sum) / std::max(magnitude, 1e-300L));
    worst = std::max(worst, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
  }
  m.correct = worst <= g.bound;
  m.check = fmt::format(
      "{} entries (corners and random ones) within {:.1e} x sum|a*b| ({}) of a long double "
      "reference (max rel err {:.1e})",
      entries.size(), g.bound, g.bound_reason, worst);
  m.peak = g.peak.value;
  m.peak_source = g.peak.source;
  return m;
}

// C(i, j) of a column-major m x n matrix on the device (ld = rows), read back as T
// after the work on `stream`.
template <typename T>
T read_entry(const void* c, int ld, int i, int j, cudaStream_t stream) {
  T v{};
  copy_and_wait(&v, static_cast<const T*>(c) + static_cast<std::size_t>(j) * ld + i, sizeof v, cudaMemcpyDeviceToHost,
                stream);
  return v;
}

bool fits(std::size_t bytes) {
  std::size_t free = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return bytes + (std::size_t{256} << 20) <= free;  // room for cuBLAS's own workspaces
}

// All of one device's measurements.
std::vector<Measurement> measure_device(int device, const RunOptions& opt, const Progress& progress) {
  DeviceSelection on(device);
  const CudaDevice dev = cuda_device(device);
  const int cc = dev.clocks.cc_major * 10 + dev.clocks.cc_minor;
  Stream stream;
  BlasHandle blas;
  blas_check(cublasCreate(blas.out()), "cublasCreate");
  blas_check(cublasSetStream(blas.get(), stream.get()), "cublasSetStream");
  blas_check(cublasSetMathMode(blas.get(), CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // fp32 stays fp32
  LtHandle lt;
  blas_check(cublasLtCreate(lt.out()), "cublasLtCreate");

  const double eps = std::numeric_limits<float>::epsilon();
  const float alpha = 1.0f, beta = 0.0f;
  const std::vector<int> sizes = opt.quick ? std::vector<int>{4096, 8192} : std::vector<int>{2048, 4096, 8192};
  std::vector<Measurement> out;
  auto say = [&](const std::string& what, int n) {
    if (progress) progress(fmt::format("gpu.gemm gpu{} {} {}", device, what, n));
  };
  // What does not run is named on the progress output: a Measurement has samples, a
  // skipped type has none.
  auto skip = [&](const std::string& what, const std::string& why) {
    if (progress) progress(fmt::format("gpu.gemm gpu{} {} skipped: {}", device, what, why));
  };
  const std::string capability = fmt::format("compute capability {}.{}", dev.clocks.cc_major, dev.clocks.cc_minor);
  if (cc < 80) skip("tf32 and bf16", capability + " has no tf32 or bf16 tensor cores (8.0+)");
  if (cc < 89) skip("fp8", capability + " has no fp8 tensor cores (8.9+)");
  for (int n : sizes) {
    const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    if (!fits(3 * nn * sizeof(float))) {
      skip(fmt::format("size {}", n), "not enough free device memory");
      continue;
    }
    // cuBLAS, TN: C (n x n, column-major) = A^T B with A and B stored k x n, so that
    // C(i, j) = sum_l A[i*k + l] * B[j*k + l]; rkit's kernel reads the same buffers as
    // row-major A (m x k) and B (k x n): C[i*n + j] = sum_l A[i*k + l] * B[l*n + j].
    const double sqrt_k = std::sqrt(static_cast<double>(n));
    const double fp32_bound = 2 * sqrt_k * eps;
    const std::string fp32_reason = "2 sqrt(k) eps, fp32 accumulation";
    {
      std::vector<float> ha(nn), hb(nn);
      fill_uniform(ha, 1);
      fill_uniform(hb, 2);
      DeviceMemory da(nn * sizeof(float)), db(nn * sizeof(float)), dc(nn * sizeof(float));
      copy_and_wait(da.get(), ha.data(), nn * sizeof(float), cudaMemcpyHostToDevice, stream.get());
      copy_and_wait(db.get(), hb.data(), nn * sizeof(float), cudaMemcpyHostToDevice, stream.get());
      auto a_tn = [&](int i, int l) { return double(ha[std::size_t(i) * n + l]); };
      auto b_tn = [&](int l, int j) { return double(hb[std::size_t(j) * n + l]); };
      auto c_col = [&](int i, int j) { return double(read_entry<float>(dc.get(), n, i, j, stream.get())); };
      auto blas_launch = [&](cublasComputeType_t compute) {
        return [&, compute] {
          blas_check(
              cublasGemmEx(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, da.get(), CUDA_R_32F, n, db.get(),
                           CUDA_R_32F, n, &beta, dc.get(), CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
        };
      };

      say("fp32", n);
      const Measurement fp32 = measure({"fp32", blas_launch(CUBLAS_COMPUTE_32F), a_tn, b_tn, c_col, fp32_bound,
                                        fp32_reason, gemm_peak(dev.name, dev.clocks, GpuMath::Fp32), 4, 4},
                                       dev, n, stream.get(), opt);
      out.push_back(fp32);
      if (cc >= 80) {
        say("tf32", n);
        // TF32 keeps 10 of fp32's 23 mantissa bits: each product may be off by 2^-9 of itself.
        out.push_back(measure(
            {"tf32", blas_launch(CUBLAS_COMPUTE_32F_FAST_TF32), a_tn, b_tn, c_col, 0x1p-9 + fp32_bound,
             "2^-9 for inputs rounded to tf32, + " + fp32_reason, gemm_peak(dev.name, dev.clocks, GpuMath::Tf32), 4, 4},
            dev, n, stream.get(), opt));
      }

      say("own_sgemm", n);
      auto b_nn = [&](int l, int j) { return double(hb[std::size_t(l) * n + j]); };
      auto c_row = [&](int i, int j) {
        return double(read_entry<float>(dc.get(), n, j, i, stream.get()));
      };  // C^T column-major
      auto own_launch = [&] {
        cuda_check(
            kernels::sgemm(n, n, n, alpha, da.as<float>(), n, db.as<float>(), n, beta, dc.as<float>(), n, stream.get()),
            "rkit::kernels::sgemm");
      };
      Measurement own = measure({"own_sgemm", own_launch, a_tn, b_nn, c_row, fp32_bound, fp32_reason,
                                 gemm_peak(dev.name, dev.clocks, GpuMath::Fp32), 4, 4},
                                dev, n, stream.get(), opt);
      const double cublas_median = summarize(fp32.samples).median;
      Measurement ratio;
      ratio.metric = "own_sgemm_of_cublas";
      ratio.unit = "%";
      ratio.params = own.params;
      for (double s : own.samples) ratio.samples.push_back(cublas_median > 0 ? 100 * s / cublas_median : 0);
      ratio.correct = own.correct && fp32.correct;
      ratio.check = fmt::format(
          "rkit's kernel's result {} its check, cuBLAS fp32's {}; % of cuBLAS's median {:.1f} "
          "TFLOP/s at this size",
          own.correct ? "passed" : "failed", fp32.correct ? "passed" : "failed", cublas_median);
      out.push_back(std::move(own));
      out.push_back(std::move(ratio));
    }

    // fp16 and bf16 inputs, fp32 C.
    for (auto [metric, type, format, math] : {std::tuple{"fp16", CUDA_R_16F, kFp16, GpuMath::Fp16},
                                              std::tuple{"bf16", CUDA_R_16BF, kBf16, GpuMath::Bf16}}) {
      if (math == GpuMath::Bf16 && cc < 80) continue;  // named once above
      if (!fits(nn * (2 * sizeof(std::uint16_t) + sizeof(float)))) {
        skip(fmt::format("{} {}", metric, n), "not enough free device memory");
        continue;
      }
      say(metric, n);
      const auto ha = narrow_random<std::uint16_t>(nn, format, 3), hb = narrow_random<std::uint16_t>(nn, format, 4);
      DeviceMemory da(nn * 2), db(nn * 2), dc(nn * sizeof(float));
      copy_and_wait(da.get(), ha.data(), nn * 2, cudaMemcpyHostToDevice, stream.get());
      copy_and_wait(db.get(), hb.data(), nn * 2, cudaMemcpyHostToDevice, stream.get());
      const NarrowFormat f = format;
      const cudaDataType t = type;
      out.push_back(measure(
          {metric,
           [&] {
             blas_check(cublasGemmEx(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, da.get(), t, n, db.get(), t,
                                     n, &beta, dc.get(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "cublasGemmEx");
           },
           [&](int i, int l) { return narrow_value(ha[std::size_t(i) * n + l], f); },
           [&](int l, int j) { return narrow_value(hb[std::size_t(j) * n + l], f); },
           [&](int i, int j) { return double(read_entry<float>(dc.get(), n, i, j, stream.get())); }, fp32_bound,
           fp32_reason + "; the inputs are exact", gemm_peak(dev.name, dev.clocks, math), 2, 4},
          dev, n, stream.get(), opt));
    }

    // fp8 e4m3 through cublasLt: TN, scales 1 (the default), bf16 C and D.
    if (cc >= 89 && !fits(nn * (2 + sizeof(std::uint16_t)) + kLtWorkspaceBytes)) {
      skip(fmt::format("fp8 {}", n), "not enough free device memory");
    } else if (cc >= 89) {
      const auto ha = narrow_random<std::uint8_t>(nn, kE4m3, 5), hb = narrow_random<std::uint8_t>(nn, kE4m3, 6);
      DeviceMemory da(nn), db(nn), dc(nn * sizeof(std::uint16_t)), workspace(kLtWorkspaceBytes);
      copy_and_wait(da.get(), ha.data(), nn, cudaMemcpyHostToDevice, stream.get());
      copy_and_wait(db.get(), hb.data(), nn, cudaMemcpyHostToDevice, stream.get());
      LtMatmulDesc desc;
      blas_check(cublasLtMatmulDescCreate(desc.out(), CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
      const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
      blas_check(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa),
                 "cublasLtMatmulDescSetAttribute(TRANSA)");
      blas_check(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb),
                 "cublasLtMatmulDescSetAttribute(TRANSB)");
      // Fast accumulation off (cuBLAS's default, set so that it stays so): cuBLAS then
      // adds the tensor cores' partial sums, which keep only about 14 bits on Hopper, into
      // fp32 every few MMAs. The tolerance below relies on it; see there.
      const std::int8_t fast_accumulation = 0;
      blas_check(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                                                sizeof fast_accumulation),
                 "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
      LtLayout la, lb, lc;
      blas_check(cublasLtMatrixLayoutCreate(la.out(), CUDA_R_8F_E4M3, n, n, n), "cublasLtMatrixLayoutCreate(A)");
      blas_check(cublasLtMatrixLayoutCreate(lb.out(), CUDA_R_8F_E4M3, n, n, n), "cublasLtMatrixLayoutCreate(B)");
      blas_check(cublasLtMatrixLayoutCreate(lc.out(), CUDA_R_16BF, n, n, n), "cublasLtMatrixLayoutCreate(C)");
      LtPreference pref;
      blas_check(cublasLtMatmulPreferenceCreate(pref.out()), "cublasLtMatmulPreferenceCreate");
      const std::size_t workspace_bytes = kLtWorkspaceBytes;
      blas_check(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof workspace_bytes),
                 "cublasLtMatmulPreferenceSetAttribute");
      cublasLtMatmulHeuristicResult_t heuristic{};
      int found = 0;
      const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt.get(), desc.get(), la.get(), lb.get(), lc.get(),
                                                                   lc.get(), pref.get(), 1, &heuristic, &found);
      if (status != CUBLAS_STATUS_SUCCESS) {
        skip(fmt::format("fp8 {}", n), fmt::format("cublasLtMatmulAlgoGetHeuristic failed: {} ({})",
                                                   cublasGetStatusString(status), cublasGetStatusName(status)));
      } else if (found == 0) {
        skip(fmt::format("fp8 {}", n), "cublasLt offers no algorithm for e4m3 inputs with a bf16 C (TN)");
      } else {
        say("fp8", n);
        out.push_back(measure(
            {"fp8",
             [&] {
               blas_check(cublasLtMatmul(lt.get(), desc.get(), &alpha, da.get(), la.get(), db.get(), lb.get(), &beta,
                                         dc.get(), lc.get(), dc.get(), lc.get(), &heuristic.algo, workspace.get(),
                                         workspace_bytes, stream.get()),
                          "cublasLtMatmul");
             },
             [&](int i, int l) { return narrow_value(ha[std::size_t(i) * n + l], kE4m3); },
             [&](int l, int j) { return narrow_value(hb[std::size_t(j) * n + l], kE4m3); },
             [&](int i, int j) { return bf16_value(read_entry<std::uint16_t>(dc.get(), n, i, j, stream.get())); },
             // Why 2^-7 of sum|a*b| holds (an estimate for these inputs, not a proof):
             // the products of e4m3 values are exact; rounding C to bf16 costs at most
             // 2^-8 |c| <= 2^-8 sum|a*b|; the tensor cores' partial sums (about 14 bits,
             // errors of 2^-13 of the running sum per add) run over short stretches of k
             // before cuBLAS adds them in fp32 (fast accumulation off, above), and with
             // inputs of random sign a running sum grows as the square root of its
             // length, so their error stays near 2^-10 of sum|a*b|. Without that
             // promotion one running sum would span all of k = 8192, and the same
             // estimate reaches 2^-7.
             0x1p-7, "2^-7: a bf16 result and fp8 tensor-core accumulation with fp32 promotion",
             gemm_peak(dev.name, dev.clocks, GpuMath::Fp8), 1, 2},
            dev, n, stream.get(), opt));
      }
    }
  }
  return out;
}

class GpuGemm : public Suite {
 public:
  std::string name() const override { return "gpu.gemm"; }
  std::string description() const override {
    return "GEMM on each GPU: cuBLAS fp32, tf32, fp16, bf16, fp8 (cublasLt), and rkit's own SGEMM as % of cuBLAS";
  }
  std::string unavailable() const override { return cuda_unavailable(); }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    return for_each_device([&](int device) { return measure_device(device, opt, progress); });
  }
};

}  // namespace
RKIT_BENCH_SUITE(GpuGemm);
}  // namespace rkit::rbench
