// File: tools/rcost/html.cpp — the report as one self-contained HTML page (output.hpp).
//
// Inline CSS, SVG and tables (rkit/svg.hpp, rkit/html.hpp: the writers rbench's page
// uses), no script, nothing
// fetched (a Content-Security-Policy forbids it). Every text from the records is
// escaped. The page holds:
//   - cost by tenant over time: bars per day (per month over windows of more than 92
//     days) stacked by tenant, from make_report by {day|month, tenant};
//   - utilisation of the sampled capacity per period, GPU and CPU: used, allocated
//     idle and unallocated hours (Report::periods), or a sentence when no samples came;
//   - waste by tenant: allocated idle GPU-hours and the waste cost;
//   - the report by tenant as a table (the text table's figures), with the window,
//     the jobs and samples read, bad records and the currency.
// Every chart is an <svg class="chart" data-kind="..."> whose bars carry <title>
// tooltips, with a legend.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include "output.hpp"
#include "rkit/html.hpp"
#include "rkit/svg.hpp"
#include "rkit/units.hpp"

namespace rkit::rcost {

namespace {

// The chart writer and its palette are shared with rbench's page (rkit/svg.hpp).
using namespace svg;

constexpr double kChartWidth = 900;
constexpr double kMonthlyOver = 92 * kDay;   // longer windows are drawn by month
constexpr std::size_t kMaxTenantSeries = 8;  // tenants drawn on their own; the rest are "other tenants"
constexpr std::size_t kMaxWasteRows = 25;
constexpr const char* kOther = "#bab0ac";
constexpr const char* kUnallocated = "#d9d9d9";
constexpr const char* kUsed = "#59a14f";
constexpr const char* kAllocatedIdle = "#f28e2b";
constexpr const char* kWasteCost = "#9c755f";
constexpr const char* kIdleLabel = "__idle__";

std::string esc(std::string_view s) { return html_escape(s); }

// 1500 → "1.5k": axis labels.
std::string si(double v) {
  const double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

std::string hours(double v) { return figure(v, 1); }
std::string percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

std::string tenant_name(const std::string& t) { return t.empty() ? "(no tenant)" : t; }

// The periods of the window, in order: every day (or month) from its start to its end.
std::vector<std::string> all_periods(double since, double until, bool monthly) {
  std::vector<std::string> out;
  if (!(until > since)) return out;
  if (!monthly) {
    for (double t = std::floor(since / kDay) * kDay; t < until && out.size() < 10000; t += kDay)
      out.push_back(format_day(t));
    return out;
  }
  for (double t = month_of(since).first; t < until && out.size() < 10000; t = month_of(t).second)
    out.push_back(format_month(t));
  return out;
}

// ---------------------------------------------------------------- charts

struct Series {
  std::string name;
  const char* colour;
};

// Vertical bars, one per period, stacked by series: values[period][series]. tip(p, s)
// is the tooltip of one segment.
template <class Tip>
std::string stacked_chart(const std::string& kind, const std::string& title, const std::string& unit,
                          const std::vector<std::string>& periods, const std::vector<Series>& series,
                          const std::vector<std::vector<double>>& values, Tip&& tip) {
  constexpr double kLeft = 70, kLegend = 200, kTop = 16, kBottom = 56, kHeight = 360;
  const double plot_right = kChartWidth - kLegend, plot_bottom = kHeight - kBottom;
  double top = 0;
  for (const auto& v : values) {
    double sum = 0;
    for (double x : v) sum += std::max(x, 0.0);
    top = std::max(top, sum);
  }
  const std::vector<double> ticks = linear_ticks(0, top > 0 ? top : 1, 5);
  const LinearScale ys{0, ticks.back(), plot_bottom, kTop};
  const double n = static_cast<double>(std::max<std::size_t>(periods.size(), 1));
  const double band = (plot_right - kLeft) / n;
  const double bar = std::max(1.0, band * 0.78);

  Svg svg(kChartWidth, kHeight, kind, title);
  for (double t : ticks) {
    svg.line(kLeft, ys(t), plot_right, ys(t), kGrid);
    svg.text(kLeft - 6, ys(t) + 4, si(t), "end");
  }
  svg.text(18, (kTop + plot_bottom) / 2, unit, "middle", kInk, kFontPx, -90);
  // Period labels: as many as fit, evenly spaced.
  double widest = 0;
  for (const auto& p : periods) widest = std::max(widest, text_width(p));
  const std::size_t every = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil((widest + 10) / band)));
  for (std::size_t i = 0; i < periods.size(); ++i) {
    const double x = kLeft + band * (static_cast<double>(i) + 0.5);
    if (i % every == 0) {
      svg.line(x, plot_bottom, x, plot_bottom + 4, kAxis);
      svg.text(x, plot_bottom + 18, periods[i], "middle");
    }
    double base = 0;
    for (std::size_t s = 0; s < series.size(); ++s) {
      const double v = values[i][s];
      if (!(v > 0)) continue;
      svg.group(tip(i, s));
      svg.rect(x - bar / 2, ys(base + v), bar, ys(base) - ys(base + v), series[s].colour);
      svg.end();
      base += v;
    }
  }
  svg.line(kLeft, plot_bottom, plot_right, plot_bottom, kAxis);
  svg.line(kLeft, kTop, kLeft, plot_bottom, kAxis);
  // Legend, right of the plot, top series first as in the stacks.
  double ly = kTop + 12;
  const double lx = plot_right + 18;
  for (std::size_t s = series.size(); s-- > 0 && ly < plot_bottom; ly += 18) {
    svg.group(series[s].name);
    svg.rect(lx, ly - 10, 12, 12, series[s].colour);
    svg.text(lx + 18, ly, fit_text(series[s].name, kLegend - 40));
    svg.end();
  }
  return svg.str();
}

// Tenants' allocated idle GPU-hours (left) and waste cost (right), one row each.
std::string waste_chart(const std::vector<const Row*>& rows, const std::string& currency) {
  constexpr double kRow = 24, kTop = 30, kBottom = 40, kGap = 40, kRight = 60;
  double label_w = 90;
  for (const Row* r : rows) label_w = std::max(label_w, text_width(tenant_name(r->keys[0])) + 18);
  label_w = std::min(label_w, 240.0);
  const double height = kTop + kRow * static_cast<double>(rows.size()) + kBottom;
  const double plot_bottom = kTop + kRow * static_cast<double>(rows.size());
  const double panel = (kChartWidth - label_w - kGap - kRight) / 2;
  const double g0 = label_w, g1 = g0 + panel, c0 = g1 + kGap, c1 = c0 + panel;
  double gpu_max = 0, cost_max = 0;
  for (const Row* r : rows) {
    gpu_max = std::max(gpu_max, r->gpu_idle_hours());
    cost_max = std::max(cost_max, r->waste_cost);
  }
  const auto gticks = linear_ticks(0, gpu_max > 0 ? gpu_max : 1, 4),
             cticks = linear_ticks(0, cost_max > 0 ? cost_max : 1, 4);
  const LinearScale gx{0, gticks.back(), g0, g1}, cx{0, cticks.back(), c0, c1};

  Svg svg(kChartWidth, height, "waste", "Waste by tenant");
  // Legend: each panel's title beside its colour.
  auto heading = [&](double x0, double x1, const std::string& text, const char* colour) {
    const double w = text_width(text) + 18, x = (x0 + x1 - w) / 2;
    svg.rect(x, 6, 12, 12, colour);
    svg.text(x + 18, 16, text);
  };
  heading(g0, g1, "allocated idle GPU-hours", kAllocatedIdle);
  heading(c0, c1, "waste (" + currency + ")", kWasteCost);
  for (double t : gticks) {
    svg.line(gx(t), kTop - 4, gx(t), plot_bottom, kGrid);
    svg.text(gx(t), plot_bottom + 16, si(t), "middle");
  }
  for (double t : cticks) {
    svg.line(cx(t), kTop - 4, cx(t), plot_bottom, kGrid);
    svg.text(cx(t), plot_bottom + 16, si(t), "middle");
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = *rows[i];
    const double cy = kTop + kRow * (static_cast<double>(i) + 0.5);
    const std::string name = tenant_name(r.keys[0]);
    svg.group(fmt::format("{}: {} GPU-hours allocated idle of {} sampled, {} core-hours idle of {}; waste {} {}", name,
                          hours(r.gpu_idle_hours()), hours(r.gpu_sampled_hours), hours(r.core_idle_hours()),
                          hours(r.core_sampled_hours), money(r.waste_cost), currency));
    svg.text(g0 - 10, cy + 4, fit_text(name, label_w - 18), "end");
    svg.rect(g0, cy - 7, gx(r.gpu_idle_hours()) - g0, 14, kAllocatedIdle);
    svg.rect(c0, cy - 7, cx(r.waste_cost) - c0, 14, kWasteCost);
    svg.end();
  }
  svg.line(g0, kTop - 4, g0, plot_bottom, kAxis);
  svg.line(c0, kTop - 4, c0, plot_bottom, kAxis);
  return svg.str();
}

// ---------------------------------------------------------------- the page

// What rbench's page does not have (the rest is rkit::kPageStyle).
constexpr const char* kStyle = R"(
tr.over td { color: #d62728; font-weight: 600; }
tr.total td { font-weight: 600; border-top: 2px solid #ccc; }
)";

std::string key(const char* colour) {
  return fmt::format("<span class=\"key\" style=\"background:{}\"></span>", colour);
}

std::string figure(const std::string& caption, const std::string& svg) {
  return "<figure>\n<figcaption>" + esc(caption) + "</figcaption>\n" + svg + "</figure>\n";
}

std::string wait_cell(const std::optional<double>& v) { return v ? format_duration(std::round(*v)) : "-"; }

class Page {
 public:
  Page(const Dataset& data, const ReportOptions& opt, const ReadStats& stats) : opt_(opt), stats_(stats) {
    ReportOptions by_tenant = opt;
    by_tenant.keys = {Key::Tenant};
    tenants_ = make_report(data, by_tenant);
    monthly_ = tenants_.until - tenants_.since > kMonthlyOver;
    ReportOptions over_time = opt;
    over_time.keys = {monthly_ ? Key::Month : Key::Day, Key::Tenant};
    over_time.since = tenants_.since;
    timeline_ = make_report(data, over_time);
  }

  std::string render() const {
    const Report& r = tenants_;
    std::string h =
        html_page_start(fmt::format("rcost report: {} to {}", format_day(r.since), format_day(r.until)), kStyle);
    h += "<h1>rcost report</h1>\n" + summary();
    h += "<nav><a href=\"#cost\">Cost over time</a><a href=\"#utilisation\">Utilisation</a><a href=\"#waste\">Waste</a>"
         "<a href=\"#tenants\">By tenant</a></nav>\n";
    h += "<section id=\"cost\">\n<h2>Cost by tenant over time</h2>\n" + cost_over_time() + "</section>\n";
    h +=
        "<section id=\"utilisation\">\n<h2>Utilisation of the sampled capacity</h2>\n" + utilisation() + "</section>\n";
    h += "<section id=\"waste\">\n<h2>Waste by tenant</h2>\n" + waste() + "</section>\n";
    h += "<section id=\"tenants\">\n<h2>By tenant</h2>\n" + tenant_table() + "</section>\n";
    return h + html_page_end("rcost");
  }

 private:
  std::string summary() const {
    const Report& r = tenants_;
    std::string s =
        fmt::format("Window {} to {}: {} job{} ran, of {} read; {} sample{}.", format_iso(r.since), format_iso(r.until),
                    r.jobs_run, r.jobs_run == 1 ? "" : "s", r.jobs_read, r.samples, r.samples == 1 ? "" : "s");
    s += fmt::format(" Total {} {}", money(r.total.total_cost()), r.currency);
    s += r.samples ? fmt::format(", of which waste {} and unallocated capacity {}.", money(r.total.waste_cost),
                                 money(r.total.idle_cost))
                   : ".";
    s += fmt::format(" Money in {}", r.currency);
    if (opt_.prices && !opt_.prices->source.empty()) s += fmt::format(", priced with {}", opt_.prices->source);
    s += fmt::format("; unallocated capacity {}.", opt_.share_idle == ShareIdle::None ? "shown on its own"
                                                   : opt_.share_idle == ShareIdle::Even
                                                       ? "shared evenly among the tenants of each period"
                                                       : "shared among the tenants of each period by their cost");
    std::string out = "<p class=\"lead\">" + esc(s) + "</p>\n";
    if (stats_.bad)
      out += "<p class=\"note\">" +
             esc(fmt::format("{} bad record{} skipped ({} lines read); rcost lists them on standard error.", stats_.bad,
                             stats_.bad == 1 ? " was" : "s were", stats_.lines)) +
             "</p>\n";
    else
      out += "<p class=\"lead\">" + esc(fmt::format("No bad records in {} lines read.", stats_.lines)) + "</p>\n";
    for (const TenantBudget& b : r.budgets)
      if (b.cost > b.budget)
        out += "<p class=\"note\">" +
               esc(fmt::format("Tenant {} is over budget: {} of {} {} ({:.0f}%).", b.tenant, money(b.cost),
                               money(b.budget), r.currency, b.budget > 0 ? 100 * b.cost / b.budget : 0.0)) +
               "</p>\n";
    return out;
  }

  // Tenants by total cost over the window, largest first.
  std::vector<std::string> tenants_by_cost() const {
    std::vector<std::string> out;
    for (const Row& row : tenants_.rows)
      if (!row.idle_row) out.push_back(row.keys[0]);
    return out;  // the report's rows come largest first
  }

  std::string cost_over_time() const {
    const Report& t = timeline_;
    const std::vector<std::string> ranked = tenants_by_cost();
    std::map<std::string, std::size_t> series_of;
    std::vector<Series> series;
    for (std::size_t i = 0; i < ranked.size() && i < kMaxTenantSeries; ++i) {
      series_of[ranked[i]] = series.size();
      series.push_back({tenant_name(ranked[i]), kPalette[i]});
    }
    const std::size_t other = series.size(), unallocated = other + 1;
    series.push_back(
        {fmt::format("{} other tenants", ranked.size() > kMaxTenantSeries ? ranked.size() - kMaxTenantSeries : 0),
         kOther});
    series.push_back({"unallocated capacity", kUnallocated});

    std::vector<std::string> periods = all_periods(t.since, t.until, monthly_);
    std::map<std::string, std::size_t> period_at;
    std::set<std::string> with_rows;
    for (const Row& row : t.rows) with_rows.insert(row.keys[0]);
    if (periods.size() > 400 || !std::all_of(with_rows.begin(), with_rows.end(), [&](auto& p) {
          return std::binary_search(periods.begin(), periods.end(), p);
        }))
      periods.assign(with_rows.begin(), with_rows.end());  // a very long window: the periods with costs only
    for (std::size_t i = 0; i < periods.size(); ++i) period_at[periods[i]] = i;
    std::vector<std::vector<double>> values(periods.size(), std::vector<double>(series.size(), 0));
    std::vector<double> period_total(periods.size(), 0);
    bool any_idle_row = false;
    for (const Row& row : t.rows) {
      const std::size_t p = period_at.at(row.keys[0]);
      std::size_t s = other;
      if (row.idle_row)
        s = unallocated, any_idle_row = true;
      else if (auto it = series_of.find(row.keys[1]); it != series_of.end())
        s = it->second;
      values[p][s] += row.total_cost();
      period_total[p] += row.total_cost();
    }
    // Series nobody has stay out of the legend.
    std::vector<std::size_t> keep;
    for (std::size_t s = 0; s < series.size(); ++s)
      if ((s != other || ranked.size() > kMaxTenantSeries) && (s != unallocated || any_idle_row)) keep.push_back(s);
    std::vector<Series> kept;
    std::vector<std::vector<double>> kept_values(periods.size());
    for (std::size_t s : keep) kept.push_back(series[s]);
    for (std::size_t p = 0; p < periods.size(); ++p)
      for (std::size_t s : keep) kept_values[p].push_back(values[p][s]);

    if (periods.empty() || t.total.total_cost() <= 0)
      return "<p class=\"note\">No cost in the window: no job ran in it" +
             std::string(t.samples ? "" : " and no samples were given") + ".</p>\n";
    const std::string unit = fmt::format("cost ({})", t.currency);
    const std::string svg = stacked_chart(
        "cost-by-tenant", "Cost by tenant per " + std::string(monthly_ ? "month" : "day"), unit, periods, kept,
        kept_values, [&](std::size_t p, std::size_t s) {
          const double v = kept_values[p][s];
          return fmt::format("{}, {}: {} {} ({} of the {})", kept[s].name, periods[p], money(v), t.currency,
                             percent(period_total[p] > 0 ? v / period_total[p] : 0), monthly_ ? "month" : "day");
        });
    std::string intro = "<p>What each tenant's jobs cost per " + std::string(monthly_ ? "month" : "day") + " (UTC)";
    if (t.samples && opt_.share_idle != ShareIdle::None) intro += ", their share of unallocated capacity included";
    if (any_idle_row) intro += "; " + key(kUnallocated) + "unallocated capacity, charged to no tenant";
    intro += ". Point at a bar for its figures.</p>\n";
    return intro + figure(fmt::format("Cost by tenant per {} ({} to {})", monthly_ ? "month" : "day",
                                      format_day(t.since), format_day(t.until)),
                          svg);
  }

  std::string utilisation() const {
    const Report& t = timeline_;
    if (t.samples == 0 || t.periods.empty())
      return "<p class=\"note\">No utilisation samples were given (rtop sample --json records), so used, idle and "
             "unallocated capacity cannot be shown.</p>\n";
    std::string out = "<p>Every sampled GPU- and core-hour falls in one of: " + key(kUsed) + "used, " +
                      key(kAllocatedIdle) + "allocated to a job but idle (waste), " + key(kUnallocated) +
                      "not allocated to any job.</p>\n";
    const std::vector<Series> series = {
        {"used", kUsed}, {"allocated idle", kAllocatedIdle}, {"unallocated", kUnallocated}};
    auto chart = [&](const char* what, const char* unit, auto capacity_of) {
      double total = 0;
      for (const PeriodCapacity& p : t.periods) total += capacity_of(p).capacity;
      if (!(total > 0)) return;
      std::vector<std::string> periods;
      std::vector<std::vector<double>> values;
      for (const PeriodCapacity& p : t.periods) {
        const Capacity& c = capacity_of(p);
        periods.push_back(p.label);
        values.push_back({c.used, c.allocated_idle, c.unallocated});
      }
      const std::string svg = stacked_chart(
          "utilisation", fmt::format("{} utilisation per {}", what, monthly_ ? "month" : "day"), unit, periods, series,
          values, [&](std::size_t p, std::size_t s) {
            const Capacity& c = capacity_of(t.periods[p]);
            return fmt::format("{} {}, {}: {} of {} {} ({})", what, series[s].name, periods[p], hours(values[p][s]),
                               hours(c.capacity), unit, percent(c.capacity > 0 ? values[p][s] / c.capacity : 0));
          });
      out += figure(fmt::format("{}: {} of capacity, used / allocated idle / unallocated", what, unit), svg);
    };
    chart("GPU", "GPU-hours", [](const PeriodCapacity& p) -> const Capacity& { return p.gpu; });
    chart("CPU", "core-hours", [](const PeriodCapacity& p) -> const Capacity& { return p.cpu; });
    return out;
  }

  std::string waste() const {
    const Report& r = tenants_;
    if (r.samples == 0)
      return "<p class=\"note\">Waste (allocated but idle capacity) is measured from utilisation samples, and none "
             "were given.</p>\n";
    std::vector<const Row*> rows;
    for (const Row& row : r.rows)
      if (!row.idle_row && (row.gpu_sampled_hours > 0 || row.core_sampled_hours > 0)) rows.push_back(&row);
    if (rows.empty())
      return "<p class=\"note\">No job ran on a sampled host in the window: no waste could be measured.</p>\n";
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row* a, const Row* b) { return a->waste_cost > b->waste_cost; });
    std::string more;
    if (rows.size() > kMaxWasteRows) {
      more = fmt::format("<p>The {} tenants with the most waste are drawn; the table below has every one.</p>\n",
                         kMaxWasteRows);
      rows.resize(kMaxWasteRows);
    }
    return "<p>What jobs held on sampled hosts but did not use: " + key(kAllocatedIdle) + "GPU-hours allocated idle, " +
           key(kWasteCost) + "their cost and that of idle cores, at the jobs' rates.</p>\n" + more +
           figure("Allocated idle GPU-hours and waste cost by tenant", waste_chart(rows, r.currency));
  }

