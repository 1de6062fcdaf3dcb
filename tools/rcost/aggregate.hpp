// File: tools/rcost/aggregate.hpp — the report built as records stream in: what
// aggregate.cpp (the reads) and aggregate_finish.cpp (the report) share.
//
// Memory is bounded by the report's groups, the samples and the (sample, group) pairs
// that overlap, never by the number of jobs: each chunk's jobs are summed into rows by
// a worker, and the rows merged in input order (so that the figures do not depend on
// the threads). What samples decide needs every sample first, so a report with
// samples reads the jobs of sampled hosts a second time:
//   pass 1: every job's hours, cost and wait into its rows, priced at its own GPU type
//           (or the backend's default); every sample kept; jobs per (host, backend);
//   pass 2: jobs on sampled hosts only: what they held of each sample and used, by
//           (sample, row), and the cost of jobs without a GPU type repriced at the GPU
//           their host's samples name.
// What a sample's held time is scaled by (held beyond its capacity) is known only once
// every job is in, and the sampled figures are linear in it, so pass 2 sums them
// unscaled and finish() scales them.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>

#include "report.hpp"

namespace rkit::rcost::detail {

constexpr std::size_t kMaxKeys = 11;
constexpr double kGiB = 1ull << 30;

// Calendar periods: day or month buckets (UTC), or one bucket for the whole window.
struct Periods {
  enum { None, Day, Month } kind = None;
  double window_start = 0, window_end = 0;

  std::int64_t index(double t) const {
    if (kind == Day) return static_cast<std::int64_t>(std::floor(t / kDay));
    if (kind == Month) return month_index(t);
    return 0;
  }
  double start(std::int64_t i) const {
    if (kind == Day) return static_cast<double>(i) * kDay;
    if (kind == Month) return month_start(i);
    return window_start;
  }
  double end(std::int64_t i) const { return kind == None ? window_end : start(i + 1); }
  // Calls f(bucket, from, to) for each piece of [a, b) in one bucket.
  template <class F>
  void split(double a, double b, F&& f) const {
    if (kind == None) {
      if (b > a) f(std::int64_t{0}, a, b);
      return;
    }
    for (std::int64_t i = index(a); a < b; ++i) {
      const double to = std::min(b, end(i));
      if (to > a) f(i, a, to);
      a = to;
    }
  }
};

// A row: its attribute values (string ids; the job's number for Key::Job) and period.
struct GroupKey {
  std::array<std::uint32_t, kMaxKeys> ids{};
  std::uint64_t job = 0;  // Key::Job: (chunk << 32) | index, unique per record
  std::int64_t bucket = 0;
  bool operator==(const GroupKey&) const = default;
};
struct GroupHash {
  std::size_t operator()(const GroupKey& k) const {
    std::uint64_t h = static_cast<std::uint64_t>(k.bucket) * 0x9E3779B97F4A7C15ull ^ k.job;
    for (std::uint32_t id : k.ids) h = (h ^ id) * 0x100000001B3ull + (h >> 29);
    return static_cast<std::size_t>(h);
  }
};
using Groups = std::unordered_map<GroupKey, Row, GroupHash>;
// Tenant × period cost, for budgets.
using TenantCosts = std::map<std::pair<std::uint32_t, std::int64_t>, double>;
using RateCache = std::unordered_map<std::uint64_t, Rates>;

// What jobs held and used of one sample for one row, in unit-seconds, before the
// sample's scaling; wasted_*: the idle part priced at each job's rates (per hour).
struct Cell {
  double held_gpu = 0, used_gpu = 0, held_cpu = 0, used_cpu = 0, wasted_gpu = 0, wasted_cpu = 0;
  Cell& operator+=(const Cell& o) {
    for (auto f :
         {&Cell::held_gpu, &Cell::used_gpu, &Cell::held_cpu, &Cell::used_cpu, &Cell::wasted_gpu, &Cell::wasted_cpu})
      this->*f += o.*f;
    return *this;
  }
};
struct CellKey {
  std::uint32_t sample = 0;
  GroupKey group;
  bool operator==(const CellKey&) const = default;
};
struct CellHash {
  std::size_t operator()(const CellKey& k) const { return GroupHash{}(k.group) ^ (k.sample * 0xC2B2AE3D27D4EB4Full); }
};

inline std::uint32_t attribute(const Job& j, Key k) {
  switch (k) {
    case Key::Tenant: return j.tenant;
    case Key::User: return j.user;
    case Key::Project: return j.project;
    case Key::Workflow: return j.workflow;
    case Key::Rule: return j.rule;
    case Key::Experiment: return j.experiment;
    case Key::GpuType: return j.gpu_type;
    case Key::Backend: return j.backend;
    case Key::Node: return j.node;
    case Key::Partition: return j.partition;
    case Key::State: return j.state;
    default: return 0;
  }
}

// Adds `from`'s figures and waits to `into`'s.
void add(Row& into, const Row& from);

// Pass 1's digest of a chunk, in the chunk's own string ids.
struct JobsDigest : ChunkDigest {
  Groups groups;
  TenantCosts tenant_costs;
  NodeBackends node_backends;
  std::vector<std::pair<std::uint64_t, std::string>> job_ids;  // Key::Job: the rows' job ids
  std::uint64_t jobs = 0, ran = 0;
  double first = std::numeric_limits<double>::infinity();  // the first start
};

// Pass 2's digest of a chunk.
struct SampledDigest : ChunkDigest {
  std::unordered_map<CellKey, Cell, CellHash> cells;
  std::unordered_map<std::uint32_t, std::array<double, 3>> held;  // sample → GPU, core, GiB-seconds held
  Groups repriced;  // cost and list_cost to add: jobs priced at their host's GPU
  TenantCosts tenant_repriced;
};
class Aggregator {
 public:
  explicit Aggregator(const ReportOptions& opt);

