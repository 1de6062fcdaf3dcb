// File: tools/rcost/report.cpp — grouping, pricing, waste and idle capacity (report.hpp).
#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <thread>
#include <unordered_map>

#include "rkit/cli.hpp"
#include "rkit/error.hpp"
#include "rkit/time.hpp"
#include "rkit/units.hpp"

namespace rkit::rcost {

// ------------------------------------------------------------------ keys and time

namespace {

constexpr std::pair<Key, const char*> kKeyNames[] = {
    {Key::Tenant, "tenant"},       {Key::User, "user"},   {Key::Project, "project"}, {Key::GpuType, "gpu_type"},
    {Key::Backend, "backend"},     {Key::Node, "node"},   {Key::Partition, "partition"}, {Key::State, "state"},
    {Key::Job, "job"},             {Key::Day, "day"},     {Key::Month, "month"}};

// Month i = year × 12 + month from 0.
std::int64_t month_index(double t) {
  const std::tm tm = utc_tm(t);
  return (tm.tm_year + 1900) * 12LL + tm.tm_mon;
}

// The first second of month i, UTC (arithmetic: called from several threads here).
double month_start(std::int64_t i) { return utc_seconds(static_cast<long>(i / 12), static_cast<int>(i % 12) + 1, 1); }

}  // namespace

std::string key_name(Key k) {
  for (auto [key, name] : kKeyNames)
    if (key == k) return name;
  return "?";
}

std::vector<Key> parse_keys(const std::string& text) {
  std::vector<Key> keys;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string word = text.substr(from, comma - from);
    from = comma + 1;
    const auto* it = std::find_if(std::begin(kKeyNames), std::end(kKeyNames), [&](auto& kn) { return word == kn.second; });
    if (it == std::end(kKeyNames)) {
      std::string all;
      for (auto [k, n] : kKeyNames) all += (all.empty() ? "" : ", ") + std::string(n);
      usage_error(fmt::format("--by: unknown key \"{}\" (keys: {})", word, all));
    }
    if (std::find(keys.begin(), keys.end(), it->first) != keys.end()) usage_error(fmt::format("--by: \"{}\" given twice", word));
    keys.push_back(it->first);
  }
  const bool day = std::count(keys.begin(), keys.end(), Key::Day), month = std::count(keys.begin(), keys.end(), Key::Month);
  if (day && month) usage_error("--by: day and month cannot be combined");
  return keys;
}

std::pair<double, double> month_of(double t) {
  const std::int64_t i = month_index(t);
  return {month_start(i), month_start(i + 1)};
}

