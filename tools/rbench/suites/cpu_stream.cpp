// cpu.stream: memory bandwidth the way STREAM measures it. Four kernels over arrays
// of doubles, each at least 4x the last-level caches together (STREAM's rule), on
// threads pinned one per core, each thread first-touching and working on its own
// slice: copy c=a, scale b=s*c, add c=a+b, triad a=b+s*c. Bytes counted as STREAM
// does (16 per element for copy and scale, 24 for add and triad), GB/s = 1e9 B/s.
// The arrays' final values are checked against the same recurrence run on scalars.
#include <hwloc.h>
#include <pthread.h>

#include <fmt/format.h>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>

#include "rkit/cpus.hpp"
#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/units.hpp"
#include "suite.hpp"

namespace rkit::rbench {
namespace {

constexpr double kScalar = 3.0;

// Sum of the last-level caches' sizes (0 when hwloc cannot tell).
std::uint64_t last_level_cache_bytes() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return 0;
  std::uint64_t total = 0;
  if (hwloc_topology_load(topo) == 0) {
    for (hwloc_obj_type_t type : {HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L2CACHE}) {
      int n = hwloc_get_nbobjs_by_type(topo, type);
      for (int i = 0; i < n; ++i) total += hwloc_get_obj_by_type(topo, type, i)->attr->cache.size;
      if (total > 0) break;
    }
  }
  hwloc_topology_destroy(topo);
  return total;
}

enum class Kernel { Init, Copy, Scale, Add, Triad, Stop };

class Stream : public Suite {
 public:
  std::string name() const override { return "cpu.stream"; }
  std::string description() const override {
    return "memory bandwidth: STREAM copy, scale, add and triad on pinned threads";
  }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    const unsigned threads = opt.threads ? opt.threads : usable_cpus();
    const std::uint64_t llc = last_level_cache_bytes();
    const std::uint64_t floor = opt.quick ? std::uint64_t{32} << 20 : std::uint64_t{256} << 20;
    const std::uint64_t array_bytes = std::max(4 * llc, floor);
    const std::size_t n = array_bytes / sizeof(double);
    if (progress) progress(fmt::format("cpu.stream {} per array x 3, {} threads", format_bytes(array_bytes), threads));

    std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
    std::atomic<Kernel> kernel{Kernel::Init};
    std::barrier start(threads + 1), done(threads + 1);
    std::vector<int> cpus = allowed_cpus();
    std::vector<std::thread> pool;
    // However this function leaves (a thread that cannot start, Ctrl-C), the workers
    // are told to stop and joined: a joinable std::thread destroyed would abort.
    struct Stopper {
      std::atomic<Kernel>& kernel;
      std::barrier<>& start;
      std::vector<std::thread>& pool;
      unsigned threads;
      ~Stopper() {
        kernel = Kernel::Stop;
        // Threads not started never arrive: stand in for them, so the barrier opens.
        for (unsigned missing = threads - static_cast<unsigned>(pool.size()); missing > 0; --missing)
          start.arrive_and_drop();
        start.arrive_and_wait();
        for (auto& t : pool) t.join();
      }
    } stopper{kernel, start, pool, threads};
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        if (!cpus.empty()) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(cpus[t % cpus.size()], &one);
          pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        }
        const std::size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        double* __restrict pa = a.get();
        double* __restrict pb = b.get();
        double* __restrict pc = c.get();
        for (;;) {
          start.arrive_and_wait();
          switch (kernel.load()) {
            case Kernel::Init:
              for (std::size_t j = lo; j < hi; ++j) {
                pa[j] = 1.0;
                pb[j] = 2.0;
                pc[j] = 0.0;
              }
              break;
            case Kernel::Copy:
              for (std::size_t j = lo; j < hi; ++j) pc[j] = pa[j];
              break;
            case Kernel::Scale:
              for (std::size_t j = lo; j < hi; ++j) pb[j] = kScalar * pc[j];
              break;
            case Kernel::Add:
              for (std::size_t j = lo; j < hi; ++j) pc[j] = pa[j] + pb[j];
              break;
            case Kernel::Triad:
              for (std::size_t j = lo; j < hi; ++j) pa[j] = pb[j] + kScalar * pc[j];
              break;
            case Kernel::Stop: return;
          }
          done.arrive_and_wait();
        }
      });
    }
    auto run_kernel = [&](Kernel k) {
      kernel = k;
      auto t0 = std::chrono::steady_clock::now();
      start.arrive_and_wait();
      done.arrive_and_wait();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    run_kernel(Kernel::Init);  // first touch by the owning threads
    struct Row {
      const char* metric;
      Kernel kernel;
      double bytes_per_element;
      std::vector<double> samples;
    };
    Row rows[] = {{"copy", Kernel::Copy, 16, {}},
                  {"scale", Kernel::Scale, 16, {}},
                  {"add", Kernel::Add, 24, {}},
                  {"triad", Kernel::Triad, 24, {}}};
    // The values grow 15x per iteration: start again from the initial values every
    // kRestart iterations, long before doubles overflow.
    constexpr int kRestart = 64;
    const int iterations = opt.warmup + opt.reps;
    for (int it = 0; it < iterations; ++it) {
      check_interrupted();
      if (it > 0 && it % kRestart == 0) run_kernel(Kernel::Init);
      for (Row& r : rows) {
        double s = run_kernel(r.kernel);
        if (it >= opt.warmup) r.samples.push_back(r.bytes_per_element * static_cast<double>(n) / s / 1e9);
      }
    }

    // The same recurrence on scalars gives every element's expected final value.
    double ea = 1.0, eb = 2.0, ec = 0.0;
    for (int it = (iterations - 1) / kRestart * kRestart; it < iterations; ++it) {
      ec = ea;
      eb = kScalar * ec;
      ec = ea + eb;
      ea = eb + kScalar * ec;
    }
    double err_a = 0, err_b = 0, err_c = 0;
    for (std::size_t j = 0; j < n; ++j) {
      err_a += std::fabs(a[j] - ea);
      err_b += std::fabs(b[j] - eb);
      err_c += std::fabs(c[j] - ec);
    }
    double worst = std::max({err_a / ea, err_b / eb, err_c / ec}) / static_cast<double>(n);
    const bool ok = worst < 1e-13;
    std::string check =
        fmt::format("every element equals the scalar recurrence after {} iterations (mean relative error {:.1e})",
                    iterations, worst);

    std::vector<Measurement> out;
    for (Row& r : rows) {
      Measurement m;
      m.metric = r.metric;
      m.unit = "GB/s";
      m.samples = std::move(r.samples);
      m.params = {{"array_bytes", array_bytes}, {"elements", n}, {"threads", threads}, {"llc_bytes", llc}};
      m.correct = ok;
      m.check = check;
      out.push_back(std::move(m));
    }
    return out;
  }
};

RKIT_BENCH_SUITE(Stream);

}  // namespace
}  // namespace rkit::rbench
