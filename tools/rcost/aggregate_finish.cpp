// File: tools/rcost/aggregate_finish.cpp — the report from what the reads summed
// (aggregate.hpp): waste scaled to each sample's capacity, idle capacity priced and
// shared, rows keyed, sorted and totalled, budgets.
#include "aggregate.hpp"

namespace rkit::rcost::detail {

void add(Row& into, const Row& from) {
  into.jobs += from.jobs;
  for (auto f :
       {&Row::gpu_hours, &Row::core_hours, &Row::memory_gib_hours, &Row::cost, &Row::list_cost, &Row::gpu_sampled_hours,
        &Row::gpu_used_hours, &Row::core_sampled_hours, &Row::core_used_hours, &Row::waste_cost, &Row::idle_cost})
    into.*f += from.*f;
  into.waits.merge(from.waits);
}

Report Aggregator::finish() {
  Report r;
  r.currency = opt_.prices->currency;
  r.priced = opt_.prices->priced;
  r.since = periods_.window_start;
  r.until = periods_.window_end;
  r.jobs_read = jobs_read_;
  r.samples = samples_.size();
  for (Key k : opt_.keys) r.key_names.push_back(key_name(k));
  sampled_usage();
  capacity(r);
  share_idle();
  finish_rows(r);
  budgets(r);
  return r;
}

// Waste: the cells scaled where jobs held more of a sample than its capacity.
void Aggregator::sampled_usage() {
  used_.assign(samples_.size(), {0, 0});
  for (const auto& [k, c] : cells_) {
    const Sample& s = samples_[k.sample];
    const auto [sa, sb] = span(k.sample);
    const double cap_g = s.gpus_count * (sb - sa), cap_c = s.cpu_capacity() * (sb - sa);
    const double fg = held_[k.sample][0] > cap_g ? cap_g / held_[k.sample][0] : 1;
    const double fc = held_[k.sample][1] > cap_c ? cap_c / held_[k.sample][1] : 1;
    Row& row = groups_[k.group];
    row.gpu_sampled_hours += c.held_gpu * fg / 3600;
    row.gpu_used_hours += c.used_gpu * fg / 3600;
    row.core_sampled_hours += c.held_cpu * fc / 3600;
    row.core_used_hours += c.used_cpu * fc / 3600;
    row.waste_cost += (c.wasted_gpu * fg + c.wasted_cpu * fc) / 3600;
    used_[k.sample][0] += c.used_gpu * fg;
    used_[k.sample][1] += c.used_cpu * fc;
  }
}

// Every sampled second of capacity lands in one bucket: used, allocated idle, or
// unallocated; the unallocated part is priced at the host's rates into the idle pool.
void Aggregator::capacity(Report& r) {
  for (const auto& [host, list] : by_host_) {
    const HostFacts& facts = hosts_.at(host);
    const Rates rate = job_rates(*opt_.prices, facts.backend, strings_.name(facts.model));
    for (std::uint32_t si : list) {
      const Sample& s = samples_[si];
      const auto [a, b] = span(si);
      if (b <= a) continue;
      const double cap_g = s.gpus_count * (b - a), cap_c = s.cpu_capacity() * (b - a);
      const double cap_m = s.memory_total_bytes / kGiB * (b - a);
      const double held_g = std::min(cap_g, held_[si][0]), held_c = std::min(cap_c, held_[si][1]);
      const double held_m = std::min(cap_m, held_[si][2]);
      tally(r.gpu, cap_g, used_[si][0], held_g, rate.gpu, 1);
      tally(r.cpu, cap_c, used_[si][1], held_c, rate.cpu, 1);
      tally(r.memory, cap_m, held_m, held_m, rate.memory_gib, 1);
      const double idle_cost =
          ((cap_g - held_g) * rate.gpu + (cap_c - held_c) * rate.cpu + (cap_m - held_m) * rate.memory_gib) / 3600;
      // A sample across a period boundary is shared between the periods by time.
      periods_.split(a, b, [&](std::int64_t bucket, double pa, double pb) {
        const double w = (pb - pa) / (b - a);
        idle_pool_[bucket] += idle_cost * w;
        auto& [gpu, cpu] = capacity_by_period_[bucket];
        tally(gpu, cap_g, used_[si][0], held_g, rate.gpu, w);
        tally(cpu, cap_c, used_[si][1], held_c, rate.cpu, w);
      });
    }
  }
}

// Adds a sample's unit-seconds, times `w`, as hours.
void Aggregator::tally(Capacity& c, double cap, double used, double held, double rate, double w) {
  const double k = w / 3600;
  c.capacity += cap * k;
  c.used += used * k;
  c.allocated_idle += (held - used) * k;
  c.unallocated += (cap - held) * k;
  c.unallocated_cost += (cap - held) * k * rate;
}

// Unallocated capacity's cost goes to the rows of its period.
void Aggregator::share_idle() {
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
      k.job = UINT64_MAX;
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

void Aggregator::finish_rows(Report& r) {
  r.jobs_run = jobs_run_;
  r.rows.reserve(groups_.size());
  std::vector<std::int64_t> buckets;
  static const std::string none;
  for (auto& [k, row] : groups_) {
    row.keys.clear();
    std::size_t attr = 0;
    for (Key key : opt_.keys) {
      if (key == Key::Day)
        row.keys.push_back(format_day(periods_.start(k.bucket)));
      else if (key == Key::Month)
        row.keys.push_back(format_month(periods_.start(k.bucket)));
      else if (row.idle_row)
        row.keys.push_back("__idle__");
      else if (key == Key::Job)
        row.keys.push_back(job_ids_.count(k.job) ? job_ids_.at(k.job) : none);
      else
        row.keys.push_back(strings_.name(k.ids[attr++]));
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
    p.label = periods_.kind == Periods::Day     ? format_day(p.start)
              : periods_.kind == Periods::Month ? format_month(p.start)
                                                : "";
    p.gpu = caps.first;
    p.cpu = caps.second;
    r.periods.push_back(p);
  }
  r.total.keys.assign(opt_.keys.size(), "");
  if (!r.total.keys.empty()) r.total.keys[0] = "TOTAL";
}

// A monthly budget prorated to [a, b): each month contributes its covered share.
double Aggregator::prorated(double monthly, double a, double b) const {
  double months = 0;
  Periods m;
  m.kind = Periods::Month;
  m.split(a, b, [&](std::int64_t i, double pa, double pb) { months += (pb - pa) / (m.end(i) - m.start(i)); });
  return monthly * months;
}

void Aggregator::budgets(Report& r) {
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
      if (strings_.name(id) == tenant) b.cost = cost;
    r.budgets.push_back(b);
  }
}

}  // namespace rkit::rcost::detail
