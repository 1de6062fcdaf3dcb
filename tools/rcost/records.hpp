// File: tools/rcost/records.hpp
//
// What rcost reads, in a compact form: jobs (rkit.job.v1 records, or `sacct -P`
// text), utilisation samples (rkit.sample.v1), and the records it could not use.
// Inputs are files or "-" (stdin, read whole); each is split into chunks of about
// 16 MiB at line boundaries, parsed by several threads with simdjson. A report streams
// the chunks (Inputs::stream: memory bounded by the chunks in flight, not the input);
// read_inputs keeps every record.
//
//   rkit::rcost::ReadOptions opt;            // opt.threads, opt.slurm_backend, ...
//   rkit::rcost::Dataset data = read_inputs({"jobs.jsonl", "-"}, opt);
//   for (const Job& j : data.jobs) ... data.strings.name(j.tenant) ...
//   for (const BadRecord& b : data.bad) ... b.where, b.why ...
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rkit::rcost {

inline constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
inline bool known(double t) { return !std::isnan(t); }

// Interned names (tenants, users, hosts, ...): a job holds small ids. Id 0 is "".
class Strings {
 public:
  Strings() { id(""); }
  std::uint32_t id(std::string_view s);
  std::optional<std::uint32_t> find(std::string_view s) const;  // the id, without adding s
  const std::string& name(std::uint32_t id) const { return names_[id]; }
  std::size_t size() const { return names_.size(); }

 private:
  static std::uint64_t hash(std::string_view s);
  void grow();
  std::vector<std::string> names_;
  std::vector<std::uint64_t> hashes_;
  std::vector<std::uint32_t> slots_;  // open addressing: id + 1, 0 for empty; size a power of two
};

// One job's last attempt, as a cost report needs it. Times are Unix seconds; kNone
// when absent (never started, still running).
struct Job {
  std::uint32_t tenant = 0, user = 0, project = 0, gpu_type = 0, backend = 0, node = 0, partition = 0, state = 0;
  std::uint32_t workflow = 0, rule = 0;  // the workflow a job is a step of, and its rule (0: none)
  std::uint32_t experiment = 0;          // the experiment of the run it was (ReadOptions::experiments; 0: none)
  double submit = kNone, eligible = kNone, start = kNone, end = kNone;
  double cpus = 0, gpus = 0, memory_bytes = 0;
  double cpu_used_s = kNone;  // CPU seconds its cgroup measured (rkit.job.v1 cpu_used_s), when known
  // Which CPUs (PUs) and GPUs of `node` it held, when the record says (local jobs):
  // offsets into Dataset::units; count 0 when unknown.
  std::uint32_t pus_at = 0, pus_count = 0, gpus_at = 0, gpus_count = 0;
};

// One rkit.sample.v1 record: the interval (end - interval_s, end] on `host`.
struct Sample {
  std::uint32_t host = 0;
  double end = 0, interval_s = 0;
  double cpu_util = 0, gpu_util_mean = 0;     // 0..1
  std::uint32_t cpus_at = 0, cpus_count = 0;  // per-CPU utilisation: Dataset::utils
  std::uint32_t gpus_at = 0, gpus_count = 0;  // per-GPU (index, util) pairs: Dataset::gpu_utils
  double memory_total_bytes = 0;
  double cores = 0;             // physical cores; 0 when the record does not say
  std::uint32_t gpu_model = 0;  // the first GPU's name, when the record gives one

  // CPU capacity in cores: jobs hold cores, and a core's SMT siblings are one core.
  double cpu_capacity() const { return cores > 0 ? cores : cpus_count; }
};

struct BadRecord {
  std::string where;  // "file:line"
  std::string why;
};

// An allocator whose resize() leaves new elements unwritten, for element types that
// are then copied into place (implicit-lifetime types: C++20 creates them by the copy).
template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U*) noexcept {}
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};