  std::string tenant_table() const {
    const Report& r = tenants_;
    const bool budgets =
        std::any_of(r.rows.begin(), r.rows.end(), [](const Row& row) { return row.budget.has_value(); });
    std::vector<HtmlColumn> columns = {{"tenant"}};
    for (const char* c : {"jobs", "GPU-h", "core-h", "cost", "GPU idle-h", "waste", "idle share", "total", "share",
                          "wait p50", "wait p90"})
      columns.push_back({c, "num"});
    if (budgets) columns.insert(columns.end(), {{"budget", "num"}, {"over"}});
    HtmlTable table(std::move(columns));
    auto add = [&](const Row& row, const std::string& name, const char* cls) {
      const bool over = row.budget && row.total_cost() > *row.budget;
      std::vector<HtmlCell> cells = {name,
                                     fmt::format("{}", row.jobs),
                                     hours(row.gpu_hours),
                                     hours(row.core_hours),
                                     money(row.cost),
                                     hours(row.gpu_idle_hours()),
                                     money(row.waste_cost),
                                     money(row.idle_cost),
                                     money(row.total_cost()),
                                     percent(row.share),
                                     wait_cell(row.wait_p50),
                                     wait_cell(row.wait_p90)};
      if (budgets) {
        cells.emplace_back(row.budget ? money(*row.budget) : "-");
        cells.emplace_back(row.budget ? (over ? "OVER" : "ok") : "-");
      }
      table.row(cells, over ? "over" : cls);
    };
    for (const Row& row : r.rows) add(row, row.idle_row ? "unallocated capacity" : tenant_name(row.keys[0]), "");
    add(r.total, "TOTAL", "total");
    std::string h = table.str();
    h += "<p class=\"lead\">" +
         esc(fmt::format("Money in {}. GPU-h and core-h are held (allocated) hours; waste prices the allocated idle "
                         "part; idle share is the tenant's part of unallocated capacity; total = cost + idle share.",
                         r.currency)) +
         "</p>\n";
    return h;
  }

  const ReportOptions& opt_;
  const ReadStats& stats_;
  Report tenants_, timeline_;
  bool monthly_ = false;
};

}  // namespace

void write_html(std::ostream& out, const Dataset& data, const ReportOptions& opt, const ReadStats& stats) {
  out << Page(data, opt, stats).render();
}

}  // namespace rkit::rcost
