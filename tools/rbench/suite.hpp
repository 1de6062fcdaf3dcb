// File: suite.hpp
//
// A benchmark suite is a plug-in: one file in tools/rbench/suites/ defines a class
// deriving from Suite and registers it with RKIT_BENCH_SUITE (a CUDA suite goes in
// suites/gpu/, built into the GPU plug-in rbench_gpu.so: see gpu_plugin.hpp). rbench
// lists, filters and runs whatever is registered; each suite returns Measurements,
// which rbench turns into rkit.bench.v1 records (statistics, peak fraction, host
// fingerprint).
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
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"
#include "rkit/rng.hpp"  // mix64, for the suites' test patterns

namespace rkit::rbench {

struct RunOptions {
  bool quick = false;    // smaller sizes and fewer repetitions: a whole CPU run within a minute
  int reps = 5;          // timed repetitions per metric (already resolved from --reps / --quick)
  int warmup = 1;        // untimed runs first
  unsigned threads = 0;  // resolved by rbench run: never 0 there (0 in a suite means all usable cores)
  std::string dir;       // where I/O suites write (default: $TMPDIR, else /tmp)
  unsigned ranks = 2;    // processes of the communication suites (comm.*): 2 to 64, checked by rbench run
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
  // Throws rkit::Error (Usage, DataErr) for options or environment the suite cannot run
  // with; rbench run calls it for every suite it will run before running any, so that
  // a mistake is not found after minutes of other suites. Cheap; the default accepts all.
  virtual void check_options(const RunOptions&) const {}
  virtual std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) = 0;
  // The body of a helper process the suite starts itself (one rank of a collective):
  // `rbench _worker SUITE ARGS...` calls this with ARGS and exits with what it returns.
  // Throws rkit::Error like run(). The default: Error(Usage), the suite has no workers.
  virtual int worker(const std::vector<std::string>& args);
};

// The hidden first argument that makes rbench a suite's helper process, and the entry
// rbench's main calls then with the arguments after it (SUITE ARGS...): the suite's
// worker() exit code, or an error reported on stderr as main would.
inline constexpr const char* kWorkerCommand = "_worker";
int run_worker(int argc, char** argv);

// Every registered suite, sorted by name. The first call loads the GPU plug-in, whose
// suites (or their stand-ins, when it does not load) are then among them.
std::vector<Suite*> suites();
// The suite called `name`, or nullptr; loads the GPU plug-in only for a name rbench
// itself lacks.
Suite* find_suite(const std::string& name);
// The suites `names` select, in that order, each once: an exact name, or the part before
// a dot ("cpu" is every cpu.* suite, in name order); none named: every suite. Loads the
// GPU plug-in only when it may be needed (no names, a name that selects a gpu.* suite,
// or one rbench itself lacks), so that `rbench run cpu.stream` does not load CUDA's
// libraries. Throws Error(Usage) for a name that selects nothing, listing the known ones.
std::vector<Suite*> select_suites(const std::vector<std::string>& names);

// Runs the suites in order, giving each measurement to `result` as its suite finishes.
// A suite that throws Error(Exit::Unavailable) while running (a GPU with too little free
// memory, NCCL failing to start) is passed to `skipped` with why (its message, less a
// leading "SUITE: "), and the others still run; any other error ends the run. Returns
// how many suites ran to the end.
std::size_t run_suites(const std::vector<Suite*>& chosen, const RunOptions& opt, const Progress& progress,
                       const std::function<void(const Suite&, const Measurement&)>& result,
                       const std::function<void(const Suite&, const std::string& why)>& skipped);

struct Registrar {
  explicit Registrar(std::unique_ptr<Suite> suite);
};
#define RKIT_BENCH_SUITE(Type) \
  static const ::rkit::rbench::Registrar rkit_bench_registrar_##Type { std::make_unique<Type>() }

// Runs f() warmup times untimed, then reps times, and returns each timed run's
// wall-clock seconds (steady clock). Throws Error(TempFail) when interrupted (Ctrl-C).
std::vector<double> time_repetitions(int warmup, int reps, const std::function<void()>& f);

}  // namespace rkit::rbench
