// File: tools/rcost/aggregate.cpp — the report's two reads of the records (aggregate.hpp)
// and its entry points, make_report and stream_report (report.hpp).
#include "aggregate.hpp"

#include <fmt/format.h>

#include "rkit/error.hpp"
#include "rkit/parallel.hpp"

namespace rkit::rcost {

namespace detail {

namespace {

// A chunk's string ids → the report's.
std::vector<std::uint32_t> translation(const Strings& from, Strings& to) {
  std::vector<std::uint32_t> map(from.size());
  for (std::uint32_t i = 0; i < from.size(); ++i) map[i] = to.id(from.name(i));
  return map;
}

// The same, for names `to` already has (0 for one it lacks); leaves `to` as it is.
std::vector<std::uint32_t> lookup(const Strings& from, const Strings& to) {
  std::vector<std::uint32_t> map(from.size());
  for (std::uint32_t i = 0; i < from.size(); ++i) map[i] = to.find(from.name(i)).value_or(0);
  return map;
}

}  // namespace

Aggregator::Aggregator(const ReportOptions& opt) : opt_(opt) {
  if (!opt.prices) throw Error(Exit::Software, "make_report: no price sheet");
  for (Key k : opt.keys) {
    if (k == Key::Day)
      periods_.kind = Periods::Day;
    else if (k == Key::Month)
      periods_.kind = Periods::Month;
    else if (k == Key::Job)
      by_job_ = true;
    else
      attr_keys_.push_back(k);
  }
  // Until the window's start is known (pass 1 ends), a job is clipped at --since,
  // else not at all: the window then starts at or before every job.
  periods_.window_start = known(opt.since) ? opt.since : -std::numeric_limits<double>::infinity();
  periods_.window_end = opt.until;
}

std::unique_ptr<JobsDigest> Aggregator::digest_jobs(const Dataset& d, std::size_t from, std::size_t to,
                                                    std::uint64_t seq) const {
  auto out = std::make_unique<JobsDigest>();
  RateCache rates;
  for (std::size_t i = from; i < to; ++i) {
    const Job& j = d.jobs[i];
    ++out->jobs;
    if (j.node) ++out->node_backends[{j.node, j.backend}];
    if (!known(j.start)) continue;
    out->first = std::min(out->first, j.start);
    const double a = std::max(j.start, periods_.window_start), b = job_end(j);
    const Rates& rate =
        rates_of(rate_key(j.backend, j.gpu_type), d.strings.name(j.backend), d.strings.name(j.gpu_type), rates);
    const double per_hour = j.cpus * rate.cpu + j.gpus * rate.gpu + j.memory_bytes / kGiB * rate.memory_gib;
    const std::uint64_t job = (seq << 32) | i;
    const bool waited = j.start >= periods_.window_start && j.start < periods_.window_end;
    if (by_job_ && (b > a || waited)) out->job_ids.emplace_back(job, d.job_id(i));
    if (b > a) {
      ++out->ran;
      periods_.split(a, b, [&](std::int64_t bucket, double pa, double pb) {
        Row& row = out->groups[key_of(j, job, bucket)];
        const double h = (pb - pa) / 3600;
        ++row.jobs;
        row.gpu_hours += j.gpus * h;
        row.core_hours += j.cpus * h;
        row.memory_gib_hours += j.memory_bytes / kGiB * h;
        row.cost += per_hour * h;
        row.list_cost += per_hour * rate.list_factor * h;
        if (!opt_.budgets.empty()) out->tenant_costs[{j.tenant, bucket}] += per_hour * h;
      });
    }
    if (waited && (known(j.eligible) || known(j.submit)))
      out->groups[key_of(j, job, periods_.index(j.start))].waits.add(j.start -
                                                                     (known(j.eligible) ? j.eligible : j.submit));
  }
  return out;
}

void Aggregator::take_jobs(const Dataset& d, const JobsDigest& in) {
  const std::vector<std::uint32_t> map = translation(d.strings, strings_);
  for (const auto& [k, row] : in.groups) add(groups_[translate(k, map)], row);
  for (const auto& [k, cost] : in.tenant_costs) tenant_costs_[{map[k.first], k.second}] += cost;
  for (const auto& [k, n] : in.node_backends) node_backends_[{map[k.first], map[k.second]}] += n;
  for (const auto& [job, id] : in.job_ids) job_ids_.emplace(job, id);
  jobs_read_ += in.jobs;
  jobs_run_ += in.ran;
  first_ = std::min(first_, in.first);
}

void Aggregator::take_samples(const Dataset& d) {
  if (d.samples.empty()) return;
  const std::vector<std::uint32_t> map = translation(d.strings, strings_);
  const auto utils_base = static_cast<std::uint32_t>(utils_.size());
  const auto gpus_base = static_cast<std::uint32_t>(gpu_utils_.size());
  utils_.insert(utils_.end(), d.utils.begin(), d.utils.end());
  gpu_utils_.insert(gpu_utils_.end(), d.gpu_utils.begin(), d.gpu_utils.end());
  for (Sample s : d.samples) {
    s.host = map[s.host];
    s.gpu_model = map[s.gpu_model];
    s.cpus_at += utils_base;
    s.gpus_at += gpus_base;
    first_ = std::min(first_, s.end - s.interval_s);
    samples_.push_back(s);
  }
}

// The window, the samples by host and the hosts' facts. True when jobs ran on sampled
// hosts: pass 2 must then read them again.
bool Aggregator::end_pass1() {
  if (!known(opt_.since)) periods_.window_start = std::min(opt_.until, first_);
  index_samples();
  hosts_ = host_facts(samples_, node_backends_, strings_, opt_.capacity_backend);
  held_.assign(samples_.size(), {0, 0, 0});
  for (const auto& [k, n] : node_backends_)
    if (by_host_.count(k.first)) return true;
  return false;
}

std::unique_ptr<SampledDigest> Aggregator::digest_sampled(const Dataset& d, std::size_t from, std::size_t to,
                                                          std::uint64_t seq) const {
  auto out = std::make_unique<SampledDigest>();
  std::unordered_map<std::uint32_t, std::uint32_t> node_of;  // chunk id → report id of sampled hosts
  RateCache rates, at_hosts;  // keys: the chunk's ids; the chunk's backend and the report's GPU
  for (std::size_t i = from; i < to; ++i) {
    const Job& j = d.jobs[i];
    if (!known(j.start) || j.node == 0) continue;
    auto nit = node_of.find(j.node);
    if (nit == node_of.end()) {
      const auto id = strings_.find(d.strings.name(j.node));
      nit = node_of.emplace(j.node, id && by_host_.count(*id) ? *id : 0).first;
    }
    const std::uint32_t node = nit->second;
    const double a0 = std::max(j.start, periods_.window_start), e = job_end(j);
    if (node == 0 || e <= a0) continue;
    const std::uint64_t job = (seq << 32) | i;
    const HostFacts& host = hosts_.at(node);
    // Priced in pass 1 at the backend's default GPU: the GPU its host's samples name.
    const Rates* own =
        &rates_of(rate_key(j.backend, j.gpu_type), d.strings.name(j.backend), d.strings.name(j.gpu_type), rates);
    if (j.gpu_type == 0 && host.model) {
      const Rates& at_host =
          rates_of(rate_key(j.backend, host.model), d.strings.name(j.backend), strings_.name(host.model), at_hosts);
      const double delta = j.cpus * (at_host.cpu - own->cpu) + j.gpus * (at_host.gpu - own->gpu) +
                           j.memory_bytes / kGiB * (at_host.memory_gib - own->memory_gib);
      const double per_hour = j.cpus * at_host.cpu + j.gpus * at_host.gpu + j.memory_bytes / kGiB * at_host.memory_gib;
      const double per_hour_before = per_hour - delta;
      const double list_delta = per_hour * at_host.list_factor - per_hour_before * own->list_factor;
      periods_.split(a0, e, [&](std::int64_t bucket, double pa, double pb) {
        const double h = (pb - pa) / 3600;
        Row& row = out->repriced[key_of(j, job, bucket)];
        row.cost += delta * h;
        row.list_cost += list_delta * h;
        if (!opt_.budgets.empty()) out->tenant_repriced[{j.tenant, bucket}] += delta * h;
      });
      own = &at_host;
    }
    const Rates& rate = *own;
    each_sample(node, a0, e, [&](std::uint32_t s, double a, double b) {
      auto& h = out->held[s];
      h[0] += j.gpus * (b - a);
      h[1] += j.cpus * (b - a);
      h[2] += j.memory_bytes / kGiB * (b - a);
    });
    const bool gpu_indices = j.gpus_count > 0 && j.gpus_count == j.gpus;
    const bool pu_indices = j.pus_count > 0;
    periods_.split(a0, e, [&](std::int64_t bucket, double pa, double pb) {
      const GroupKey group = key_of(j, job, bucket);
      each_sample(node, pa, pb, [&](std::uint32_t si, double a, double b) {
        const Sample& s = samples_[si];
        const double len = b - a;
        double ug = j.gpus * s.gpu_util_mean;
        if (gpu_indices) {
          ug = 0;
          for (std::uint32_t u = 0; u < j.gpus_count; ++u) ug += gpu_util(s, d.units[j.gpus_at + u]);
        }
        double uc = j.cpus * s.cpu_util;
        if (pu_indices) {
          uc = 0;
          for (std::uint32_t u = 0; u < j.pus_count; ++u) {
            const std::uint32_t pu = d.units[j.pus_at + u];
            uc += pu < s.cpus_count ? utils_[s.cpus_at + pu] : 0;
          }
          uc *= j.cpus / j.pus_count;  // cores held per PU listed
        }
        // What the job's cgroup measured beats what its host's samples suggest: the
        // job's own mean cores over its run.
        if (known(j.cpu_used_s) && known(j.end) && j.end > j.start) uc = j.cpu_used_s / (j.end - j.start);
        Cell& c = out->cells[{si, group}];
        const double held_g = j.gpus * len, used_g = std::min(ug, j.gpus) * len;
        const double held_c = j.cpus * len, used_c = std::min(uc, j.cpus) * len;
        c.held_gpu += held_g;
        c.used_gpu += used_g;
        c.held_cpu += held_c;
        c.used_cpu += used_c;
        c.wasted_gpu += (held_g - used_g) * rate.gpu;
        c.wasted_cpu += (held_c - used_c) * rate.cpu;
      });
    });
  }
  return out;
}

void Aggregator::take_sampled(const Dataset& d, const SampledDigest& in) {
  // Read-only, as workers read the report's strings meanwhile: pass 1 saw every name.
  const std::vector<std::uint32_t> map = lookup(d.strings, strings_);
  for (const auto& [k, c] : in.cells) {
    cells_[{k.sample, translate(k.group, map)}] += c;
  }
  for (const auto& [s, h] : in.held)
    for (std::size_t r = 0; r < 3; ++r) held_[s][r] += h[r];
  for (const auto& [k, row] : in.repriced) {
    Row& into = groups_[translate(k, map)];
    into.cost += row.cost;
    into.list_cost += row.list_cost;
  }
  for (const auto& [k, cost] : in.tenant_repriced) tenant_costs_[{map[k.first], k.second}] += cost;
}

// Samples by host, in time order. Where samples overlap (two samplers on one host),
// a sample starts where the ones before it ended, and one wholly inside them is
// dropped, so the host's covered time is the union of the samples' intervals.
void Aggregator::index_samples() {
  for (std::uint32_t i = 0; i < samples_.size(); ++i) by_host_[samples_[i].host].push_back(i);
  starts_.resize(samples_.size());
  auto start = [&](std::uint32_t i) { return samples_[i].end - samples_[i].interval_s; };
  for (auto& [host, list] : by_host_) {
    std::sort(list.begin(), list.end(), [&](auto a, auto b) { return start(a) < start(b); });
    double covered = -INFINITY;
    std::vector<std::uint32_t> kept;
    for (std::uint32_t i : list) {
      const Sample& s = samples_[i];
      if (s.end <= covered) continue;
      starts_[i] = std::max(start(i), covered);
      covered = s.end;
      kept.push_back(i);
    }
    list = std::move(kept);  // disjoint, so in order of both start and end
  }
}

}  // namespace detail

using detail::Aggregator;
using detail::JobsDigest;
using detail::SampledDigest;

namespace {

// Splits [0, n) into about `parts` ranges of at least `least` each, for the workers.
std::vector<std::pair<std::size_t, std::size_t>> ranges(std::size_t n, unsigned parts, std::size_t least) {
  const std::size_t k = std::clamp<std::size_t>(n / least, 1, std::max(1u, parts));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < k; ++i) out.emplace_back(n * i / k, n * (i + 1) / k);
  return out;
}

}  // namespace

