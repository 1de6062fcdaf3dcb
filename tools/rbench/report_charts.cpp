// File: report_charts.cpp — the SVG charts of rbench's report (report_charts.hpp).
#include "report_charts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "rkit/svg.hpp"
#include "rkit/units.hpp"

namespace rkit::rbench::detail {
namespace {

// The chart writer and its palette are shared with rcost's page (rkit/svg.hpp). Red is
// kept for results that failed their check.
using namespace svg;
constexpr const char* kBar = "#4e79a7";
constexpr const char* kWrong = kRed;
constexpr const char* kPeak = "#f28e2b";
constexpr const char* kMemoryRoof = "#59a14f";
constexpr const char* kComputeRoof = "#7a3b8f";

constexpr double kChartWidth = 900;

// 1500 → "1.5k", 2e6 → "2M", 0.25 → "0.25": axis labels of log scales.
std::string si(double v) {
  const double a = std::fabs(v);
  if (a >= 1e12) return fmt::format("{:g}T", v / 1e12);
  if (a >= 1e9) return fmt::format("{:g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

// Logarithmic: v > 0 in [d0, d1] → [r0, r1].
struct LogScale {
  double d0, d1, r0, r1;
  double operator()(double v) const { return r0 + std::log(v / d0) / std::log(d1 / d0) * (r1 - r0); }
};

// Grid lines and labels of a log axis over any [d0, d1]: a line at every 1..9 × 10^k,
// labels at the powers of ten, and at 2 and 5 × 10^k too when fewer than three powers
// of ten fall inside. `at(v)` draws one, `major` telling a labelled line.
template <typename Draw>
void log_ticks(const LogScale& scale, Draw&& at) {
  const double lo = std::min(scale.d0, scale.d1), hi = std::max(scale.d0, scale.d1);
  const double first = std::pow(10, std::floor(std::log10(lo)));
  int decades = 0;
  for (double d = first; d <= hi * (1 + 1e-9); d *= 10) decades += d >= lo * (1 - 1e-9);
  for (double d = first; d <= hi * (1 + 1e-9); d *= 10)
    for (int m = 1; m < 10; ++m) {
      const double v = d * m;
      if (v < lo * (1 - 1e-9) || v > hi * (1 + 1e-9)) continue;
      at(v, m == 1 || (decades < 3 && (m == 2 || m == 5)));
    }
}

}  // namespace

std::string bar_chart(const std::string& title, const std::string& unit, const std::vector<Bar>& bars,
                      const std::vector<ResultsFile>& files) {
  constexpr double kRow = 24, kTop = 12, kBottom = 44, kValueColumn = 210, kMaxLabel = 340;
  double label_w = 90;
  for (const auto& b : bars) label_w = std::max(label_w, text_width(b.label) + 18);
  label_w = std::min(label_w, kMaxLabel);
  const double x0 = label_w, x1 = kChartWidth - kValueColumn;
  const double height = kTop + kRow * static_cast<double>(bars.size()) + kBottom;
  const double plot_bottom = kTop + kRow * static_cast<double>(bars.size());

  double lo = 0, hi = 0;
  for (const auto& b : bars) {
    lo = std::min({lo, b.r->min, b.r->median});
    hi = std::max({hi, b.r->max, b.r->median, b.r->peak.value_or(0)});
  }
  std::vector<double> ticks = linear_ticks(lo, hi, 6);
  LinearScale xs{ticks.front(), ticks.back(), x0, x1};

  Svg svg(kChartWidth, height, "bars", title);
  for (double t : ticks) {
    svg.line(xs(t), kTop - 4, xs(t), plot_bottom, kGrid);
    svg.text(xs(t), plot_bottom + 16, si(t), "middle");
  }
  svg.text((x0 + x1) / 2, plot_bottom + 34, unit, "middle");
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const Result& r = *bars[i].r;
    const double cy = kTop + kRow * (static_cast<double>(i) + 0.5);
    const char* fill = r.correct ? kBar : kWrong;
    svg.group(describe(r, files));
    svg.text(x0 - 10, cy + 4, fit_text(bars[i].label, label_w - 18), "end", r.correct ? kInk : kWrong);
    const double zero = xs(0), end = xs(r.median);
    svg.rect(std::min(zero, end), cy - 7, std::fabs(end - zero), 14, fill);
    if (r.max > r.min) {
      svg.line(xs(r.min), cy, xs(r.max), cy, "#222222", 1.2);
      svg.line(xs(r.min), cy - 4, xs(r.min), cy + 4, "#222222", 1.2);
      svg.line(xs(r.max), cy - 4, xs(r.max), cy + 4, "#222222", 1.2);
    }
    if (r.peak) svg.line(xs(*r.peak), cy - 10, xs(*r.peak), cy + 10, kPeak, 2.5, "4,2");
    std::string value = num(r.median);
    if (r.peak_fraction) value += " \u00b7 " + percent(*r.peak_fraction, 0) + " of peak";
    if (!r.correct) value += " \u00b7 WRONG";
    svg.text(x1 + 12, cy + 4, value, "start", r.correct ? kInk : kWrong);
    svg.end();
  }
  svg.line(xs(0), kTop - 4, xs(0), plot_bottom, kAxis);
  return svg.str();
}

std::string roofline_chart(const std::string& title, double bandwidth, const std::string& bandwidth_label,
                           const std::vector<Roof>& roofs, const std::vector<RoofPoint>& points,
                           const std::vector<std::string>& series) {
  constexpr double kLeft = 74, kRight = 24, kTop = 16, kBottom = 52, kHeight = 480;
  const double top_roof =
      std::max_element(roofs.begin(), roofs.end(), [](auto& a, auto& b) { return a.gflops < b.gflops; })->gflops;
  const bool tera = top_roof >= 1e4;
  const double scale = tera ? 1e-3 : 1;  // GFLOP/s → the unit drawn
  const char* unit = tera ? "TFLOP/s" : "GFLOP/s";
  const double ridge = top_roof / bandwidth;
  double xlo = ridge, xhi = ridge, ylo = top_roof, yhi = top_roof;
  for (const auto& r : roofs) {
    xlo = std::min(xlo, r.gflops / bandwidth);
    ylo = std::min(ylo, r.gflops);
  }
  for (const auto& p : points) {
    xlo = std::min(xlo, p.intensity);
    xhi = std::max(xhi, p.intensity);
    ylo = std::min(ylo, p.gflops);
    yhi = std::max(yhi, p.gflops);
  }
  // Over a decade of the memory-bound side left of the lowest ridge or point; the
  // memory roof enters at the bottom when it would start below it.
  xlo /= 20;
  xhi *= 3;
  ylo = ylo * scale / 4;
  yhi = yhi * scale * 1.6;
  const double bw = bandwidth * scale;  // the memory roof's slope in the unit drawn
  const double plot_right = kChartWidth - kRight, plot_bottom = kHeight - kBottom;
  // Room above the top roof for the legend (top left, where nothing can be): the top
  // roof at `a` of the plot's height from its top needs log(yhi/top) >= a·log(yhi/ylo).
  const bool any_wrong = std::any_of(points.begin(), points.end(), [](const RoofPoint& p) { return !p.correct; });
  const bool any_peak = std::any_of(roofs.begin(), roofs.end(), [](const Roof& r) { return !r.measured; });
  const bool any_measured = std::any_of(roofs.begin(), roofs.end(), [](const Roof& r) { return r.measured; });
  const double entries = static_cast<double>(series.size()) + any_wrong + 1 + any_peak + any_measured;
  const double a = (18 * entries + 22) / (plot_bottom - kTop);
  yhi = std::max(yhi, std::exp((std::log(top_roof * scale) - a * std::log(ylo)) / (1 - a)));
  LogScale xs{xlo, xhi, kLeft, plot_right};
  LogScale ys{ylo, yhi, plot_bottom, kTop};

  Svg svg(kChartWidth, kHeight, "roofline", title);
  log_ticks(xs, [&](double v, bool major) {
    svg.line(xs(v), kTop, xs(v), plot_bottom, major ? kGrid : "#f3f3f3");
    if (major) svg.text(xs(v), plot_bottom + 16, si(v), "middle");
  });
  log_ticks(ys, [&](double v, bool major) {
    svg.line(kLeft, ys(v), plot_right, ys(v), major ? kGrid : "#f3f3f3");
    if (major) svg.text(kLeft - 6, ys(v) + 4, si(v), "end");
  });
  svg.line(kLeft, plot_bottom, plot_right, plot_bottom, kAxis);
  svg.line(kLeft, kTop, kLeft, plot_bottom, kAxis);
  svg.text((kLeft + plot_right) / 2, plot_bottom + 38, "arithmetic intensity (FLOP/byte)", "middle");
  svg.text(18, (kTop + plot_bottom) / 2, unit, "middle", kInk, kFontPx, -90);

  // The memory roof: FLOP/s = bytes/s × FLOP/byte, from where it enters the chart to the top ridge.
  const double top = top_roof * scale;
  const double mem_x0 = std::max(xlo, ylo / bw);
  svg.group(bandwidth_label);
  svg.line(xs(mem_x0), ys(bw * mem_x0), xs(ridge), ys(top), kMemoryRoof, 2.5);
  svg.end();
  {
    // Its label, along the line, part of the way up.
    const double lx = std::exp(std::log(mem_x0) + (std::log(ridge) - std::log(mem_x0)) * 0.25);
    const double dx = xs(ridge) - xs(mem_x0), dy = ys(top) - ys(bw * mem_x0);
    const double angle = std::atan2(dy, dx) * 180 / std::numbers::pi;
    svg.text(xs(lx) + 4, ys(bw * lx) - 8, bandwidth_label, "start", kMemoryRoof, kFontPx, angle);
  }
  svg.line(xs(ridge), ys(top), xs(ridge), plot_bottom, kAxis, 1, "2,3");
  svg.text(xs(ridge) + 4, plot_bottom - 6, fmt::format("ridge {} FLOP/B", num(ridge)), "start", kAxis, 11);
  for (const auto& roof : roofs) {
    const double y = roof.gflops * scale;
    const std::string label = roof.measured ? fmt::format("best measured: {} {} {}", roof.names, num(y), unit)
                                            : fmt::format("{} peak {} {}", roof.names, num(y), unit);
    svg.group(label);
    svg.line(xs(std::max(roof.gflops / bandwidth, xlo)), ys(y), plot_right, ys(y), kComputeRoof, 2.5,
             roof.measured ? "7,4" : nullptr);
    svg.end();
    svg.text(plot_right - 6, ys(y) - 7, label, "end", kComputeRoof);
  }
  for (const auto& p : points) {
    svg.group(p.tooltip);
    svg.circle(xs(p.intensity), ys(p.gflops * scale), p.correct ? 5.5 : 6.5,
               p.correct ? kPalette[p.series % kPaletteSize] : kWrong, p.correct ? "#ffffff" : "#000000");
    svg.end();
  }
  // Legend, top left: above the memory roof, where nothing can be.
  double ly = kTop + 18;
  const double lx = kLeft + 14;
  for (std::size_t i = 0; i < series.size(); ++i, ly += 18) {
    svg.circle(lx + 6, ly - 4, 5, kPalette[i % kPaletteSize], "#ffffff");
    svg.text(lx + 18, ly, series[i]);
  }
  if (any_wrong) {
    svg.circle(lx + 6, ly - 4, 5, kWrong, "#000000");
    svg.text(lx + 18, ly, "failed its check", "start", kWrong);
    ly += 18;
  }
  svg.line(lx, ly - 4, lx + 12, ly - 4, kMemoryRoof, 2.5);
  svg.text(lx + 18, ly, "memory roof (measured bandwidth)");
  ly += 18;
  if (any_peak) {
    svg.line(lx, ly - 4, lx + 12, ly - 4, kComputeRoof, 2.5);
    svg.text(lx + 18, ly, "compute roof (peak)");
    ly += 18;
  }
  if (any_measured) {
    svg.line(lx, ly - 4, lx + 12, ly - 4, kComputeRoof, 2.5, "7,4");
    svg.text(lx + 18, ly, "compute roof (best measured: no peak known)");
  }
  return svg.str();
}

std::string collective_chart(const std::string& title, const std::vector<Series>& series,
                             const std::vector<ResultsFile>& files) {
  constexpr double kLeft = 70, kLegend = 230, kTop = 16, kBottom = 52, kHeight = 420;
  const double plot_right = kChartWidth - kLegend, plot_bottom = kHeight - kBottom;
  double blo = 0, bhi = 0, yhi = 0;
  for (const auto& s : series)
    for (const Result* r : s.rows) {
      double b = *bytes_param(*r), gb = *to_giga(r->median, r->unit, "B");
      blo = blo == 0 ? b : std::min(blo, b);
      bhi = std::max(bhi, b);
      yhi = std::max(yhi, gb);
    }
  if (bhi <= blo * 1.0001) {
    blo /= 2;
    bhi *= 2;
  }
  LogScale xs{blo, bhi, kLeft + 10, plot_right - 10};
  std::vector<double> yticks = linear_ticks(0, yhi, 6);
  LinearScale ys{0, yticks.back(), plot_bottom, kTop};

  Svg svg(kChartWidth, kHeight, "collective", title);
  for (double t : yticks) {
    svg.line(kLeft, ys(t), plot_right, ys(t), kGrid);
    svg.text(kLeft - 6, ys(t) + 4, si(t), "end");
  }
  // Powers of two, at most about ten labelled.
  const int e0 = static_cast<int>(std::ceil(std::log2(blo) - 1e-9)),
            e1 = static_cast<int>(std::floor(std::log2(bhi) + 1e-9));
  const int step = std::max(1, (e1 - e0 + 9) / 10);
  for (int e = e0; e <= e1; ++e) {
    const double b = std::ldexp(1.0, e);
    svg.line(xs(b), kTop, xs(b), plot_bottom, (e - e0) % step == 0 ? kGrid : "#f4f4f4");
    if ((e - e0) % step == 0)
      svg.text(xs(b), plot_bottom + 16, e >= 0 && e < 64 ? format_bytes(std::uint64_t(1) << e) : si(b), "middle");
  }
  svg.line(kLeft, plot_bottom, plot_right, plot_bottom, kAxis);
  svg.line(kLeft, kTop, kLeft, plot_bottom, kAxis);
  svg.text((kLeft + plot_right) / 2, plot_bottom + 38, "message size (bytes, log\u2082 scale)", "middle");
  svg.text(18, (kTop + plot_bottom) / 2, "GB/s", "middle", kInk, kFontPx, -90);

  bool any_wrong = false;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const char* colour = kPalette[i % kPaletteSize];
    std::vector<std::pair<double, double>> pts;
    for (const Result* r : series[i].rows)
      pts.emplace_back(xs(*bytes_param(*r)), ys(*to_giga(r->median, r->unit, "B")));
    if (pts.size() > 1) svg.polyline(pts, colour, 2.2);
    for (std::size_t j = 0; j < pts.size(); ++j) {
      const Result& r = *series[i].rows[j];
      any_wrong |= !r.correct;
      svg.group(describe(r, files));
      svg.circle(pts[j].first, pts[j].second, r.correct ? 3.5 : 5.5, r.correct ? colour : kWrong,
                 r.correct ? nullptr : "#000000");
      svg.end();
    }
  }
  // Legend, right of the plot.
  double ly = kTop + 12;
  const double lx = plot_right + 18;
  for (std::size_t i = 0; i < series.size() && ly < plot_bottom; ++i, ly += 18) {
    svg.line(lx, ly - 4, lx + 16, ly - 4, kPalette[i % kPaletteSize], 2.5);
    svg.group(series[i].label);
    svg.text(lx + 22, ly, fit_text(series[i].label, kLegend - 44));
    svg.end();
  }
  if (any_wrong) {
    svg.circle(lx + 8, ly - 4, 5, kWrong, "#000000");
    svg.text(lx + 22, ly, "failed its check", "start", kWrong);
  }
  return svg.str();
}

}  // namespace rkit::rbench::detail
