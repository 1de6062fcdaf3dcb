// File: tools/rcost/output.cpp — table, JSON and CSV renderings of a report (output.hpp).
#include "output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "rkit/printer.hpp"
#include "rkit/units.hpp"

namespace rkit::rcost {

namespace {

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

std::string share_name(ShareIdle s) {
  return s == ShareIdle::Weighted ? "weighted" : s == ShareIdle::Even ? "even" : "none";
}

// Money is unknown (null) without a price sheet.
Json money_json(const Report& r, double v) { return r.priced ? Json(v) : Json(nullptr); }

Json capacity_json(const Report& r, const Capacity& c) {
  return Json{{"capacity_hours", c.capacity},
              {"used_hours", c.used},
              {"allocated_idle_hours", c.allocated_idle},
              {"unallocated_hours", c.unallocated},
              {"unallocated_cost", money_json(r, c.unallocated_cost)}};
}

// Fields of a row or the total, after the keys.
void add_figures(Json& j, const Report& r, const Row& row) {
  j["span_start_unix_s"] = row.span_start;
  j["span_end_unix_s"] = row.span_end;
  j["jobs"] = row.jobs;
  j["gpu_hours"] = row.gpu_hours;
  j["core_hours"] = row.core_hours;
  j["memory_gib_hours"] = row.memory_gib_hours;
  j["cost"] = money_json(r, row.cost);
  j["list_cost"] = money_json(r, row.list_cost);
  // Without samples, what was used and what sat idle is unknown: null, not 0.
  const bool sampled = r.samples > 0;
  auto known_if = [](bool k, double v) { return k ? Json(v) : Json(nullptr); };
  j["gpu_sampled_hours"] = row.gpu_sampled_hours;
  j["gpu_used_hours"] = known_if(row.gpu_sampled_hours > 0, row.gpu_used_hours);
  j["gpu_idle_hours"] = known_if(row.gpu_sampled_hours > 0, row.gpu_idle_hours());
  j["core_sampled_hours"] = row.core_sampled_hours;
  j["core_used_hours"] = known_if(row.core_sampled_hours > 0, row.core_used_hours);
  j["core_idle_hours"] = known_if(row.core_sampled_hours > 0, row.core_idle_hours());
  j["waste_cost"] = known_if(r.priced && (row.gpu_sampled_hours > 0 || row.core_sampled_hours > 0), row.waste_cost);
  j["idle_cost"] = known_if(r.priced && sampled, row.idle_cost);
  j["total_cost"] = money_json(r, row.total_cost());
  j["share"] = money_json(r, row.share);
  j["waits"] = row.wait_count;
  j["wait_p50_s"] = opt(row.wait_p50);
  j["wait_p90_s"] = opt(row.wait_p90);
  j["wait_p99_s"] = opt(row.wait_p99);
  j["budget"] = opt(row.budget);
  j["over_budget"] = row.budget ? Json(row.total_cost() > *row.budget) : Json(nullptr);
  j["currency"] = r.priced ? Json(r.currency) : Json(nullptr);
}

std::string hours(const Json& v) { return v.is_number() ? figure(v.get<double>(), 1) : "-"; }
std::string cash(const Json& v) { return v.is_number() ? money(v.get<double>()) : "-"; }
std::string percent(const Json& v) { return v.is_number() ? fmt::format("{:.1f}%", 100 * v.get<double>()) : "-"; }
std::string wait(const Json& v) { return v.is_number() ? format_duration(std::round(v.get<double>())) : "-"; }

std::vector<Column> columns(const Report& r) {
  std::vector<Column> cols;
  for (const std::string& k : r.key_names) {
    std::string header = k;
    for (char& c : header) c = c == '_' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    cols.push_back({header, k});
  }
  // Grouped by period alone, an __idle__ row has no key to say so: a column does.
  const bool only_periods = std::all_of(r.key_names.begin(), r.key_names.end(),
                                        [](const std::string& k) { return k == "day" || k == "month"; });
  if (only_periods && std::any_of(r.rows.begin(), r.rows.end(), [](const Row& row) { return row.idle_row; }))
    cols.push_back(
        {"ROW", "idle", [](const Json& v) { return v.is_boolean() && v.get<bool>() ? "__idle__" : "jobs"; }});
  const std::vector<Column> figures = {
      {"JOBS", "jobs"},
      {"GPU_H", "gpu_hours", hours},
      {"CORE_H", "core_hours", hours},
      {"MEM_GIB_H", "memory_gib_hours", hours},
      {"COST", "cost", cash},
      {"GPU_IDLE_H", "gpu_idle_hours", hours},
      {"WASTE", "waste_cost", cash},
      {"IDLE_SHARE", "idle_cost", cash},
      {"TOTAL", "total_cost", cash},
      {"SHARE", "share", percent},
      {"WAIT_P50", "wait_p50_s", wait},
      {"WAIT_P90", "wait_p90_s", wait},
  };
  static const std::set<std::string> kMoney{"cost", "waste_cost", "idle_cost", "total_cost", "share"};
  for (const Column& c : figures)  // no price sheet: no money columns
    if (r.priced || !kMoney.count(c.key)) cols.push_back(c);
  const bool budgets = std::any_of(r.rows.begin(), r.rows.end(), [](const Row& row) { return row.budget.has_value(); });
  if (budgets) {
    cols.push_back({"BUDGET", "budget", cash});
    cols.push_back(
        {"OVER", "over_budget", [](const Json& v) { return v.is_boolean() ? (v.get<bool>() ? "OVER" : "ok") : "-"; }});
  }
  return cols;
}

void capacity_line(std::ostream& out, const char* what, const char* unit, const Capacity& c, const Report& r) {
  if (c.capacity <= 0) return;
  auto pct = [&](double v) { return 100 * v / c.capacity; };
  out << fmt::format("{} capacity {} {}: used {:.1f}%, allocated idle {:.1f}%, unallocated {:.1f}%{}\n", what,
                     figure(c.capacity, 1), unit, pct(c.used), pct(c.allocated_idle), pct(c.unallocated),
                     r.priced ? fmt::format(" ({} {})", money(c.unallocated_cost), r.currency) : "");
}

}  // namespace

std::string figure(double v, int decimals) {
  if (std::fabs(v) < 5e-10) v = 0;  // rounding noise: no "-0.000000000"
  const double a = std::fabs(v);
  if (a > 0 && a < 1) decimals = std::max(decimals, std::min(9, 1 - static_cast<int>(std::floor(std::log10(a)))));
  return fmt::format("{:.{}f}", v, decimals);
}

std::string money(double v) {
  if (v != 0 && std::fabs(v) < 0.1) return figure(v, 2);  // 0.0034, not 0.00
  const double cents = std::round(std::fabs(v) * 100);
  std::string whole = fmt::format("{:.0f}", std::floor(cents / 100));
  for (int i = static_cast<int>(whole.size()) - 3; i > 0; i -= 3) whole.insert(static_cast<std::size_t>(i), ",");
  return fmt::format("{}{}.{:02.0f}", v < 0 && cents > 0 ? "-" : "", whole, std::fmod(cents, 100));
}

Json row_json(const Report& r, const Row& row) {
  Json j{{"schema", "rkit.cost.v1"}};
  for (std::size_t i = 0; i < r.key_names.size(); ++i) j[r.key_names[i]] = row.keys[i];
  j["idle"] = row.idle_row;
  add_figures(j, r, row);
  return j;
}

Json summary_json(const Report& r, const ReadStats& stats, ShareIdle share) {
  Json j{{"schema", "rkit.cost.summary.v1"},
         {"since_unix_s", r.since},
         {"until_unix_s", r.until},
         {"since", format_iso(r.since)},
         {"until", format_iso(r.until)},
         {"keys", r.key_names},
         {"currency", r.priced ? Json(r.currency) : Json(nullptr)},
         {"priced", r.priced},
         {"share_idle", share_name(share)}};
  Json total = Json::object();
  add_figures(total, r, r.total);
  j["total"] = total;
  j["capacity"] = {{"gpu", capacity_json(r, r.gpu)}, {"cpu", capacity_json(r, r.cpu)}};
  Json mem = capacity_json(r, r.memory);
  mem.erase("used_hours");
  mem.erase("allocated_idle_hours");
  j["capacity"]["memory_gib"] = mem;
  Json periods = Json::array();
  for (const PeriodCapacity& p : r.periods)
    periods.push_back({{"period", p.label},
                       {"start_unix_s", p.start},
                       {"end_unix_s", p.end},
                       {"gpu", capacity_json(r, p.gpu)},
                       {"cpu", capacity_json(r, p.cpu)}});
  j["capacity_by_period"] = periods;
  Json budgets = Json::array();
  for (const TenantBudget& b : r.budgets)
    budgets.push_back({{"tenant", b.tenant}, {"cost", b.cost}, {"budget", b.budget}, {"over", b.cost > b.budget}});
  j["budgets"] = budgets;
  j["jobs_read"] = r.jobs_read;
  j["jobs_run"] = r.jobs_run;
  j["samples"] = r.samples;
  j["lines"] = stats.lines;
  j["bad_records"] = stats.bad;
  j["ignored_records"] = stats.ignored;
  return j;
}

void write_report(std::ostream& out, OutputFormat format, const Report& r, const ReadStats& stats, ShareIdle share) {
  if (format == OutputFormat::Json) {
    for (const Row& row : r.rows) out << to_json_line(row_json(r, row)) << '\n';
    out << to_json_line(summary_json(r, stats, share)) << '\n';
    return;
  }
  Printer printer(out, format == OutputFormat::Csv ? Format::Csv : Format::Table, columns(r));
  for (const Row& row : r.rows) printer.print(row_json(r, row));
  printer.print(row_json(r, r.total));
  printer.finish();
  if (format == OutputFormat::Csv) return;
  out << fmt::format("\nwindow {} to {}: {} job{} ran, {} read", format_iso(r.since), format_iso(r.until), r.jobs_run,
                     r.jobs_run == 1 ? "" : "s", r.jobs_read);
  if (stats.bad) out << fmt::format(", {} bad records skipped", stats.bad);
  out << '\n';
  if (r.samples) {
    out << fmt::format("from {} samples (unallocated capacity shared: {}):\n", r.samples, share_name(share));
    capacity_line(out, "  GPU", "GPU-hours", r.gpu, r);
    capacity_line(out, "  CPU", "core-hours", r.cpu, r);
  }
  for (const TenantBudget& b : r.budgets)
    out << fmt::format("budget {}: {} of {} {} ({:.0f}%){}\n", b.tenant, money(b.cost), money(b.budget), r.currency,
                       b.budget > 0 ? 100 * b.cost / b.budget : 0.0, b.cost > b.budget ? " OVER" : "");
}

}  // namespace rkit::rcost
