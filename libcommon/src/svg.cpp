// File: libcommon/src/svg.cpp — the SVG chart writer of the HTML reports (rkit/svg.hpp).
#include "rkit/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace rkit {

namespace svg {

std::string px(double v) { return fmt::format("{:.1f}", v); }

std::size_t utf8_length(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string truncate_text(std::string_view s, std::size_t max_chars) {
  if (utf8_length(s) <= max_chars || max_chars == 0) return std::string(s);
  std::size_t chars = 0, i = 0;
  for (; i < s.size(); ++i)
    if ((s[i] & 0xC0) != 0x80 && ++chars == max_chars) break;  // i: start of the max_chars-th character
  return std::string(s.substr(0, i)) + "\u2026";
}

double text_width(std::string_view s) {
  static const std::string_view kLower = "abcdefghijklmnopqrstuvwxyz";
  static const double kLowerEm[] = {.613, .635, .550, .635, .615, .352, .635, .634, .278, .278, .579, .278, .974,
                                    .634, .612, .635, .635, .411, .521, .392, .634, .592, .818, .592, .592, .525};
  double em = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: counted with its lead
    if (c >= 0x80)
      em += 0.8;
    else if (auto p = kLower.find(static_cast<char>(c)); p != std::string_view::npos)
      em += kLowerEm[p];
    else if (c >= '0' && c <= '9')
      em += 0.636;
    else if (c == 'M' || c == 'W' || c == '@' || c == '%')
      em += 1.0;
    else if (c >= 'A' && c <= 'Z')
      em += 0.72;
    else if (c == '=' || c == '+' || c == '<' || c == '>' || c == '~')
      em += 0.838;
    else if (c == ' ' || c == '.' || c == ',' || c == ':' || c == ';' || c == '|' || c == '!' || c == '\'' ||
             c == '/' || c == '(' || c == ')' || c == '[' || c == ']')
      em += 0.36;
    else
      em += 0.6;
  }
  return em * kFontPx;
}

std::string fit_text(std::string_view s, double width) {
  if (text_width(s) <= width) return std::string(s);
  std::size_t chars = utf8_length(s);
  while (chars > 1 && text_width(truncate_text(s, chars)) > width) --chars;
  return truncate_text(s, chars);
}

double nice_step(double range, int target) {
  double raw = range / target;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

std::vector<double> linear_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  double step = nice_step(hi - lo, target);
  double first = std::floor(lo / step) * step, last = std::ceil(hi / step) * step;
  std::vector<double> ticks;
  for (int i = 0; first + i * step <= last + step * 1e-9 && i < 100; ++i) {
    double t = first + i * step;
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

}  // namespace svg

using svg::px;

void Svg::line(double x1, double y1, double x2, double y2, const char* stroke, double width, const char* dash) {
  body_ += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="{}"{}/>)", px(x1), px(y1),
                       px(x2), px(y2), stroke, width, dash ? fmt::format(R"( stroke-dasharray="{}")", dash) : "");
  body_ += '\n';
}

void Svg::rect(double x, double y, double w, double h, const char* fill) {
  body_ += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)", px(x), px(y), px(std::max(w, 0.0)),
                       px(std::max(h, 0.0)), fill);
  body_ += '\n';
}

void Svg::circle(double cx, double cy, double r, const char* fill, const char* stroke) {
  body_ += fmt::format(R"(<circle cx="{}" cy="{}" r="{}" fill="{}"{}/>)", px(cx), px(cy), r, fill,
                       stroke ? fmt::format(R"( stroke="{}" stroke-width="1.5")", stroke) : "");
  body_ += '\n';
}

void Svg::polyline(const std::vector<std::pair<double, double>>& points, const char* stroke, double width,
                   const char* dash) {
  std::string pts;
  for (auto [x, y] : points) pts += (pts.empty() ? "" : " ") + px(x) + "," + px(y);
  body_ += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="{}"{}/>)", pts, stroke, width,
                       dash ? fmt::format(R"( stroke-dasharray="{}")", dash) : "");
  body_ += '\n';
}

void Svg::text(double x, double y, std::string_view s, const char* anchor, const char* fill, double size,
               double rotate) {
  std::string transform =
      rotate != 0 ? fmt::format(R"x( transform="rotate({} {} {})")x", px(rotate), px(x), px(y)) : std::string();
  body_ += fmt::format(R"(<text x="{}" y="{}" font-size="{}" text-anchor="{}" fill="{}"{}>{}</text>)", px(x), px(y),
                       size, anchor, fill, transform, html_escape(s));
  body_ += '\n';
}

void Svg::group(std::string_view tooltip) { body_ += "<g><title>" + html_escape(tooltip) + "</title>\n"; }

void Svg::end() { body_ += "</g>\n"; }

std::string Svg::str() const {
  return fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-kind="{}" role="img" aria-label="{}" )"
      R"(width="{}" height="{}" viewBox="0 0 {} {}" font-family="system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif">)"
      "\n<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n{}</svg>\n",
      kind_, html_escape(label_), px(width_), px(height_), px(width_), px(height_), px(width_), px(height_), body_);
}

}  // namespace rkit
