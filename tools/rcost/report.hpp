// File: tools/rcost/report.hpp
//
// The cost report: jobs and samples (records.hpp) priced with the price sheet and
// grouped by the keys asked for. Definitions (rcost(1), REPORT):
//   - a job's usage is its last attempt's run, start to end (to --until while it
//     runs), clipped to the window; it is split at day or month boundaries when the
//     report is grouped by day or month (UTC);
//   - cost = hours × the hourly price of what the job held (price sheet, by backend
//     and GPU type): GPUs and cores are billed as allocated, like Slurm;
//   - samples (rtop sample) of a host split every GPU- and core-second of its capacity
//     into exactly one of: used (utilisation × held), allocated idle (held, not used;
//     "waste") and unallocated (no job held it). Held time beyond the capacity is
//     scaled down to it, so the three add up to the capacity;
//   - unallocated capacity is priced and shared out to the rows of the same period,
//     weighted by their cost or evenly (OpenCost's idle), or shown as an "__idle__" row;
//   - queue wait is start − eligible (sacct) or start − submit, counted in the row and
//     period the job started in;
//   - a tenant's monthly budget is prorated to the row's time span.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "records.hpp"
#include "rkit/prices.hpp"
#include "waits.hpp"

namespace rkit::rcost {

enum class Key {
  Tenant,
  User,
  Project,
  Workflow,
  Rule,
  Experiment,
  GpuType,
  Backend,
  Node,
  Partition,
  State,
  Job,
  Day,
  Month
};
enum class ShareIdle { Weighted, Even, None };

// "tenant,day" → keys; Error(Usage) naming an unknown key, a repeat, or day with month.
std::vector<Key> parse_keys(const std::string& text);
std::string key_name(Key k);

struct ReportOptions {
  std::vector<Key> keys{Key::Tenant};
  double since = kNone;  // kNone: from the first record
  double until = 0;      // required: the end of the window (now, by default)
  const PriceSheet* prices = nullptr;
  ShareIdle share_idle = ShareIdle::Weighted;
  std::map<std::string, double> budgets;   // tenant → monthly budget, in the sheet's currency
  std::string capacity_backend = "local";  // prices a sampled host none of whose jobs is known
  unsigned threads = 1;
};

// What prices a sampled host's capacity: the GPU its samples name first (by time), and
// the backend most of its jobs ran on (else ReportOptions::capacity_backend).
struct HostFacts {
  std::uint32_t model = 0;  // Strings id; 0 when no sample names one
  std::string backend;
};
// Jobs per (host, backend), string ids.
using NodeBackends = std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t>;
std::unordered_map<std::uint32_t, HostFacts> host_facts(const std::vector<Sample>& samples, const NodeBackends& jobs,
                                                        const Strings& strings, const std::string& fallback_backend);
std::unordered_map<std::uint32_t, HostFacts> host_facts(const Dataset& data, const std::string& fallback_backend);

struct Row {
  std::vector<std::string> keys;        // one value per report key (days as 2026-11-30)
  double span_start = 0, span_end = 0;  // the row's time span within the window
  std::uint64_t jobs = 0;
  double gpu_hours = 0, core_hours = 0, memory_gib_hours = 0;
  double cost = 0, list_cost = 0;
  // From samples: the part of gpu_hours / core_hours that samples cover, and how much
  // of it was used; waste_cost prices the allocated idle part.
  double gpu_sampled_hours = 0, gpu_used_hours = 0, core_sampled_hours = 0, core_used_hours = 0;
  double waste_cost = 0;
  double idle_cost = 0;  // this row's share of unallocated capacity
  double share = 0;      // of the report's total cost
  Waits waits;           // queue waits, seconds, while the report is made
  std::uint64_t wait_count = 0;
  std::optional<double> wait_p50, wait_p90, wait_p99;  // seconds; exact up to Waits::kExact waits, then within 0.5%
  std::optional<double> budget;
  bool idle_row = false;  // the "__idle__" row of a period (--share-idle none, or nobody to share with)

  double total_cost() const { return cost + idle_cost; }
  double gpu_idle_hours() const { return gpu_sampled_hours - gpu_used_hours; }
  double core_idle_hours() const { return core_sampled_hours - core_used_hours; }
  // Sets wait_count and the percentiles from waits, then frees them.
  void finish_waits();
};

// Capacity from samples, per resource, in unit-hours (GPU-hours, core-hours, GiB-hours).
struct Capacity {
  double capacity = 0, used = 0, allocated_idle = 0, unallocated = 0;
  double unallocated_cost = 0;
};

// Capacity of one period (a day or month; the window when there is no time key).
struct PeriodCapacity {
  std::string label;  // "2026-11-30", "2026-11", or "" for the window
  double start = 0, end = 0;
  Capacity gpu, cpu;
};

struct TenantBudget {
  std::string tenant;
  double cost = 0, budget = 0;
};

struct Report {
  std::vector<std::string> key_names;
  std::vector<Row> rows;  // periods in order, then by total cost, largest first
  Row total;
  Capacity gpu, cpu, memory;
  std::vector<PeriodCapacity> periods;  // periods with samples, in order
  std::string currency;
  bool priced = true;                         // false: no price sheet; the money figures are unknown
  double since = 0, until = 0;                // the window
  std::uint64_t jobs_read = 0, jobs_run = 0;  // jobs in the input; those with usage in the window
  std::uint64_t samples = 0;
  std::vector<TenantBudget> budgets;  // every tenant with a budget, over the whole window
};

// The report of records in memory (aggregate.cpp).
Report make_report(const Dataset& data, const ReportOptions& opt);
// The report of `inputs` as they stream: memory bounded by the groups and samples, not
// the jobs (the jobs of sampled hosts are read twice). Bad records, line and ignored
// counts go into `totals`, as Inputs::stream says.
Report stream_report(const Inputs& inputs, const ReadOptions& read, const ReportOptions& opt, Dataset& totals);

// The hourly rates a job is billed at (effective and list), from the price sheet.
struct Rates {
  double cpu = 0, gpu = 0, memory_gib = 0;  // effective (billed)
  double list_factor = 1;                   // list price = effective × list_factor
};
Rates job_rates(const PriceSheet& prices, const std::string& backend, const std::string& gpu_type);

// Calendar helpers (UTC).
inline constexpr double kDay = 86400;
std::int64_t month_index(double unix_s);  // year × 12 + month from 0
double month_start(std::int64_t month_index);
std::pair<double, double> month_of(double unix_s);  // the month holding it: [start, end)
std::string format_day(double unix_s);              // "2026-11-30"
std::string format_month(double unix_s);            // "2026-11"
std::string format_iso(double unix_s);              // "2026-11-30T00:00:00Z"
// --since/--until text: a date or date and time (UTC; "2026-11-01", "2026-11-01T08:00",
// "2026-11-01 08:00:00Z"), "@UNIX_SECONDS", "now", "today", or a duration meaning that
// long before now ("7d"). Error(Usage) otherwise.
double parse_time_arg(const std::string& text, double now, const std::string& option);

}  // namespace rkit::rcost