Report make_report(const Dataset& data, const ReportOptions& opt) {
  Aggregator agg(opt);
  const unsigned threads = std::max(1u, opt.threads);
  const auto parts = ranges(data.jobs.size(), threads, 200000);
  ordered_parallel<std::unique_ptr<JobsDigest>>(
      parts.size(), threads, 2 * threads,
      [&](std::size_t i, unsigned) { return agg.digest_jobs(data, parts[i].first, parts[i].second, 0); },
      [&](std::size_t, std::unique_ptr<JobsDigest>&& d) { agg.take_jobs(data, *d); });
  agg.take_samples(data);
  if (agg.end_pass1())
    ordered_parallel<std::unique_ptr<SampledDigest>>(
        parts.size(), threads, 2 * threads,
        [&](std::size_t i, unsigned) { return agg.digest_sampled(data, parts[i].first, parts[i].second, 0); },
        [&](std::size_t, std::unique_ptr<SampledDigest>&& d) { agg.take_sampled(data, *d); });
  return agg.finish();
}

Report stream_report(const Inputs& inputs, const ReadOptions& read, const ReportOptions& opt, Dataset& totals) {
  Aggregator agg(opt);
  inputs.stream(
      read,
      [&](Dataset& chunk, std::uint64_t seq) -> std::unique_ptr<ChunkDigest> {
        auto d = agg.digest_jobs(chunk, 0, chunk.jobs.size(), seq);
        decltype(chunk.jobs)().swap(chunk.jobs);  // the jobs are summed: their memory goes back now
        std::vector<std::string>().swap(chunk.ids);
        std::vector<std::uint32_t>().swap(chunk.units);
        return d;
      },
      [&](Dataset& chunk, std::unique_ptr<ChunkDigest> d, std::uint64_t) {
        agg.take_jobs(chunk, static_cast<const JobsDigest&>(*d));
        agg.take_samples(chunk);
      },
      totals);
  if (agg.end_pass1()) {
    Dataset again;  // the same bad records as the first read: not counted twice
    inputs.stream(
        read,
        [&](Dataset& chunk, std::uint64_t seq) -> std::unique_ptr<ChunkDigest> {
          return agg.digest_sampled(chunk, 0, chunk.jobs.size(), seq);
        },
        [&](Dataset& chunk, std::unique_ptr<ChunkDigest> d, std::uint64_t) {
          agg.take_sampled(chunk, static_cast<const SampledDigest&>(*d));
        },
        again);
  }
  return agg.finish();
}

}  // namespace rkit::rcost
