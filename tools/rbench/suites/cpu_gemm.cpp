// Suite cpu.gemm: single- and double-precision matrix multiply through OpenBLAS's CBLAS.
//
// For square sizes M = N = K (256 ... 2048; 256 and 1024 with --quick) it times
// C = A·B with cblas_sgemm / cblas_dgemm on row-major matrices of pseudo-random values
// in [-1, 1], counts 2·M·N·K FLOPs per multiply, and reports GFLOP/s per repetition.
// Small sizes repeat the multiply inside one timed sample so that each sample covers at
// least kMinSampleFlops. Sixteen random entries of C are checked against a long double
// reference. The peak is physical cores × cpufreq's maximum clock × FLOPs per cycle of
// the instruction set /proc/cpuinfo lists; none when the maximum clock is hidden (VMs).
// OPENBLAS_CORETYPE and friends are left as the environment sets them.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "rkit/cpus.hpp"
#include "suite.hpp"

// OpenBLAS's own calls; weak, so that another CBLAS still links (threads then stay as they are).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads() __attribute__((weak));

namespace rkit::rbench {
namespace {

constexpr double kMinSampleFlops = 1e9;
constexpr int kCheckedEntries = 16;

// FLOPs per cycle per core by instruction set, best first: FMA pipes x lanes x 2. AVX-512
// counts as two 256-bit pipes (Zen 4, one-port Intel parts); two-port Intel Xeons do twice that.
struct IsaRate {
  std::vector<const char*> flags;  // all needed, as /proc/cpuinfo spells them
  int sp, dp;
  const char* name;
};
const IsaRate kIsaRates[] = {{{"avx512f"}, 32, 16, "AVX-512 as 2x256-bit FMA"},
                             {{"avx2", "fma"}, 32, 16, "AVX2, 2 FMA"},
                             {{"avx"}, 16, 8, "AVX"},
                             {{"sse2"}, 8, 4, "SSE2"}};

// The CPU's theoretical throughput per core, from cpufreq and /proc/cpuinfo; empty when
// the clock or the instruction set is unknown.
struct CpuPeak {
  double ghz = 0;
  const IsaRate* isa = nullptr;
};

std::optional<CpuPeak> cpu_peak() {
  CpuPeak p;
  if (std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); f >> p.ghz) {
    p.ghz /= 1e6;  // kHz
  }
  std::ifstream info("/proc/cpuinfo");
  std::string line, flags;
  // "cpu MHz" is not used: it is the base clock on many machines (VMs), and a peak
  // below what the cores reach would make fractions over 100%.
  while (std::getline(info, line) && flags.empty()) {
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "flags" && flags.empty()) flags = " " + line.substr(colon + 1) + " ";
  }
  auto has = [&](const char* flag) { return flags.find(fmt::format(" {} ", flag)) != std::string::npos; };
  for (const auto& rate : kIsaRates) {
    if (std::all_of(rate.flags.begin(), rate.flags.end(), has)) {
      p.isa = &rate;
      break;
    }
  }
  if (!(p.ghz > 0) || !p.isa) return std::nullopt;
  return p;
}

// Deterministic values in [-1, 1] (splitmix64), the same on every platform.
template <typename T>
void fill_random(std::vector<T>& v, std::uint64_t seed) {
  for (auto& x : v) {
    std::uint64_t z = mix64(seed += 0x9e3779b97f4a7c15ULL);
    x = static_cast<T>(static_cast<double>(z >> 11) * 0x1p-52 - 1.0);
  }
}