struct Dataset {
  Strings strings;
  // Jobs are plain values (trivially copyable): millions are copied into place by
  // several threads, into room that resize() leaves unwritten (UninitAllocator).
  std::vector<Job, UninitAllocator<Job>> jobs;
  std::vector<std::string> ids;  // each job's id ("12", "12_3", "slurm:1234"), when kept (ReadOptions::ids)
  std::vector<Sample> samples;
  std::vector<std::uint32_t> units;                        // PU and GPU indices of jobs
  std::vector<float> utils;                                // per-CPU utilisation of samples
  std::vector<std::pair<std::uint32_t, float>> gpu_utils;  // (GPU index, util) of samples
  std::vector<BadRecord> bad;                              // the first kMaxBadKept, in input order
  std::uint64_t bad_count = 0;
  std::uint64_t ignored = 0;  // known records a report does not use (bench, train events)
  std::uint64_t lines = 0;    // non-blank lines read

  // Job i's id; empty when ids were not kept.
  const std::string& job_id(std::size_t i) const;
};

inline constexpr std::size_t kMaxBadKept = 1000;

struct ReadOptions {
  unsigned threads = 0;                               // 0: all usable cores
  std::string slurm_backend = "slurm";                // the backend `sacct` jobs ran on (price sheet)
  std::map<std::string, std::string> tenant_of_user;  // sacct: user → tenant (else Account)
  bool strict = false;                                // the first bad record throws Error(DataErr)
  // What to keep of each job beyond what pricing and samples need (tenant, backend, GPU
  // type, host): a report keeps what its keys and format show; the rest is checked only.
  bool ids = true, users = true, projects = true, states = true, workflows = true;
  // Job id ("12", "slurm:1234", or sacct's "1234") → the experiment of the run it was,
  // from the run store (rtrain(1), RUN RECORDS); none: no experiments.
  const std::unordered_map<std::string, std::string>* experiments = nullptr;
};

namespace detail {
class Input;
}

// What a stream's worker made of one chunk, handed to its consumer (Inputs::stream).
struct ChunkDigest {
  virtual ~ChunkDigest() = default;
};

// The inputs of one report, opened once so that they can be read more than once
// (a report with samples reads its jobs twice; standard input is read whole when
// opened). Missing files throw Error(NoInput) here, unreadable ones Error(NoPerm).
class Inputs {
 public:
  explicit Inputs(const std::vector<std::string>& paths);
  ~Inputs();
  Inputs(const Inputs&) = delete;
  Inputs& operator=(const Inputs&) = delete;

  // On a worker thread, as each chunk is parsed (several at once, in any order): the
  // chunk (its own Strings) and its number among all the inputs' chunks, the same on
  // every read of the same inputs with the same options.
  using Digest = std::function<std::unique_ptr<ChunkDigest>(Dataset& chunk, std::uint64_t seq)>;
  // On the calling thread, chunk by chunk in input order, with what digest made of it.
  using Take = std::function<void(Dataset& chunk, std::unique_ptr<ChunkDigest> digest, std::uint64_t seq)>;
  // Reads every input once: digest (may be empty) then take for each chunk. Bad
  // records (the first kMaxBadKept, with file:line), bad_count, ignored and lines go
  // into `totals`; with opt.strict the first bad record throws Error(DataErr). An
  // exception from digest or take stops the read (every thread joined).
  void stream(const ReadOptions& opt, const Digest& digest, const Take& take, Dataset& totals) const;

 private:
  std::vector<std::unique_ptr<detail::Input>> inputs_;
};

// Reads every input (a path or "-") into one Dataset. Missing files throw
// Error(NoInput); with `strict`, a bad record throws Error(DataErr) naming file:line.
Dataset read_inputs(const std::vector<std::string>& paths, const ReadOptions& opt);
Dataset read_inputs(const Inputs& inputs, const ReadOptions& opt);

// "2026-11-30T18:19:23" (sacct's local time) → Unix seconds; kNone for "Unknown",
// "None", "" and text that is not a time.
double parse_sacct_time(std::string_view s);

// sacct's AllocTRES ("billing=2,cpu=2,gres/gpu:h100=1,mem=4G,node=1"): cores, GPUs,
// memory bytes and the GPU type when named. False when the text is malformed.
struct Tres {
  double cpus = 0, gpus = 0, memory_bytes = 0;
  std::string gpu_type;
};
bool parse_tres(std::string_view s, Tres& out);

}  // namespace rkit::rcost
