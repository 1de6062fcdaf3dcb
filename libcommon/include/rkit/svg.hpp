// File: rkit/svg.hpp
//
// The SVG charts of rkit's HTML reports (rbench report --html, rcost report --format
// html): one writer, so that every page draws with the same fonts, colours and
// escaping. A chart is built element by element, then written as one <svg> element
// that is well-formed XML on its own (every text is escaped here, with rkit/html.hpp's
// html_escape). The page around the charts, its style sheet and tables: rkit/html.hpp.
//
//   rkit::Svg svg(900, 300, "bars", "GPU-hours by tenant");   // data-kind, aria-label
//   rkit::svg::LinearScale ys{0, 100, 260, 20};                 // domain → pixels
//   svg.group("tenant a: 42 GPU-h");                            // tooltip (<title>)
//   svg.rect(80, ys(42), 30, ys(0) - ys(42), rkit::svg::kPalette[0]);
//   svg.end();
//   std::string html = svg.str();
//
// Colours are SVG attributes, not CSS classes, so that a chart copied out of its page
// still draws the same. Pure functions and plain values: thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rkit/html.hpp"  // html_escape: every text of a chart is escaped

namespace rkit {
namespace svg {

// Tableau 10, less its red: red is kept for what failed or is over a limit.
inline constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
                                           "#edc948", "#9c755f", "#ff9da7", "#bab0ac"};
inline constexpr std::size_t kPaletteSize = sizeof kPalette / sizeof kPalette[0];
inline constexpr const char* kRed = "#d62728";
inline constexpr const char* kGrid = "#e6e6e6";
inline constexpr const char* kAxis = "#888888";
inline constexpr const char* kInk = "#333333";
inline constexpr double kFontPx = 12;  // the charts' text size

// A pixel coordinate as written: one decimal ("12.5").
std::string px(double v);

// The width of `s` at 12 px, from DejaVu Sans's advances (the widest of the usual
// sans-serif fonts, so that labels fit whichever one the browser picks).
double text_width(std::string_view s);
// Characters (code points) of UTF-8 text.
std::size_t utf8_length(std::string_view s);
// At most `max_chars` characters, the last one "…" when cut.
std::string truncate_text(std::string_view s, std::size_t max_chars);
// The longest prefix of `s` (plus "…" when cut) no wider than `width` px.
std::string fit_text(std::string_view s, double width);

// 1, 2 or 5 times a power of ten: about `target` steps over `range` (> 0).
double nice_step(double range, int target);
// Ticks covering [lo, hi] at a nice_step, widened to whole steps: the first and last
// are the axis's new bounds. An empty or reversed range becomes [lo, lo + 1].
std::vector<double> linear_ticks(double lo, double hi, int target);

// v in [d0, d1] → [r0, r1] (r1 < r0 for a y axis that grows upwards).
struct LinearScale {
  double d0, d1, r0, r1;
  double operator()(double v) const { return r0 + (v - d0) / (d1 - d0) * (r1 - r0); }
};

}  // namespace svg

// One chart: elements are appended as text; str() wraps them in the <svg> element,
// <svg class="chart" data-kind="KIND" aria-label="LABEL" ...>, on a white background.
// Coordinates are pixels from the top left.
class Svg {
 public:
  Svg(double width, double height, std::string kind, std::string label)
      : width_(width), height_(height), kind_(std::move(kind)), label_(std::move(label)) {}

  void line(double x1, double y1, double x2, double y2, const char* stroke, double width = 1,
            const char* dash = nullptr);
  // Negative sizes draw nothing (written as 0).
  void rect(double x, double y, double w, double h, const char* fill);
  void circle(double cx, double cy, double r, const char* fill, const char* stroke = nullptr);
  void polyline(const std::vector<std::pair<double, double>>& points, const char* stroke, double width,
                const char* dash = nullptr);
  // `s` is plain text (escaped here). anchor: start, middle or end; rotate in degrees
  // about (x, y).
  void text(double x, double y, std::string_view s, const char* anchor = "start", const char* fill = svg::kInk,
            double size = svg::kFontPx, double rotate = 0);
  // A group whose elements share a tooltip (plain text, escaped here); close with end().
  void group(std::string_view tooltip);
  void end();

  std::string str() const;

 private:
  double width_, height_;
  std::string kind_, label_, body_;
};

}  // namespace rkit