std::string format_day(double unix_s) {
  const std::tm tm = utc_tm(unix_s);
  return fmt::format("{:04}-{:02}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}
std::string format_month(double unix_s) {
  const std::tm tm = utc_tm(unix_s);
  return fmt::format("{:04}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1);
}
std::string format_iso(double unix_s) {
  const std::tm tm = utc_tm(unix_s);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

double parse_time_arg(const std::string& text, double now, const std::string& option) {
  if (text == "now") return now;
  if (text == "today") return std::floor(now / kDay) * kDay;
  if (!text.empty() && text[0] == '@') {
    try {
      std::size_t used = 0;
      const double v = std::stod(text.substr(1), &used);
      if (used == text.size() - 1 && std::isfinite(v)) return v;
    } catch (const std::exception&) {
    }
    usage_error(fmt::format("{}: \"{}\" is not @UNIX_SECONDS", option, text));
  }
  // YYYY-MM-DD[(T| )HH:MM[:SS]][Z]
  std::tm tm{};
  int n = 0;
  if (text.size() >= 10 && std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &n) == 3 &&
      n == 10) {
    std::string rest = text.substr(10);
    if (!rest.empty() && rest.back() == 'Z') rest.pop_back();
    int m = 0;
    bool ok = rest.empty();
    if (!ok && (rest[0] == 'T' || rest[0] == ' ')) {
      if (std::sscanf(rest.c_str() + 1, "%2d:%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &m) == 3)
        ok = static_cast<std::size_t>(m) + 1 == rest.size();
      else if (std::sscanf(rest.c_str() + 1, "%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &m) == 2)
        ok = static_cast<std::size_t>(m) + 1 == rest.size();
    }
    const bool in_range = tm.tm_mon >= 1 && tm.tm_mon <= 12 && tm.tm_mday >= 1 && tm.tm_mday <= 31 &&
                          tm.tm_hour >= 0 && tm.tm_hour < 24 && tm.tm_min >= 0 && tm.tm_min < 60 && tm.tm_sec >= 0 &&
                          tm.tm_sec <= 60;
    if (ok && in_range) return utc_seconds(tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  } else {
    try {
      return now - parse_duration(text);
    } catch (const Error&) {
    }
  }
  usage_error(fmt::format("{}: \"{}\" is not a time (2026-11-01, 2026-11-01T08:00Z, @UNIX_SECONDS, now, today, "
                          "or a duration such as 7d meaning that long ago)",
                          option, text));
}

// ------------------------------------------------------------------ prices

Rates job_rates(const PriceSheet& prices, const std::string& backend, const std::string& gpu_type) {
  const ResourcePrices& p = prices.at(backend);
  Rates r;
  r.cpu = p.hourly(1, 0, "", 0);
  r.gpu = p.hourly(0, 1, gpu_type, 0);
  r.memory_gib = p.hourly(0, 0, "", 1ull << 30);
  const double effective = r.cpu + r.gpu + r.memory_gib;
  const double list = p.list_hourly(1, 0, "", 0) + p.list_hourly(0, 1, gpu_type, 0) + p.list_hourly(0, 0, "", 1ull << 30);
  r.list_factor = effective > 0 ? list / effective : 1;
  return r;
}

namespace {

// Percentile q (0..1) of v, linear between ranks; reorders v. O(n).
double percentile(std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double a = v[lo];
  if (pos == static_cast<double>(lo) || lo + 1 >= v.size()) return a;
  const double b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  return a + (pos - static_cast<double>(lo)) * (b - a);
}

}  // namespace

void Row::finish_waits() {
  wait_count = waits.size();
  if (!waits.empty()) {
    wait_p50 = percentile(waits, 0.5);
    wait_p90 = percentile(waits, 0.9);
    wait_p99 = percentile(waits, 0.99);
  }
  std::vector<double>().swap(waits);
}

std::unordered_map<std::uint32_t, HostFacts> host_facts(const Dataset& data, const std::string& fallback_backend) {
  std::unordered_map<std::uint32_t, HostFacts> hosts;
  std::unordered_map<std::uint32_t, double> model_at;
  for (const Sample& s : data.samples) {
    HostFacts& h = hosts[s.host];
    if (h.backend.empty()) h.backend = fallback_backend;
    if (s.gpu_model && (!h.model || s.end < model_at[s.host])) {
      h.model = s.gpu_model;
      model_at[s.host] = s.end;
    }
  }
  std::unordered_map<std::uint32_t, std::map<std::uint32_t, std::uint64_t>> backends;
  for (const Job& j : data.jobs)
    if (j.node && hosts.count(j.node)) ++backends[j.node][j.backend];
  for (const auto& [host, counts] : backends)
    hosts[host].backend = data.strings.name(
        std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) { return a.second < b.second; })->first);
  return hosts;
}

// ------------------------------------------------------------------ the report

namespace {

constexpr std::size_t kMaxKeys = 10;

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

struct GroupKey {
  std::array<std::uint32_t, kMaxKeys> ids{};
  std::int64_t bucket = 0;
  bool operator==(const GroupKey&) const = default;
};
struct GroupHash {
  std::size_t operator()(const GroupKey& k) const {
    std::uint64_t h = static_cast<std::uint64_t>(k.bucket) * 0x9E3779B97F4A7C15ull;
    for (std::uint32_t id : k.ids) h = (h ^ id) * 0x100000001B3ull + (h >> 29);
    return static_cast<std::size_t>(h);
  }
};
using Groups = std::unordered_map<GroupKey, Row, GroupHash>;

// Tenant × period cost, for budgets.
using TenantCosts = std::map<std::pair<std::uint32_t, std::int64_t>, double>;

std::uint32_t attribute(const Job& j, std::size_t index, Key k) {
  switch (k) {
    case Key::Tenant: return j.tenant;
    case Key::User: return j.user;
    case Key::Project: return j.project;
    case Key::GpuType: return j.gpu_type;
    case Key::Backend: return j.backend;
    case Key::Node: return j.node;
    case Key::Partition: return j.partition;
    case Key::State: return j.state;
    case Key::Job: return static_cast<std::uint32_t>(index);
    default: return 0;
  }
}

void add(Row& into, const Row& from) {
  into.jobs += from.jobs;
  into.gpu_hours += from.gpu_hours;
  into.core_hours += from.core_hours;
  into.memory_gib_hours += from.memory_gib_hours;
  into.cost += from.cost;
  into.list_cost += from.list_cost;
  into.gpu_sampled_hours += from.gpu_sampled_hours;
  into.gpu_used_hours += from.gpu_used_hours;
  into.core_sampled_hours += from.core_sampled_hours;
  into.core_used_hours += from.core_used_hours;
  into.waste_cost += from.waste_cost;
  into.idle_cost += from.idle_cost;
  into.waits.insert(into.waits.end(), from.waits.begin(), from.waits.end());
}

class Builder {
 public:
  Builder(const Dataset& data, const ReportOptions& opt) : data_(data), opt_(opt) {
    for (Key k : opt.keys) {
      if (k == Key::Day) periods_.kind = Periods::Day;
      else if (k == Key::Month) periods_.kind = Periods::Month;
      else attr_keys_.push_back(k);
    }
    window();
    index_samples();
    hosts_ = host_facts(data, opt.capacity_backend);
  }

  Report build() {
    Report r;
    r.currency = opt_.prices->currency;
    r.priced = opt_.prices->priced;
    r.since = periods_.window_start;
    r.until = periods_.window_end;
    r.jobs_read = data_.jobs.size();
    r.samples = data_.samples.size();
    for (Key k : opt_.keys) r.key_names.push_back(key_name(k));
    run_jobs();
    sampled_usage();
    capacity(r);
    share_idle();
    finish_rows(r);
    budgets(r);
    return r;
  }

 private:
  // The window: --since (else the first start or sample) to --until.
  void window() {
    double first = opt_.until;
    for (const Job& j : data_.jobs)
      if (known(j.start)) first = std::min(first, j.start);
    for (const Sample& s : data_.samples) first = std::min(first, s.end - s.interval_s);
    periods_.window_start = known(opt_.since) ? opt_.since : first;
    periods_.window_end = opt_.until;
  }

  GroupKey key_of(const Job& j, std::size_t index, std::int64_t bucket) const {
    GroupKey k;
    for (std::size_t i = 0; i < attr_keys_.size(); ++i) k.ids[i] = attribute(j, index, attr_keys_[i]);
    k.bucket = bucket;
    return k;
  }

  // The rates of a job: its backend and GPU type (else the GPUs its host's samples name).
  const Rates& rates_of(const Job& j, std::unordered_map<std::uint64_t, Rates>& cache) const {
    std::uint32_t model = j.gpu_type;
    if (model == 0)
      if (auto it = hosts_.find(j.node); it != hosts_.end()) model = it->second.model;
    const std::uint64_t key = (static_cast<std::uint64_t>(j.backend) << 32) | model;
    auto it = cache.find(key);
    if (it == cache.end())
      it = cache.emplace(key, job_rates(*opt_.prices, data_.strings.name(j.backend), data_.strings.name(model))).first;
    return it->second;
  }

  // Hours, cost and waits of every job: threads take ranges of jobs.
  void run_jobs() {
    const std::size_t n = data_.jobs.size();
    const unsigned threads = static_cast<unsigned>(std::clamp<std::size_t>(n / 200000, 1, std::max(1u, opt_.threads)));
    std::vector<Groups> groups(threads);
    std::vector<TenantCosts> tenant_costs(threads);
    std::vector<std::uint64_t> ran(threads, 0);
    // Prices are looked up once, here, so that a backend missing from the sheet fails early.
    std::unordered_map<std::uint64_t, Rates> warm;
    for (const Job& j : data_.jobs) rates_of(j, warm);
    auto work = [&](unsigned t) {
      std::unordered_map<std::uint64_t, Rates> cache = warm;
      Groups& g = groups[t];
      const std::size_t from = n * t / threads, to = n * (t + 1) / threads;
      for (std::size_t i = from; i < to; ++i) {
        const Job& j = data_.jobs[i];
        if (!known(j.start)) continue;
        const double a = std::max(j.start, periods_.window_start);
        const double b = std::min(known(j.end) ? j.end : periods_.window_end, periods_.window_end);
        const Rates& rate = rates_of(j, cache);
        const double per_hour = j.cpus * rate.cpu + j.gpus * rate.gpu + j.memory_bytes / (1ull << 30) * rate.memory_gib;
        if (b > a) {
          ++ran[t];
          periods_.split(a, b, [&](std::int64_t bucket, double from_s, double to_s) {
            Row& row = g[key_of(j, i, bucket)];
            const double h = (to_s - from_s) / 3600;
            ++row.jobs;
            row.gpu_hours += j.gpus * h;
            row.core_hours += j.cpus * h;
            row.memory_gib_hours += j.memory_bytes / (1ull << 30) * h;
            row.cost += per_hour * h;
            row.list_cost += per_hour * rate.list_factor * h;
            if (!budgets_empty()) tenant_costs[t][{j.tenant, bucket}] += per_hour * h;
          });
        }
        if (j.start >= periods_.window_start && j.start < periods_.window_end) {
          const double wait = j.start - (known(j.eligible) ? j.eligible : j.submit);
          g[key_of(j, i, periods_.index(j.start))].waits.push_back(wait);
        }
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (auto& th : pool) th.join();
    groups_ = std::move(groups[0]);
    for (unsigned t = 1; t < threads; ++t)
      for (auto& [k, row] : groups[t]) add(groups_[k], row);
    for (unsigned t = 0; t < threads; ++t) {
      jobs_run_ += ran[t];
      for (auto& [k, c] : tenant_costs[t]) tenant_costs_[k] += c;
    }
  }

  bool budgets_empty() const { return opt_.budgets.empty(); }

  // Samples by host, in time order. Where samples overlap (two samplers on one host),
  // a sample starts where the ones before it ended, and one wholly inside them is
  // dropped, so the host's covered time is the union of the samples' intervals.
  void index_samples() {
    for (std::uint32_t i = 0; i < data_.samples.size(); ++i) by_host_[data_.samples[i].host].push_back(i);
    starts_.resize(data_.samples.size());
    auto start = [&](std::uint32_t i) { return data_.samples[i].end - data_.samples[i].interval_s; };
    for (auto& [host, list] : by_host_) {
      std::sort(list.begin(), list.end(), [&](auto a, auto b) { return start(a) < start(b); });
      double covered = -INFINITY;
      std::vector<std::uint32_t> kept;
      for (std::uint32_t i : list) {
        const Sample& s = data_.samples[i];
        if (s.end <= covered) continue;
        starts_[i] = std::max(start(i), covered);
        covered = s.end;
        kept.push_back(i);
      }
      list = std::move(kept);  // disjoint, so in order of both start and end
    }
  }

  // Sample i's interval within the window (empty when outside it).
  std::pair<double, double> span(std::uint32_t i) const {
    return {std::max(starts_[i], periods_.window_start), std::min(data_.samples[i].end, periods_.window_end)};
  }

  // Calls f(sample index, from, to) for each sample of `host` overlapping [a, b).
  template <class F>
  void each_sample(std::uint32_t host, double a, double b, F&& f) const {
    const auto it = by_host_.find(host);
    if (it == by_host_.end() || host == 0) return;
    const auto& list = it->second;
    auto at = std::upper_bound(list.begin(), list.end(), a, [&](double t, std::uint32_t i) { return t < data_.samples[i].end; });
    for (; at != list.end(); ++at) {
      const std::uint32_t i = *at;
      const auto [sa, sb] = span(i);
      const double from = std::max(a, sa), to = std::min(b, sb);
      if (starts_[i] >= b) break;
      if (to > from) f(i, from, to);
    }
  }

  // Waste: what jobs on sampled hosts held and used, sample by sample.
  void sampled_usage() {
    const std::size_t ns = data_.samples.size();
    if (ns == 0) return;
    held_gpu_.assign(ns, 0);
    held_cpu_.assign(ns, 0);
    held_mem_.assign(ns, 0);
    used_gpu_.assign(ns, 0);
    used_cpu_.assign(ns, 0);
    std::vector<std::size_t> sampled;  // jobs on hosts with samples
    for (std::size_t i = 0; i < data_.jobs.size(); ++i) {
      const Job& j = data_.jobs[i];
      if (!known(j.start) || j.node == 0 || !by_host_.count(j.node)) continue;
      if (job_end(j) <= std::max(j.start, periods_.window_start)) continue;  // no run in the window
      sampled.push_back(i);
      each_sample(j.node, std::max(j.start, periods_.window_start), job_end(j), [&](std::uint32_t s, double a, double b) {
        held_gpu_[s] += j.gpus * (b - a);
        held_cpu_[s] += j.cpus * (b - a);
        held_mem_[s] += j.memory_bytes / (1ull << 30) * (b - a);
      });
    }
    std::unordered_map<std::uint64_t, Rates> cache;
    for (std::size_t i : sampled) {
      const Job& j = data_.jobs[i];
      const Rates& rate = rates_of(j, cache);
      const bool gpu_indices = j.gpus_count > 0 && j.gpus_count == j.gpus;
      const bool pu_indices = j.pus_count > 0;
      periods_.split(std::max(j.start, periods_.window_start), job_end(j), [&](std::int64_t bucket, double pa, double pb) {
        Row& row = groups_[key_of(j, i, bucket)];
        each_sample(j.node, pa, pb, [&](std::uint32_t si, double a, double b) {
          const Sample& s = data_.samples[si];
          const double len = b - a;
          const auto [sa, sb] = span(si);
          const double cap_g = s.gpus_count * (sb - sa), cap_c = s.cpu_capacity() * (sb - sa);
          const double fg = held_gpu_[si] > cap_g ? cap_g / held_gpu_[si] : 1;
          const double fc = held_cpu_[si] > cap_c ? cap_c / held_cpu_[si] : 1;
          double ug = j.gpus * s.gpu_util_mean;
          if (gpu_indices) {
            ug = 0;
            for (std::uint32_t u = 0; u < j.gpus_count; ++u) ug += gpu_util(s, data_.units[j.gpus_at + u]);
          }
          double uc = j.cpus * s.cpu_util;
          if (pu_indices) {
            uc = 0;
            for (std::uint32_t u = 0; u < j.pus_count; ++u) {
              const std::uint32_t pu = data_.units[j.pus_at + u];
              uc += pu < s.cpus_count ? data_.utils[s.cpus_at + pu] : 0;
            }
            uc *= j.cpus / j.pus_count;  // cores held per PU listed
          }
          // What the job's cgroup measured beats what its host's samples suggest: the
          // job's own mean cores over its run.
          if (known(j.cpu_used_s) && known(j.start) && known(j.end) && j.end > j.start)
            uc = j.cpu_used_s / (j.end - j.start);
          const double held_g = j.gpus * len * fg, used_g = std::min(ug, j.gpus) * len * fg;
          const double held_c = j.cpus * len * fc, used_c = std::min(uc, j.cpus) * len * fc;
          row.gpu_sampled_hours += held_g / 3600;
          row.gpu_used_hours += used_g / 3600;
          row.core_sampled_hours += held_c / 3600;
          row.core_used_hours += used_c / 3600;
          row.waste_cost += ((held_g - used_g) * rate.gpu + (held_c - used_c) * rate.cpu) / 3600;
          used_gpu_[si] += used_g;
          used_cpu_[si] += used_c;
        });
      });
    }
  }

  double job_end(const Job& j) const { return std::min(known(j.end) ? j.end : periods_.window_end, periods_.window_end); }

  double gpu_util(const Sample& s, std::uint32_t index) const {
    for (std::uint32_t g = 0; g < s.gpus_count; ++g)
      if (data_.gpu_utils[s.gpus_at + g].first == index) return data_.gpu_utils[s.gpus_at + g].second;
    return 0;
  }

  // Every sampled second of capacity lands in one bucket: used, allocated idle, or
  // unallocated; the unallocated part is priced at the host's rates into the idle pool.
  void capacity(Report& r) {
    for (const auto& [host, list] : by_host_) {
      const HostFacts& facts = hosts_.at(host);
      const Rates rate = job_rates(*opt_.prices, facts.backend, data_.strings.name(facts.model));
      for (std::uint32_t si : list) {
        const Sample& s = data_.samples[si];
        const auto [a, b] = span(si);
        if (b <= a) continue;
        const double cap_g = s.gpus_count * (b - a), cap_c = s.cpu_capacity() * (b - a);
        const double cap_m = s.memory_total_bytes / (1ull << 30) * (b - a);
        const double held_g = std::min(cap_g, held_gpu_[si]), held_c = std::min(cap_c, held_cpu_[si]);
        const double held_m = std::min(cap_m, held_mem_[si]);
        tally(r.gpu, cap_g, used_gpu_[si], held_g, rate.gpu, 1);
        tally(r.cpu, cap_c, used_cpu_[si], held_c, rate.cpu, 1);
        tally(r.memory, cap_m, held_m, held_m, rate.memory_gib, 1);
        const double idle_cost = ((cap_g - held_g) * rate.gpu + (cap_c - held_c) * rate.cpu + (cap_m - held_m) * rate.memory_gib) / 3600;
        // A sample across a period boundary is shared between the periods by time.
        periods_.split(a, b, [&](std::int64_t bucket, double pa, double pb) {
          const double w = (pb - pa) / (b - a);
          idle_pool_[bucket] += idle_cost * w;
          auto& [gpu, cpu] = capacity_by_period_[bucket];
          tally(gpu, cap_g, used_gpu_[si], held_g, rate.gpu, w);
          tally(cpu, cap_c, used_cpu_[si], held_c, rate.cpu, w);
        });
      }
    }
  }

  // Adds a sample's unit-seconds, times `w`, as hours.
  static void tally(Capacity& c, double cap, double used, double held, double rate, double w) {
    const double k = w / 3600;
    c.capacity += cap * k;
    c.used += used * k;
    c.allocated_idle += (held - used) * k;
    c.unallocated += (cap - held) * k;
    c.unallocated_cost += (cap - held) * k * rate;
  }

  // Unallocated capacity's cost goes to the rows of its period.
  void share_idle() {
    std::unordered_map<std::int64_t, std::pair<double, std::size_t>> per_bucket;  // cost, rows
    for (auto& [k, row] : groups_) {
      auto& [cost, rows] = per_bucket[k.bucket];
      cost += row.cost;
      ++rows;
    }
    for (const auto& [bucket, pool] : idle_pool_) {
      const auto it = per_bucket.find(bucket);
      if (opt_.share_idle == ShareIdle::None || it == per_bucket.end()) {
        GroupKey k;
        k.ids.fill(UINT32_MAX);
        k.bucket = bucket;
        Row& row = groups_[k];
        row.idle_cost += pool;
        row.idle_row = true;
        continue;
      }
      const auto [cost, rows] = it->second;
      for (auto& [k, row] : groups_)
        if (k.bucket == bucket)
          row.idle_cost += opt_.share_idle == ShareIdle::Weighted && cost > 0 ? pool * row.cost / cost
                                                                               : pool / static_cast<double>(rows);
    }
  }

  void finish_rows(Report& r) {
    r.jobs_run = jobs_run_;
    r.rows.reserve(groups_.size());
    std::vector<std::int64_t> buckets;
    for (auto& [k, row] : groups_) {
      row.keys.clear();
      std::size_t attr = 0;
      for (Key key : opt_.keys) {
        if (key == Key::Day) row.keys.push_back(format_day(periods_.start(k.bucket)));
        else if (key == Key::Month) row.keys.push_back(format_month(periods_.start(k.bucket)));
        else if (row.idle_row) row.keys.push_back("__idle__"), ++attr;
        else if (key == Key::Job) row.keys.push_back(data_.job_id(k.ids[attr++]));
        else row.keys.push_back(data_.strings.name(k.ids[attr++]));
      }
      row.span_start = std::max(periods_.start(k.bucket), periods_.window_start);
      row.span_end = std::min(periods_.end(k.bucket), periods_.window_end);
      add(r.total, row);
      row.finish_waits();
      r.rows.push_back(std::move(row));
      buckets.push_back(k.bucket);
    }
    std::vector<std::size_t> order(r.rows.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const Row &x = r.rows[a], &y = r.rows[b];
      if (buckets[a] != buckets[b]) return buckets[a] < buckets[b];
      if (x.idle_row != y.idle_row) return y.idle_row;
      if (x.total_cost() != y.total_cost()) return x.total_cost() > y.total_cost();
      // Unpriced, or the same cost: the most held first.
      if (x.gpu_hours != y.gpu_hours) return x.gpu_hours > y.gpu_hours;
      if (x.core_hours != y.core_hours) return x.core_hours > y.core_hours;
      return x.keys < y.keys;
    });
    std::vector<Row> sorted;
    sorted.reserve(order.size());
    for (std::size_t i : order) sorted.push_back(std::move(r.rows[i]));
    r.rows = std::move(sorted);
    r.total.jobs = jobs_run_;
    r.total.finish_waits();
    r.total.span_start = periods_.window_start;
    r.total.span_end = periods_.window_end;
    const double all = r.total.total_cost();
    for (Row& row : r.rows) row.share = all > 0 ? row.total_cost() / all : 0;
    r.total.share = all > 0 ? 1 : 0;
    for (const auto& [bucket, caps] : capacity_by_period_) {
      PeriodCapacity p;
      p.start = std::max(periods_.start(bucket), periods_.window_start);
      p.end = std::min(periods_.end(bucket), periods_.window_end);
      p.label = periods_.kind == Periods::Day ? format_day(p.start) : periods_.kind == Periods::Month ? format_month(p.start) : "";
      p.gpu = caps.first;
      p.cpu = caps.second;
      r.periods.push_back(p);
    }
    r.total.keys.assign(opt_.keys.size(), "");
    if (!r.total.keys.empty()) r.total.keys[0] = "TOTAL";
  }

  // A monthly budget prorated to [a, b): each month contributes its covered share.
  double prorated(double monthly, double a, double b) const {
    double months = 0;
    Periods m;
    m.kind = Periods::Month;
    m.split(a, b, [&](std::int64_t i, double pa, double pb) { months += (pb - pa) / (m.end(i) - m.start(i)); });
    return monthly * months;
  }

  void budgets(Report& r) {
    if (opt_.budgets.empty()) return;
    const auto tenant_at = std::find(opt_.keys.begin(), opt_.keys.end(), Key::Tenant);
    if (tenant_at != opt_.keys.end()) {
      const std::size_t at = static_cast<std::size_t>(tenant_at - opt_.keys.begin());
      for (Row& row : r.rows)
        if (auto it = opt_.budgets.find(row.keys[at]); it != opt_.budgets.end() && !row.idle_row)
          row.budget = prorated(it->second, row.span_start, row.span_end);
    }
    // Over the whole window: the tenant's total as its rows show it when the report is
    // by tenant; else its cost plus its share of idle capacity, shared per period by
    // tenant.
    if (tenant_at != opt_.keys.end()) {
      const std::size_t at = static_cast<std::size_t>(tenant_at - opt_.keys.begin());
      for (const auto& [tenant, monthly] : opt_.budgets) {
        TenantBudget b{tenant, 0, prorated(monthly, periods_.window_start, periods_.window_end)};
        for (const Row& row : r.rows)
          if (!row.idle_row && row.keys[at] == tenant) b.cost += row.total_cost();
        r.budgets.push_back(b);
      }
      return;
    }
    std::map<std::uint32_t, double> total;
    std::unordered_map<std::int64_t, std::pair<double, std::size_t>> per_bucket;
    for (const auto& [k, cost] : tenant_costs_) {
      total[k.first] += cost;
      per_bucket[k.second].first += cost;
      ++per_bucket[k.second].second;
    }
    if (opt_.share_idle != ShareIdle::None)
      for (const auto& [k, cost] : tenant_costs_) {
        const auto pool = idle_pool_.find(k.second);
        if (pool == idle_pool_.end()) continue;
        const auto [sum, n] = per_bucket[k.second];
        total[k.first] += opt_.share_idle == ShareIdle::Weighted && sum > 0 ? pool->second * cost / sum
                                                                            : pool->second / static_cast<double>(n);
      }
    for (const auto& [tenant, monthly] : opt_.budgets) {
      TenantBudget b{tenant, 0, prorated(monthly, periods_.window_start, periods_.window_end)};
      for (const auto& [id, cost] : total)
        if (data_.strings.name(id) == tenant) b.cost = cost;
      r.budgets.push_back(b);
    }
  }

  const Dataset& data_;
  const ReportOptions& opt_;
  Periods periods_;
  std::vector<Key> attr_keys_;
  Groups groups_;
  TenantCosts tenant_costs_;
  std::uint64_t jobs_run_ = 0;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> by_host_;
  std::unordered_map<std::uint32_t, HostFacts> hosts_;  // sampled hosts
  std::vector<double> starts_;  // effective start of each sample
  std::vector<double> held_gpu_, held_cpu_, held_mem_, used_gpu_, used_cpu_;  // unit-seconds per sample
  std::map<std::int64_t, double> idle_pool_;  // period → unallocated capacity cost
  std::map<std::int64_t, std::pair<Capacity, Capacity>> capacity_by_period_;  // GPU, CPU
};

}  // namespace

Report make_report(const Dataset& data, const ReportOptions& opt) {
  if (!opt.prices) throw Error(Exit::Software, "make_report: no price sheet");
  return Builder(data, opt).build();
}

}  // namespace rkit::rcost
