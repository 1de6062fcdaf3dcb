// File: suite.hpp
//
// A benchmark suite is a plug-in: one file in tools/rbench/suites/ defines a class
// deriving from Suite and registers it with RKIT_BENCH_SUITE. rbench lists, filters
// and runs whatever is registered; each suite returns Measurements, which rbench turns
// into rkit.bench.v1 records (statistics, peak fraction, host fingerprint).
//
//   class Stream : public Suite {
//    public:
//     std::string name() const override { return "cpu.stream"; }
//     std::string description() const override { return "memory bandwidth: copy, scale, add, triad"; }
//     std::vector<Measurement> run(const RunOptions& opt, Progress& progress) override;
//   };
//   RKIT_BENCH_SUITE(Stream);
//
// A suite checks its own answers (Measurement::correct and ::check), runs opt.warmup
// untimed and opt.reps timed repetitions (time_repetitions does that, and notices
// Ctrl-C), and never prints: it reports progress through the callback (which may be empty)
// and throws rkit::Error on failure.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rbench {

struct RunOptions {
  bool quick = false;    // smaller sizes and fewer repetitions: a whole CPU run within a minute
  int reps = 5;          // timed repetitions per metric (already resolved from --reps / --quick)
  int warmup = 1;        // untimed runs first
  unsigned threads = 0;  // resolved by rbench run: never 0 there (0 in a suite means all usable cores)
  std::string dir;       // where I/O suites write (default: $TMPDIR, else /tmp)
};

// One metric, measured opt.reps times.
struct Measurement {
  std::string metric;            // "triad", "sgemm", "write"
  std::string unit;              // "GB/s", "GFLOP/s", "s": rates are better higher, "s" lower
  std::vector<double> samples;   // one value per repetition, in `unit`
  Json params = Json::object();  // what was measured: {"bytes": ..., "threads": ..., "m": ...}
  bool correct = true;           // the suite's own check of the result
  std::string check;             // what was checked, e.g. "a[i] == 3.0 for all i"
  std::optional<double> peak;    // the hardware's limit in `unit`, when known
  std::string peak_source;       // how the peak was derived
};

// Progress lines for stderr ("cpu.stream triad 4 MiB x 2 threads"); may be ignored.
using Progress = std::function<void(const std::string&)>;

class Suite {
 public:
  virtual ~Suite() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // Why the suite cannot run here ("no CUDA device: ..."), or "" when it can.
  virtual std::string unavailable() const { return {}; }
  virtual std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) = 0;
};

// Every registered suite, sorted by name.
std::vector<Suite*> suites();
// The suite called `name`, or nullptr.
Suite* find_suite(const std::string& name);

struct Registrar {
  explicit Registrar(std::unique_ptr<Suite> suite);
};
#define RKIT_BENCH_SUITE(Type) static const ::rkit::rbench::Registrar rkit_bench_registrar_##Type{std::make_unique<Type>()}

// Runs f() warmup times untimed, then reps times, and returns each timed run's
// wall-clock seconds (steady clock). Throws Error(TempFail) when interrupted (Ctrl-C).
std::vector<double> time_repetitions(int warmup, int reps, const std::function<void()>& f);

// splitmix64's finaliser: a fixed, well-mixed 64-bit value for x, for test data that is
// the same on every platform.
inline std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Physical cores among the CPUs this process may use (SMT siblings counted once);
// rkit::usable_cpus() when hwloc cannot tell.
unsigned physical_cores();

}  // namespace rkit::rbench