template <typename T>
Measurement measure_gemm(int n, unsigned threads, const RunOptions& opt, const std::optional<CpuPeak>& peak,
                         const Progress& progress) {
  constexpr bool kSingle = std::is_same_v<T, float>;
  const char* metric = kSingle ? "sgemm" : "dgemm";
  if (progress) progress(fmt::format("cpu.gemm {} {}", metric, n));
  const std::size_t elems = std::size_t(n) * std::size_t(n);
  std::vector<T> a(elems), b(elems), c(elems);
  fill_random(a, 1);
  fill_random(b, 2);

  const double flops = 2.0 * n * n * n;
  const int calls = std::max(1, static_cast<int>(std::ceil(kMinSampleFlops / flops)));
  auto gemm = [&] {
    for (int i = 0; i < calls; ++i) {
      if constexpr (kSingle)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                    n);
      else
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(),
                    n);
    }
  };

  Measurement m;
  m.metric = metric;
  m.unit = "GFLOP/s";
  m.params = {{"m", n}, {"n", n}, {"k", n}, {"threads", threads}};
  for (double s : time_repetitions(opt.warmup, opt.reps, gemm)) m.samples.push_back(calls * flops / s / 1e9);

  // Error relative to sum |a·b|, which bounds it free of cancellation; sqrt(k)·eps allows
  // for random-walk rounding across the k-long dot products.
  const double bound = std::sqrt(double(n)) * std::numeric_limits<T>::epsilon();
  double worst = 0;
  std::vector<double> probe(kCheckedEntries * 2);  // (row, col) pairs, mapped from [-1, 1) to [0, n)
  fill_random(probe, 3);
  for (auto& x : probe) x = std::floor((x + 1) / 2 * n);
  for (int e = 0; e < kCheckedEntries; ++e) {
    auto row = static_cast<std::size_t>(probe[2 * e]), col = static_cast<std::size_t>(probe[2 * e + 1]);
    long double sum = 0, magnitude = 0;
    for (std::size_t k = 0; k < std::size_t(n); ++k) {
      long double term = static_cast<long double>(a[row * n + k]) * b[k * n + col];
      sum += term;
      magnitude += std::fabs(term);
    }
    double err = static_cast<double>(std::fabs(c[row * n + col] - sum) / std::max(magnitude, 1e-300L));
    worst = std::max(worst, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
  }
  m.correct = worst <= bound;
  m.check = fmt::format(
      "{} random entries within sqrt(k)*eps*sum|a*b| = {:.1e} of a long double reference "
      "(max rel err {:.1e})",
      kCheckedEntries, bound, worst);
  if (peak) {
    int per_cycle = kSingle ? peak->isa->sp : peak->isa->dp;
    unsigned cores = std::min(threads, physical_cores());  // SMT siblings share FMA units
    m.peak = cores * peak->ghz * per_cycle;
    m.peak_source = fmt::format("{} core{} x {:.2f} GHz (cpufreq maximum) x {} FLOP/cycle ({})", cores,
                                cores == 1 ? "" : "s", peak->ghz, per_cycle, peak->isa->name);
  } else {
    m.peak_source =
        "unknown: no maximum clock in /sys/devices/system/cpu/cpu0/cpufreq (a VM?), or an unknown instruction set";
  }
  return m;
}

class CpuGemm : public Suite {
 public:
  std::string name() const override { return "cpu.gemm"; }
  std::string description() const override { return "sgemm and dgemm through OpenBLAS, square sizes"; }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    const unsigned threads = opt.threads ? opt.threads : usable_cpus();
    const int before = openblas_get_num_threads ? openblas_get_num_threads() : 0;
    if (openblas_set_num_threads) openblas_set_num_threads(static_cast<int>(threads));
    const auto peak = cpu_peak();
    std::vector<int> sizes = opt.quick ? std::vector<int>{256, 1024} : std::vector<int>{256, 512, 1024, 2048};
    std::vector<Measurement> out;  // each size's matrices are freed before the next
    for (int n : sizes) out.push_back(measure_gemm<float>(n, threads, opt, peak, progress));
    for (int n : sizes) out.push_back(measure_gemm<double>(n, threads, opt, peak, progress));
    if (openblas_set_num_threads && before > 0) openblas_set_num_threads(before);
    return out;
  }
};

}  // namespace
RKIT_BENCH_SUITE(CpuGemm);
}  // namespace rkit::rbench