  // ---- pass 1

  std::unique_ptr<JobsDigest> digest_jobs(const Dataset& d, std::size_t from, std::size_t to, std::uint64_t seq) const;

  void take_jobs(const Dataset& d, const JobsDigest& in);

  void take_samples(const Dataset& d);

  // The window, the samples by host and the hosts' facts. True when jobs ran on sampled
  // hosts: pass 2 must then read them again.
  bool end_pass1();

  // ---- pass 2 (read-only on the report's strings: workers look ids up at once)

  std::unique_ptr<SampledDigest> digest_sampled(const Dataset& d, std::size_t from, std::size_t to,
                                                std::uint64_t seq) const;

  void take_sampled(const Dataset& d, const SampledDigest& in);

  // ---- the report

  Report finish();

 private:
  double job_end(const Job& j) const {
    return std::min(known(j.end) ? j.end : periods_.window_end, periods_.window_end);
  }

  GroupKey key_of(const Job& j, std::uint64_t job, std::int64_t bucket) const {
    GroupKey k;
    for (std::size_t i = 0; i < attr_keys_.size(); ++i) k.ids[i] = attribute(j, attr_keys_[i]);
    if (by_job_) k.job = job;
    k.bucket = bucket;
    return k;
  }
  GroupKey translate(GroupKey k, const std::vector<std::uint32_t>& map) const {
    for (std::size_t i = 0; i < attr_keys_.size(); ++i) k.ids[i] = map[k.ids[i]];
    return k;
  }

  // The rates of a backend and GPU type, looked up once per `key` (the pair's ids).
  const Rates& rates_of(std::uint64_t key, const std::string& backend, const std::string& model,
                        RateCache& cache) const {
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, job_rates(*opt_.prices, backend, model)).first;
    return it->second;
  }
  static std::uint64_t rate_key(std::uint32_t backend, std::uint32_t model) {
    return (static_cast<std::uint64_t>(backend) << 32) | model;
  }

  // Samples by host, in time order. Where samples overlap (two samplers on one host),
  // a sample starts where the ones before it ended, and one wholly inside them is
  // dropped, so the host's covered time is the union of the samples' intervals.
  void index_samples();

  // Sample i's interval within the window (empty when outside it).
  std::pair<double, double> span(std::uint32_t i) const {
    return {std::max(starts_[i], periods_.window_start), std::min(samples_[i].end, periods_.window_end)};
  }

  // Calls f(sample index, from, to) for each sample of `host` overlapping [a, b).
  template <class F>
  void each_sample(std::uint32_t host, double a, double b, F&& f) const {
    const auto it = by_host_.find(host);
    if (it == by_host_.end() || host == 0) return;
    const auto& list = it->second;
    auto at =
        std::upper_bound(list.begin(), list.end(), a, [&](double t, std::uint32_t i) { return t < samples_[i].end; });
    for (; at != list.end(); ++at) {
      const std::uint32_t i = *at;
      const auto [sa, sb] = span(i);
      const double from = std::max(a, sa), to = std::min(b, sb);
      if (starts_[i] >= b) break;
      if (to > from) f(i, from, to);
    }
  }

  double gpu_util(const Sample& s, std::uint32_t index) const {
    for (std::uint32_t g = 0; g < s.gpus_count; ++g)
      if (gpu_utils_[s.gpus_at + g].first == index) return gpu_utils_[s.gpus_at + g].second;
    return 0;
  }

  // Waste: the cells scaled where jobs held more of a sample than its capacity.
  void sampled_usage();

  // Every sampled second of capacity lands in one bucket: used, allocated idle, or
  // unallocated; the unallocated part is priced at the host's rates into the idle pool.
  void capacity(Report& r);

  // Adds a sample's unit-seconds, times `w`, as hours.
  static void tally(Capacity& c, double cap, double used, double held, double rate, double w);

  // Unallocated capacity's cost goes to the rows of its period.
  void share_idle();

  void finish_rows(Report& r);

  // A monthly budget prorated to [a, b): each month contributes its covered share.
  double prorated(double monthly, double a, double b) const;

  void budgets(Report& r);

  const ReportOptions& opt_;
  Periods periods_;
  std::vector<Key> attr_keys_;
  bool by_job_ = false;
  Strings strings_;
  Groups groups_;
  TenantCosts tenant_costs_;
  NodeBackends node_backends_;
  std::unordered_map<std::uint64_t, std::string> job_ids_;
  std::uint64_t jobs_read_ = 0, jobs_run_ = 0;
  double first_ = std::numeric_limits<double>::infinity();
  // Samples, with their per-CPU and per-GPU utilisations, in the report's string ids.
  std::vector<Sample> samples_;
  std::vector<float> utils_;
  std::vector<std::pair<std::uint32_t, float>> gpu_utils_;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> by_host_;
  std::unordered_map<std::uint32_t, HostFacts> hosts_;  // sampled hosts
  std::vector<double> starts_;                          // effective start of each sample
  std::unordered_map<CellKey, Cell, CellHash> cells_;
  std::vector<std::array<double, 3>> held_;   // per sample: GPU, core, GiB-seconds held
  std::vector<std::array<double, 2>> used_;   // per sample: GPU, core-seconds used (scaled)
  std::map<std::int64_t, double> idle_pool_;  // period → unallocated capacity cost
  std::map<std::int64_t, std::pair<Capacity, Capacity>> capacity_by_period_;  // GPU, CPU
};

}  // namespace rkit::rcost::detail
