// rtrain runs compare --html (see runs_html.hpp).
#include "runs_html.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "rkit/html.hpp"
#include "rkit/printer.hpp"
#include "rkit/svg.hpp"

namespace rkit::rtrain {
namespace {

using namespace svg;

constexpr double kWidth = 900, kHeight = 300, kLeft = 70, kRight = 190, kTop = 20, kBottom = 48;
constexpr std::size_t kMaxPoints = 2000;  // per curve: longer series are thinned evenly

std::string cell(const Json& v) {
  return v.is_number() ? fmt::format("{:.6g}", v.get<double>()) : Printer::cell(v, "-");
}

// One metric's curves: x the step, y the value, a polyline per run.
std::string chart(const std::string& key, const std::vector<runs::Run>& rs,
                  const std::vector<std::vector<runs::Metric>>& per_run) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& series : per_run)
    for (const runs::Metric& m : series) {
      x0 = std::min(x0, static_cast<double>(m.step));
      x1 = std::max(x1, static_cast<double>(m.step));
      y0 = std::min(y0, m.value);
      y1 = std::max(y1, m.value);
    }
  if (!std::isfinite(x0)) return "";
  if (x1 <= x0) x1 = x0 + 1;
  const std::vector<double> yt = linear_ticks(y0, y1, 6), xt = linear_ticks(x0, x1, 8);
  const double plot_right = kWidth - kRight, plot_bottom = kHeight - kBottom;
  LinearScale xs{xt.front(), xt.back(), kLeft, plot_right}, ys{yt.front(), yt.back(), plot_bottom, kTop};
  Svg svg(kWidth, kHeight, "curves", key + " by step");
  for (double t : yt) {
    svg.line(kLeft, ys(t), plot_right, ys(t), kGrid);
    svg.text(kLeft - 6, ys(t) + 4, fmt::format("{:.4g}", t), "end");
  }
  for (double t : xt) {
    svg.line(xs(t), kTop, xs(t), plot_bottom, kGrid);
    svg.text(xs(t), plot_bottom + 16, fmt::format("{:g}", t), "middle");
  }
  svg.line(kLeft, plot_bottom, plot_right, plot_bottom, kAxis);
  svg.line(kLeft, kTop, kLeft, plot_bottom, kAxis);
  svg.text((kLeft + plot_right) / 2, plot_bottom + 36, "step", "middle");
  svg.text(16, (kTop + plot_bottom) / 2, key, "middle", kInk, kFontPx, -90);
  double ly = kTop + 12;
  for (std::size_t i = 0; i < per_run.size(); ++i) {
    const char* colour = kPalette[i % kPaletteSize];
    const auto& series = per_run[i];
    std::vector<std::pair<double, double>> pts;
    const std::size_t stride = std::max<std::size_t>(1, (series.size() + kMaxPoints - 1) / kMaxPoints);
    for (std::size_t j = 0; j < series.size(); j += stride)
      pts.emplace_back(xs(static_cast<double>(series[j].step)), ys(series[j].value));
    if (!series.empty() && (series.size() - 1) % stride != 0)
      pts.emplace_back(xs(static_cast<double>(series.back().step)), ys(series.back().value));
    svg.group(fmt::format("{} {}: {} points, last {:.6g}", rs[i].id, key, series.size(),
                          series.empty() ? 0.0 : series.back().value));
    if (pts.size() > 1)
      svg.polyline(pts, colour, 2);
    else if (pts.size() == 1)
      svg.circle(pts[0].first, pts[0].second, 3.5, colour);
    svg.end();
    if (ly < plot_bottom) {
      svg.line(plot_right + 14, ly - 4, plot_right + 30, ly - 4, colour, 2.5);
      svg.text(plot_right + 36, ly, fit_text(rs[i].name.empty() ? rs[i].id : rs[i].id + " " + rs[i].name, kRight - 44));
      ly += 18;
    }
  }
  return svg.str();
}

}  // namespace

std::string compare_html(const std::vector<runs::Run>& rs, const Json& compare,
                         const std::map<std::string, std::vector<std::vector<runs::Metric>>>& curves) {
  std::string h = html_page_start(fmt::format("rtrain runs compare: {} runs", rs.size()), "");
  h += fmt::format("<h1>{} runs compared</h1>\n", rs.size());
  h += "<nav><a href=\"#runs\">Runs</a><a href=\"#params\">Parameters</a><a href=\"#metrics\">Metrics</a>"
       "<a href=\"#curves\">Curves</a></nav>\n";
  h += "<h2 id=\"runs\">Runs</h2>\n";
  HtmlTable runs_table({{"Run"}, {"Experiment"}, {"Name"}, {"Status"}, {"User"}, {"Host"}, {"Duration", "num"}});
  for (const runs::Run& r : rs)
    runs_table.row({r.id, r.experiment, r.name, r.live_status(), r.user, r.host,
                    r.end_s ? fmt::format("{:.1f} s", *r.end_s - r.start_s) : "-"});
  h += runs_table.str();

  std::vector<HtmlColumn> cols = {{"Parameter"}};
  for (const runs::Run& r : rs) cols.push_back({r.id, "num"});
  h += "<h2 id=\"params\">Parameters that differ</h2>\n";
  if (compare.at("params").empty()) {
    h += "<p class=\"lead\">None: every run has the same configuration.</p>\n";
  } else {
    HtmlTable t(cols);
    for (const auto& [k, values] : compare.at("params").items()) {
      std::vector<HtmlCell> row = {HtmlCell(k)};
      for (const Json& v : values) row.emplace_back(cell(v));
      t.row(std::move(row));
    }
    h += t.str();
  }
  h += "<h2 id=\"metrics\">Metrics: last (lowest, highest)</h2>\n";
  cols.front().header = "Metric";
  HtmlTable mt(cols);
  for (const auto& [k, m] : compare.at("metrics").items()) {
    std::vector<HtmlCell> row = {HtmlCell(k)};
    for (std::size_t i = 0; i < rs.size(); ++i)
      row.emplace_back(fmt::format("{} ({} – {})", cell(m["last"][i]), cell(m["min"][i]), cell(m["max"][i])),
                       fmt::format("step {}", cell(m["step"][i])));
    mt.row(std::move(row));
  }
  h += mt.str();
  h += "<h2 id=\"curves\">Curves</h2>\n";
  // The losses first: what a comparison is usually about.
  std::vector<std::string> keys;
  for (const auto& [key, _] : curves) keys.push_back(key);
  std::stable_partition(keys.begin(), keys.end(),
                        [](const std::string& k) { return k.find("loss") != std::string::npos; });
  for (const std::string& key : keys) {
    const std::string svg = chart(key, rs, curves.at(key));
    if (svg.empty()) continue;
    h += fmt::format("<figure><figcaption>{}</figcaption>\n{}\n</figure>\n", html_escape(key), svg);
  }
  h += html_page_end("rtrain");
  return h;
}

}  // namespace rkit::rtrain
