#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <map>
#include <numbers>
#include <set>

#include "rkit/printer.hpp"
#include "rkit/svg.hpp"
#include "rkit/time.hpp"
#include "rkit/units.hpp"
#include "record.hpp"
#include "rkit/version.hpp"

namespace rkit::rbench {
namespace {

// The chart writer and its palette are shared with rcost's page (rkit/svg.hpp). Red is
// kept for results that failed their check.
using svg::fit_text;
using svg::kAxis;
using svg::kFontPx;
using svg::kGrid;
using svg::kInk;
using svg::kPalette;
using svg::kPaletteSize;
using svg::LinearScale;
using svg::linear_ticks;
using svg::px;
using svg::text_width;
constexpr const char* kBar = "#4e79a7";
constexpr const char* kWrong = "#d62728";
constexpr const char* kPeak = "#f28e2b";
constexpr const char* kMemoryRoof = "#59a14f";
constexpr const char* kComputeRoof = "#7a3b8f";

constexpr double kChartWidth = 900;

// ---------------------------------------------------------------- text

std::string esc(std::string_view s) { return html_escape(s); }

std::string num(double v) { return fmt::format("{:.4g}", v); }

// 1500 → "1.5k", 2e6 → "2M", 0.25 → "0.25": axis labels of log scales.
std::string si(double v) {
  const double a = std::fabs(v);
  if (a >= 1e12) return fmt::format("{:g}T", v / 1e12);
  if (a >= 1e9) return fmt::format("{:g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

std::string percent(double fraction, int decimals) { return fmt::format("{:.{}f}%", 100 * fraction, decimals); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// ---------------------------------------------------------------- records

const Json& empty_object() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

std::optional<double> number(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string text(const Json& j, const char* key, const std::string& fallback = {}) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

const Json& object(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty_object();
}

bool is_list(const Json& v) {
  return v.is_array() && !v.empty() && std::none_of(v.begin(), v.end(), [](const Json& x) { return x.is_structured(); });
}

// A value as a cell: sizes in bytes as "64 MiB", a list of plain values as "a, b, c" or,
// all equal, "8 × a" (gpu.nccl's device_names), the rest as the tables print them.
std::string param_text(const std::string& key, const Json& v) {
  const bool bytes_key = key == "bytes" || (key.size() > 6 && key.compare(key.size() - 6, 6, "_bytes") == 0);
  if (bytes_key && v.is_number_unsigned()) {
    std::string b = format_bytes(v.get<std::uint64_t>());
    return b.replace(b.find(' '), 1, "\u00a0");  // "1 GiB" stays on one line
  }
  if (v.is_string()) return v.get<std::string>();
  if (is_list(v)) {
    if (v.size() > 1 && std::all_of(v.begin(), v.end(), [&](const Json& x) { return x == v.front(); }))
      return fmt::format("{} \u00d7 {}", v.size(), param_text(key, v.front()));
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : ", ") + param_text(key, x);
    return out;
  }
  if (v.is_structured()) return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return Printer::cell(v, "null");
}

// One record with what the charts need, read defensively: read_bench_records checks
// only suite, metric, unit, median and samples.
struct Result {
  const Json* rec = nullptr;
  std::size_t file = 0;
  std::string suite, metric, unit, host;
  double median = 0, min = 0, max = 0;
  std::optional<double> cv, peak, peak_fraction;
  bool correct = true;
  const Json& params() const { return object(*rec, "params"); }
};

Result make_result(const Json& rec, std::size_t file) {
  Result r;
  r.rec = &rec;
  r.file = file;
  r.suite = rec.at("suite").get<std::string>();
  r.metric = rec.at("metric").get<std::string>();
  r.unit = rec.at("unit").get<std::string>();
  r.host = text(object(rec, "host"), "hostname", "unknown host");
  r.median = number(rec, "median").value_or(0);
  r.min = std::min(number(rec, "min").value_or(r.median), r.median);
  r.max = std::max(number(rec, "max").value_or(r.median), r.median);
  r.cv = number(rec, "cv");
  r.peak = number(rec, "peak");
  if (r.peak && !(*r.peak > 0)) r.peak.reset();
  r.peak_fraction = number(rec, "peak_fraction");
  if (!r.peak_fraction && r.peak) r.peak_fraction = r.median / *r.peak;
  auto c = rec.find("correct");
  r.correct = !(c != rec.end() && c->is_boolean() && !c->get<bool>());
  return r;
}

// A rate in giga-units per second (GB/s, GFLOP/s) from `unit`, or empty when `unit` is
// not a rate of `kind` ("B" or "FLOP").
std::optional<double> to_giga(double value, const std::string& unit, const std::string& kind) {
  static const std::map<std::string, double> kPrefix = {{"", 1e-9}, {"k", 1e-6}, {"K", 1e-6}, {"M", 1e-3},
                                                        {"G", 1},   {"T", 1e3},  {"P", 1e6}};
  static const std::map<std::string, double> kBinary = {{"Ki", 1024e-9}, {"Mi", 1048576e-9}, {"Gi", 1.073741824},
                                                        {"Ti", 1099.511627776}};
  const std::string tail = kind + "/s";
  if (unit.size() < tail.size() || unit.compare(unit.size() - tail.size(), tail.size(), tail) != 0) return std::nullopt;
  std::string prefix = unit.substr(0, unit.size() - tail.size());
  if (auto it = kPrefix.find(prefix); it != kPrefix.end()) return value * it->second;
  if (auto it = kBinary.find(prefix); kind == "B" && it != kBinary.end()) return value * it->second;
  return std::nullopt;
}

bool is_collective_suite(const std::string& suite) { return suite.rfind("comm.", 0) == 0 || suite == "gpu.nccl"; }

std::optional<double> bytes_param(const Result& r) {
  auto b = number(r.params(), "bytes");
  return b && *b > 0 ? b : std::nullopt;
}

// The parameters that tell results of one metric apart, for labels: a key counts when
// two results of the same metric (and, with `per_size`, the same params.bytes) differ in
// it, or one lacks it: gemm's m, n, k; io.seq's block_bytes. Keys that change only from
// metric to metric (the collectives' busbw_factor) or along with the size (comm.gloo's iters)
// label nothing, nor does one that restates another: named KEY_... beside a label KEY and
// the same wherever KEY is (the GPU suites' device_bus_id beside device, to_name beside
// to); the table has them.
std::vector<std::string> label_keys(const std::vector<const Result*>& rows, const std::set<std::string>& skip,
                                    bool per_size) {
  std::vector<std::string> keys;
  for (const Result* r : rows)
    for (auto& [k, v] : r->params().items())
      if (!skip.count(k) && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    std::map<std::string, std::set<std::string>> values;  // group → the values of k in it
    for (const Result* r : rows) {
      std::string group = r->metric;
      if (per_size) group += "\n" + (bytes_param(*r) ? num(*bytes_param(*r)) : std::string("-"));
      auto it = r->params().find(k);
      values[group].insert(it == r->params().end() ? std::string("\x01missing") : it->dump());
    }
    if (std::any_of(values.begin(), values.end(), [](const auto& g) { return g.second.size() > 1; })) out.push_back(k);
  }
  auto value = [](const Result* r, const std::string& k) {
    auto it = r->params().find(k);
    return it == r->params().end() ? std::string("\x01missing") : it->dump();
  };
  auto restates = [&](const std::string& k, const std::string& by) {
    if (k.size() <= by.size() + 1 || k.compare(0, by.size() + 1, by + "_") != 0) return false;
    std::map<std::string, std::string> seen;  // by's value → k's
    return std::all_of(rows.begin(), rows.end(), [&](const Result* r) {
      return seen.try_emplace(value(r, by), value(r, k)).first->second == value(r, k);
    });
  };
  std::vector<std::string> kept;
  for (const auto& k : out)
    if (std::none_of(kept.begin(), kept.end(), [&](const std::string& by) { return restates(k, by); })) kept.push_back(k);
  return kept;
}

// "k=v" for `keys` present in `params`; a square matrix multiply's m, n and k as one
// "m=n=k=1024".
std::string params_text(const Json& params, const std::vector<std::string>& keys) {
  auto has = [&](const char* k) { return std::find(keys.begin(), keys.end(), k) != keys.end() && params.contains(k); };
  const bool square = has("m") && has("n") && has("k") && params["m"] == params["n"] && params["n"] == params["k"];
  std::string out;
  for (const auto& k : keys) {
    auto it = params.find(k);
    if (it == params.end() || (square && (k == "n" || k == "k"))) continue;
    out += (out.empty() ? "" : " ") + (square && k == "m" ? std::string("m=n=k") : k) + "=" + param_text(k, *it);
  }
  return out;
}

std::string all_params_text(const Json& params) {
  std::string out;
  for (auto& [k, v] : params.items()) out += (out.empty() ? "" : " ") + k + "=" + param_text(k, v);
  return out;
}

// Parameters for a table cell: each "k=v" kept on one line unless its value has spaces
// (a GPU's name, a list), which would make the table wider than the page.
std::string params_html(const Json& params) {
  std::string out;
  for (auto& [k, v] : params.items()) {
    const std::string kv = k + "=" + param_text(k, v);
    out += (out.empty() ? "" : " ") + std::string(kv.find(' ') == std::string::npos ? "<span class=\"kv\">" : "<span>") +
           html_escape(kv) + "</span>";
  }
  return out;
}

// The parameters every result of `rows` has, with one value: said once, in a caption.
std::string common_params_text(const std::vector<const Result*>& rows) {
  std::string out;
  for (auto& [k, v] : rows.front()->params().items())
    if (std::all_of(rows.begin(), rows.end(), [&](const Result* r) {
          auto it = r->params().find(k);
          return it != r->params().end() && *it == v;
        }))
      out += (out.empty() ? "" : " ") + k + "=" + param_text(k, v);
  return out;
}

// The tooltip of a result: everything about it on a few lines.
std::string describe(const Result& r, const std::vector<ResultsFile>& files) {
  std::string s = fmt::format("{} {} {}\nmedian {} {} (min {}, max {}", r.suite, r.metric, all_params_text(r.params()),
                              num(r.median), r.unit, num(r.min), num(r.max));
  if (r.cv) s += ", cv " + percent(*r.cv, 1);
  if (auto reps = number(*r.rec, "reps")) s += fmt::format(", {:g} reps", *reps);
  s += ")";
  if (r.peak) {
    s += fmt::format("\npeak {} {}", num(*r.peak), r.unit);
    if (r.peak_fraction) s += " (" + percent(*r.peak_fraction, 0) + " reached)";
    if (auto src = text(*r.rec, "peak_source"); !src.empty()) s += ": " + src;
  }
  s += std::string("\ncheck: ") + (r.correct ? "ok" : "WRONG");
  if (auto check = text(*r.rec, "check"); !check.empty()) s += ": " + check;
  s += "\nhost " + r.host + ", from " + files[r.file].name;
  return s;
}

// ---------------------------------------------------------------- SVG

// Logarithmic: v > 0 in [d0, d1] → [r0, r1].
struct LogScale {
  double d0, d1, r0, r1;
  double operator()(double v) const { return r0 + std::log(v / d0) / std::log(d1 / d0) * (r1 - r0); }
};

bool finite_positive(double v) { return std::isfinite(v) && v > 0; }

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

// ---------------------------------------------------------------- bar charts

struct Bar {
  const Result* r;
  std::string label;
};

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

// ---------------------------------------------------------------- roofline

struct Roof {
  double gflops;
  std::string names;  // the metrics whose roof it is: "fp16, bf16"
  bool measured;      // the best measured rate, for want of a known peak
};

struct RoofPoint {
  double intensity, gflops;
  std::size_t series;
  bool correct;
  std::string tooltip;
};

// Log-log: FLOP/s against FLOP/byte. Rates are drawn in TFLOP/s when the top roof
// reaches 10 TFLOP/s (GPUs), else GFLOP/s.
std::string roofline_chart(const std::string& title, double bandwidth, const std::string& bandwidth_label,
                           const std::vector<Roof>& roofs, const std::vector<RoofPoint>& points,
                           const std::vector<std::string>& series) {
  constexpr double kLeft = 74, kRight = 24, kTop = 16, kBottom = 52, kHeight = 480;
  const double top_roof = std::max_element(roofs.begin(), roofs.end(), [](auto& a, auto& b) {
                            return a.gflops < b.gflops;
                          })->gflops;
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

// ---------------------------------------------------------------- collectives

struct Series {
  std::string label;
  std::vector<const Result*> rows;  // sorted by bytes
};

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
  const int e0 = static_cast<int>(std::ceil(std::log2(blo) - 1e-9)), e1 = static_cast<int>(std::floor(std::log2(bhi) + 1e-9));
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
    for (const Result* r : series[i].rows) pts.emplace_back(xs(*bytes_param(*r)), ys(*to_giga(r->median, r->unit, "B")));
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

// ---------------------------------------------------------------- the page

// What rcost's page does not have (the rest is rkit::kPageStyle).
constexpr const char* kStyle = R"(
figcaption .params { color: #666; font-size: 0.9em; display: block; }
.key.dashed { height: 0; width: 1.2em; border-top: 3px dashed #f28e2b; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.wrong td { color: #d62728; font-weight: 600; }
td.params { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.95em; }
td.params .kv { white-space: nowrap; }
)";

std::string utc_time(double unix_s) { return format_utc(unix_s, "%Y-%m-%d %H:%M UTC"); }

std::string base_name(const std::string& path) {
  if (path == "-") return "stdin";
  auto slash = path.find_last_of('/');
  return slash == std::string::npos || slash + 1 == path.size() ? path : path.substr(slash + 1);
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Escaped text that may break after its underscores (own_sgemm_of_cublas), so that a
// long name does not widen the table past the page.
std::string breakable(const std::string& escaped) {
  std::string out;
  for (char c : escaped) out += c == '_' ? std::string("_<wbr>") : std::string(1, c);
  return out;
}

std::string figure(const std::string& caption_html, const std::string& params, const std::string& svg) {
  std::string out = "<figure>\n<figcaption>" + caption_html;
  if (!params.empty()) out += "<span class=\"params\">" + esc(params) + "</span>";
  return out + "</figcaption>\n" + svg + "</figure>\n";
}

class Page {
 public:
  explicit Page(const std::vector<ResultsFile>& files) : files_(files) {
    for (std::size_t f = 0; f < files.size(); ++f)
      for (const auto& rec : files[f].records) results_.push_back(make_result(rec, f));
    std::vector<std::string> names;
    for (const auto& f : files) names.push_back(f.name);
    require_bench_records(names, results_.size());
    std::set<std::string> hosts;
    for (const auto& r : results_) hosts.insert(r.host);
    many_hosts_ = hosts.size() > 1;
  }

  Report render() {
    std::string suites_html = suite_charts();
    std::string roofline_html = rooflines();
    std::string collectives_html = collectives();
    std::string& h = report_.html;
    h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    // Nothing may be fetched: the page is all there is.
    h += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n";
    h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
    h += "<title>" + esc("rbench report: " + join(host_names(), ", ")) + "</title>\n";
    h += "<style>" + std::string(kPageStyle) + kStyle + "</style>\n</head>\n<body>\n<main>\n";
    h += "<h1>rbench report</h1>\n" + summary();
    h += "<nav><a href=\"#suites\">Results by suite</a><a href=\"#roofline\">Roofline</a>"
         "<a href=\"#collectives\">Collectives</a><a href=\"#results\">All results</a><a href=\"#hosts\">Hosts</a></nav>\n";
    h += "<section id=\"suites\">\n<h2>Results by suite</h2>\n";
    h += "<p><span class=\"key\" style=\"background:#4e79a7\"></span>bars: the median of the timed repetitions, "
         "with whiskers from the minimum to the maximum; <span class=\"key dashed\"></span>the hardware's peak, where "
         "known; <span class=\"key\" style=\"background:#d62728\"></span>a result that failed its own check. "
         "Point at a bar for its details.</p>\n";
    h += suites_html + "</section>\n";
    h += "<section id=\"roofline\">\n<h2>Roofline</h2>\n";
    h += "<p>Attainable GFLOP/s against arithmetic intensity: below the ridge a kernel is bound by memory bandwidth "
         "(the measured STREAM triad), above it by the compute peak. Matrix multiplies are drawn at their intensity "
         "2mnk / ((mk + kn) \u00b7 the element size of A and B + mn \u00b7 that of C): gpu.gemm's fp16 and bf16 "
         "write an fp32 C, its fp8 a bf16 one.</p>\n";
    h += roofline_html + "</section>\n";
    h += "<section id=\"collectives\">\n<h2>Collectives: bandwidth against message size</h2>\n";
    h += collectives_html + "</section>\n";
    h += "<section id=\"results\">\n<h2>All results</h2>\n" + results_table() + "</section>\n";
    h += "<section id=\"hosts\">\n<h2>Hosts</h2>\n" + hosts_table() + "</section>\n";
    h += "<p class=\"lead\">Made by " + esc(fmt::format("rbench {} (git {})", kVersion, kGitRevision)) + ".</p>\n";
    h += "</main>\n</body>\n</html>\n";
    return std::move(report_);
  }

 private:
  std::vector<std::string> host_names() const {
    std::vector<std::string> out;
    for (const auto& r : results_)
      if (std::find(out.begin(), out.end(), r.host) == out.end()) out.push_back(r.host);
    return out;
  }

  std::vector<std::string> suite_names() const {
    std::vector<std::string> out;
    for (const auto& r : results_)
      if (std::find(out.begin(), out.end(), r.suite) == out.end()) out.push_back(r.suite);
    return out;
  }

  std::string summary() const {
    std::vector<std::string> names;
    for (const auto& f : files_) names.push_back(f.name == "-" ? "standard input" : f.name);
    std::size_t wrong = std::count_if(results_.begin(), results_.end(), [](const Result& r) { return !r.correct; });
    std::string s = fmt::format("{} result{} of {} from {}, on {}.", results_.size(), results_.size() == 1 ? "" : "s",
                                join(suite_names(), ", "), join(names, ", "), join(host_names(), ", "));
    double t0 = 0, t1 = 0;
    for (const auto& r : results_)
      if (auto t = number(*r.rec, "time_unix_s"); t && *t > 0) {
        t0 = t0 == 0 ? *t : std::min(t0, *t);
        t1 = std::max(t1, *t);
      }
    if (t0 > 0) s += " Measured " + (utc_time(t0) == utc_time(t1) ? utc_time(t0) : utc_time(t0) + " to " + utc_time(t1)) + ".";
    std::string out = "<p class=\"lead\">" + esc(s) + "</p>\n";
    if (wrong > 0)
      out += "<p class=\"note\"><strong>" + esc(fmt::format("{} result{} failed {} own check", wrong, wrong == 1 ? "" : "s",
                                                              wrong == 1 ? "its" : "their")) +
             "</strong>: shown in red; fast and wrong is not fast.</p>\n";
    return out;
  }

  void note(std::string& html, const std::string& text) {
    report_.notes.push_back(text);
    html += "<p class=\"note\">" + esc(text) + "</p>\n";
  }

  // A host suffix for titles when the records come from more than one machine.
  std::string on_host(const std::string& host) const { return many_hosts_ ? " on " + host : ""; }

  std::string source_label(const Result& r) const { return files_.size() > 1 ? " [" + base_name(files_[r.file].name) + "]" : ""; }

  // One bar chart per suite and unit, in the order the suites first appear.
  std::string suite_charts() {
    std::string html;
    for (const auto& suite : suite_names()) {
      std::vector<std::string> units;
      for (const auto& r : results_)
        if (r.suite == suite && std::find(units.begin(), units.end(), r.unit) == units.end()) units.push_back(r.unit);
      for (const auto& unit : units) {
        std::vector<const Result*> rows;
        for (const auto& r : results_)
          if (r.suite == suite && r.unit == unit) rows.push_back(&r);
        std::string extra;
        if (is_collective_suite(suite)) rows = largest_messages(rows, extra);
        auto keys = label_keys(rows, {}, false);
        // One measurement from several files or hosts: its bars side by side.
        std::vector<std::string> measurements;
        std::vector<std::pair<std::size_t, Bar>> bars;
        for (const Result* r : rows) {
          std::string label = r->metric;
          if (auto p = params_text(r->params(), keys); !p.empty()) label += " " + p;
          auto it = std::find(measurements.begin(), measurements.end(), label);
          if (it == measurements.end()) it = measurements.insert(measurements.end(), label);
          bars.push_back({static_cast<std::size_t>(it - measurements.begin()),
                          {r, label + source_label(*r) + (many_hosts_ ? " @" + r->host : "")}});
        }
        std::stable_sort(bars.begin(), bars.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<Bar> ordered;
        for (auto& b : bars) ordered.push_back(std::move(b.second));
        std::string title = fmt::format("{} \u2014 {}", suite, unit);
        std::string caption = "<strong>" + esc(suite) + "</strong> \u2014 " + esc(unit) +
                              (higher_is_better(unit) ? " (higher is better)" : " (lower is better)") + esc(extra);
        html += figure(caption, common_params_text(rows), bar_chart(title, unit, ordered, files_));
        ++report_.charts;
      }
    }
    return html;
  }

  // Collective suites measure many sizes: their bars show each collective at its
  // largest message, where bandwidth matters; the line chart has every size. One bar
  // per file and host too, so that two runs of one collective stand side by side.
  static std::vector<const Result*> largest_messages(const std::vector<const Result*>& rows, std::string& caption_extra) {
    auto keys = label_keys(rows, {"bytes"}, true);
    std::map<std::string, const Result*> best;
    std::vector<std::string> order;
    std::vector<const Result*> out;
    for (const Result* r : rows) {
      if (!bytes_param(*r)) {
        out.push_back(r);
        continue;
      }
      std::string key = fmt::format("{}\n{}\n{} {}", r->file, r->host, r->metric, params_text(r->params(), keys));
      auto [it, fresh] = best.try_emplace(key, r);
      if (fresh) order.push_back(key);
      else if (*bytes_param(*r) > *bytes_param(*it->second)) it->second = r;
    }
    if (order.empty()) return rows;
    for (const auto& k : order) out.push_back(best[k]);
    caption_extra = " \u00b7 each at its largest message size (every size is under Collectives)";
    return out;
  }

  // A roofline for each prefix P with both P.stream and P.gemm, per host.
  std::string rooflines() {
    std::string html;
    std::vector<std::string> prefixes;
    std::set<std::string> present;
    for (const auto& r : results_) {
      present.insert(r.suite);
      for (const char* kind : {".stream", ".gemm"}) {
        const std::string k = kind;
        if (r.suite.size() > k.size() && r.suite.compare(r.suite.size() - k.size(), k.size(), k) == 0) {
          std::string prefix = r.suite.substr(0, r.suite.size() - k.size());
          if (std::find(prefixes.begin(), prefixes.end(), prefix) == prefixes.end()) prefixes.push_back(prefix);
        }
      }
    }
    if (prefixes.empty()) {
      note(html, "No roofline: it needs a memory bandwidth suite (cpu.stream or gpu.stream) and a matrix multiply "
                 "suite (cpu.gemm or gpu.gemm) in the results, and these have neither.");
      return html;
    }
    for (const auto& prefix : prefixes) {
      const std::string stream = prefix + ".stream", gemm = prefix + ".gemm";
      if (!present.count(stream) || !present.count(gemm)) {
        note(html, fmt::format("No {} roofline: it needs both {} (the memory roof) and {} (the compute roof and its "
                               "points); the results have only {}.",
                               upper(prefix), stream, gemm, present.count(stream) ? stream : gemm));
        continue;
      }
      for (const auto& host : host_names()) roofline(html, prefix, host);
    }
    return html;
  }

  static std::string upper(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return s;
  }

  void roofline(std::string& html, const std::string& prefix, const std::string& host) {
    const std::string stream = prefix + ".stream", gemm = prefix + ".gemm";
    const std::string name = upper(prefix) + " roofline" + on_host(host);
    // The memory roof: the best triad median, else the best of any bandwidth metric.
    const Result* best_triad = nullptr;
    const Result* best_any = nullptr;
    bool any_stream = false, any_gemm = false;
    for (const auto& r : results_) {
      if (r.host != host) continue;
      any_stream |= r.suite == stream;
      any_gemm |= r.suite == gemm;
      if (r.suite != stream || !r.correct) continue;
      auto gb = to_giga(r.median, r.unit, "B");
      if (!gb || !finite_positive(*gb)) continue;
      auto better = [&](const Result* b) { return !b || *gb > *to_giga(b->median, b->unit, "B"); };
      if (lower(r.metric) == "triad" && better(best_triad)) best_triad = &r;
      if (better(best_any)) best_any = &r;
    }
    if (!any_stream && !any_gemm) return;  // nothing of this prefix on this host
    if (!any_stream || !any_gemm) {
      note(html, fmt::format("No {}: it needs both {} and {} from one host; {} has only {}.", name, stream, gemm, host,
                             any_stream ? stream : gemm));
      return;
    }
    const Result* mem = best_triad ? best_triad : best_any;
    if (!mem) {
      note(html, fmt::format("No {}: {} has no correct result in a bandwidth unit (GB/s).", name, stream));
      return;
    }
    const double bandwidth = *to_giga(mem->median, mem->unit, "B");
    std::string bandwidth_label = fmt::format("{} GB/s ({} {})", num(bandwidth), stream, mem->metric);

    // Compute roofs: the peak of each metric that has one, else the best measured.
    std::vector<std::string> series;
    std::vector<RoofPoint> points;
    std::map<std::string, double> peaks, best;
    std::vector<std::string> peak_order;
    std::size_t unplaced = 0;
    for (const auto& r : results_) {
      if (r.host != host || r.suite != gemm) continue;
      auto gf = to_giga(r.median, r.unit, "FLOP");
      if (!gf || !finite_positive(*gf)) continue;  // not a FLOP rate (gpu.gemm's % of cuBLAS): no point
      if (r.peak)
        if (auto p = to_giga(*r.peak, r.unit, "FLOP"); p && finite_positive(*p)) {
          if (!peaks.count(r.metric)) peak_order.push_back(r.metric);
          peaks[r.metric] = std::max(peaks[r.metric], *p);
        }
      if (r.correct) best[r.metric] = std::max(best[r.metric], *gf);
      auto intensity = gemm_intensity(*r.rec);
      if (!intensity || !finite_positive(*intensity)) {
        ++unplaced;
        continue;
      }
      auto it = std::find(series.begin(), series.end(), r.metric);
      const auto index = static_cast<std::size_t>(it - series.begin());
      if (it == series.end()) series.push_back(r.metric);
      points.push_back({*intensity, *gf, index, r.correct,
                        fmt::format("{}\nintensity {} FLOP/byte", describe(r, files_), num(*intensity))});
    }
    // One roof per peak value: fp16 and bf16 often share theirs.
    std::vector<Roof> roofs;
    for (const auto& metric : peak_order) {
      const double peak = peaks[metric];
      auto same = std::find_if(roofs.begin(), roofs.end(), [&](const Roof& r) { return std::fabs(r.gflops / peak - 1) < 0.005; });
      if (same == roofs.end()) roofs.push_back({peak, metric, false});
      else same->names += ", " + metric;
    }
    if (roofs.empty()) {
      auto top = std::max_element(best.begin(), best.end(), [](auto& a, auto& b) { return a.second < b.second; });
      if (top != best.end()) roofs.push_back({top->second, top->first, true});
    }
    if (roofs.empty()) {
      note(html, fmt::format("No {}: {} has no correct result in a FLOP rate (GFLOP/s or TFLOP/s).", name, gemm));
      return;
    }
    std::string caption = "<strong>" + esc(name) + "</strong>";
    std::string params = fmt::format("memory roof: {}; ", bandwidth_label);
    params += roofs.front().measured ? "compute roof: the best measured rate, as no result knows its peak"
                                     : "compute roofs: the peaks the results report";
    html += figure(caption, params, roofline_chart(name, bandwidth, bandwidth_label, roofs, points, series));
    ++report_.charts;
    if (unplaced > 0)
      note(html, fmt::format("{}: {} result{} of {} not drawn as points (no m, n, k or element size).",
                             name, unplaced, unplaced == 1 ? "" : "s", gemm));
  }

  std::string collectives() {
    std::string html;
    bool any = false;
    for (const auto& suite : suite_names()) {
      if (!is_collective_suite(suite)) continue;
      any = true;
      for (const auto& host : host_names()) {
        std::vector<const Result*> rows;
        std::size_t skipped = 0;
        bool on_this_host = false;
        for (const auto& r : results_) {
          if (r.suite != suite || r.host != host) continue;
          on_this_host = true;
          auto gb = to_giga(r.median, r.unit, "B");
          if (bytes_param(r) && gb && std::isfinite(*gb) && *gb >= 0) rows.push_back(&r);
          else ++skipped;
        }
        if (!on_this_host) continue;
        std::string name = suite + on_host(host);
        if (rows.empty()) {
          note(html, fmt::format("No chart for {}: none of its results has params.bytes and a bandwidth unit (GB/s).", name));
          continue;
        }
        auto keys = label_keys(rows, {"bytes"}, true);
        std::vector<Series> series;
        for (const Result* r : rows) {
          std::string label = r->metric;
          if (auto p = params_text(r->params(), keys); !p.empty()) label += " " + p;
          label += source_label(*r);
          auto it = std::find_if(series.begin(), series.end(), [&](const Series& s) { return s.label == label; });
          if (it == series.end()) series.push_back({label, {r}});
          else it->rows.push_back(r);
        }
        for (auto& s : series)
          std::stable_sort(s.rows.begin(), s.rows.end(),
                           [](const Result* a, const Result* b) { return *bytes_param(*a) < *bytes_param(*b); });
        std::string caption = "<strong>" + esc(name) + "</strong> \u2014 GB/s against message size, one line per metric";
        html += figure(caption, common_params_text(rows), collective_chart(name, series, files_));
        ++report_.charts;
        if (skipped > 0)
          note(html, fmt::format("{}: {} result{} without params.bytes or a bandwidth unit not drawn.", name, skipped,
                                 skipped == 1 ? "" : "s"));
      }
    }
    if (!any)
      note(html, "No collective results: bandwidth against message size is drawn for the suites comm.* and gpu.nccl, "
                 "and these results have none.");
    return html;
  }

  std::string results_table() const {
    const bool sources = files_.size() > 1;
    std::string h = "<table>\n<thead><tr>";
    for (const char* col : {"Suite", "Metric", "Params", "Median", "Min", "Max", "Unit", "CV", "Peak", "Check"})
      h += std::string("<th>") + col + "</th>";
    if (sources) h += "<th>File</th>";
    if (many_hosts_) h += "<th>Host</th>";
    h += "</tr></thead>\n<tbody>\n";
    for (const auto& r : results_) {
      h += r.correct ? "<tr>" : "<tr class=\"wrong\">";
      h += "<td>" + esc(r.suite) + "</td><td>" + breakable(esc(r.metric)) + "</td><td class=\"params\">" +
           params_html(r.params()) + "</td>";
      h += "<td class=\"num\">" + num(r.median) + "</td><td class=\"num\">" + num(r.min) + "</td><td class=\"num\">" +
           num(r.max) + "</td><td>" + esc(r.unit) + "</td>";
      h += "<td class=\"num\">" + (r.cv ? percent(*r.cv, 1) : std::string("-")) + "</td>";
      std::string peak_src = text(*r.rec, "peak_source");
      h += "<td class=\"num\"" + (peak_src.empty() ? std::string() : " title=\"" + esc(peak_src) + "\"") + ">" +
           (r.peak_fraction ? percent(*r.peak_fraction, 0) : std::string("-")) + "</td>";
      h += "<td title=\"" + esc(text(*r.rec, "check")) + "\">" + (r.correct ? "ok" : "WRONG") + "</td>";
      if (sources)
        h += "<td title=\"" + esc(files_[r.file].name) + "\">" + esc(base_name(files_[r.file].name)) + "</td>";
      if (many_hosts_) h += "<td>" + esc(r.host) + "</td>";
      h += "</tr>\n";
    }
    return h + "</tbody>\n</table>\n<p>Point at a check or a peak for what was checked and how the peak was derived.</p>\n";
  }

  std::string hosts_table() const {
    // Distinct fingerprints, in order of appearance, with the files that hold each.
    std::vector<std::pair<const Json*, std::set<std::size_t>>> hosts;
    std::vector<std::size_t> counts;
    for (const auto& r : results_) {
      const Json& host = object(*r.rec, "host");
      auto it = std::find_if(hosts.begin(), hosts.end(), [&](auto& h) { return *h.first == host; });
      if (it == hosts.end()) {
        hosts.push_back({&host, {r.file}});
        counts.push_back(1);
      } else {
        it->second.insert(r.file);
        ++counts[static_cast<std::size_t>(it - hosts.begin())];
      }
    }
    std::string h = "<table>\n<thead><tr>";
    for (const char* col : {"Host", "CPU", "Cores", "HW threads", "Memory", "Kernel", "GPUs", "GPU driver", "rkit", "Results"})
      h += std::string("<th>") + col + "</th>";
    h += "</tr></thead>\n<tbody>\n";
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      const Json& host = *hosts[i].first;
      auto cell = [&](const char* key) {
        auto it = host.find(key);
        return it == host.end() || it->is_null() ? std::string("-") : param_text(key, *it);
      };
      std::string gpus;
      if (auto it = host.find("gpus"); it != host.end() && it->is_array()) {
        Json names = Json::array();
        for (const auto& g : *it) names.push_back(g.is_object() && g.contains("name") ? g["name"] : g);
        gpus = names.empty() ? "none" : param_text("gpus", names);  // "8 × NVIDIA H100 80GB HBM3"
      } else {
        gpus = cell("gpus");
      }
      std::vector<std::string> srcs;
      for (std::size_t f : hosts[i].second) srcs.push_back(files_[f].name);
      h += "<tr><td>" + esc(cell("hostname")) + "</td><td>" + esc(cell("cpu_model")) + "</td><td class=\"num\">" +
           esc(cell("cores")) + "</td><td class=\"num\">" + esc(cell("hw_threads")) + "</td><td class=\"num\">" +
           esc(cell("memory_bytes")) + "</td><td>" + esc(cell("kernel")) + "</td><td>" + esc(gpus) + "</td><td>" +
           esc(cell("gpu_driver")) + "</td><td>" + esc(cell("rkit_version")) + "</td><td>" +
           esc(fmt::format("{} from {}", counts[i], join(srcs, ", "))) + "</td></tr>\n";
    }
    return h + "</tbody>\n</table>\n";
  }

  const std::vector<ResultsFile>& files_;
  std::vector<Result> results_;
  bool many_hosts_ = false;
  Report report_;
};

}  // namespace

std::string html_escape(std::string_view s) { return rkit::html_escape(s); }

std::optional<double> gemm_intensity(const Json& record) {
  const Json& params = object(record, "params");
  auto n = number(params, "n");
  auto m = number(params, "m"), k = number(params, "k");
  if (!n || !(*n > 0)) return std::nullopt;
  double mm = m.value_or(*n), kk = k.value_or(*n), nn = *n;
  if (!(mm > 0 && kk > 0)) return std::nullopt;
  auto positive = [&](const char* key) {
    auto v = number(params, key);
    return v && *v > 0 ? v : std::nullopt;
  };
  std::optional<double> ab = positive("ab_bytes");
  for (const char* key : {"elem_bytes", "element_bytes", "dtype_bytes"})
    if (!ab) ab = positive(key);
  if (!ab) {
    // The metric's name, else params.dtype. 4-byte names last: "float" is in "float16".
    std::string names = lower(text(record, "metric")) + " " + lower(text(params, "dtype"));
    static const std::pair<const char*, double> kSizes[] = {
        {"dgemm", 8}, {"fp64", 8},  {"f64", 8},  {"double", 8}, {"hgemm", 2}, {"bf16", 2},  {"fp16", 2}, {"float16", 2},
        {"f16", 2},   {"half", 2},  {"fp8", 1},  {"e4m3", 1},   {"e5m2", 1},  {"int8", 1},  {"i8", 1},
        {"sgemm", 4}, {"tf32", 4},  {"fp32", 4}, {"f32", 4},    {"float", 4}};
    for (auto [name, bytes] : kSizes)
      if (names.find(name) != std::string::npos) {
        ab = bytes;
        break;
      }
  }
  if (!ab) return std::nullopt;
  const double c = positive("c_bytes").value_or(*ab);
  return 2 * mm * nn * kk / ((mm * kk + kk * nn) * *ab + mm * nn * c);
}

Report html_report(const std::vector<ResultsFile>& files) { return Page(files).render(); }

}  // namespace rkit::rbench
