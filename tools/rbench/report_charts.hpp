// File: report_charts.hpp — private to rbench's report (report*.cpp).
//
// The report's three kinds of chart, each one <svg class="chart" data-kind="..."> drawn
// with rkit/svg.hpp: bars per suite and unit ("bars"), a roofline ("roofline"), and
// bandwidth against message size ("collective"). The page (report.cpp) decides what is
// drawn; these only draw it. Every text is escaped (rkit::Svg); tooltips come from
// describe() (report_records.hpp).
//
//   std::vector<Bar> bars{{&result, "triad"}};
//   std::string svg = bar_chart("cpu.stream \u2014 GB/s", "GB/s", bars, files);
//
// Pure functions of their arguments: thread-compatible.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "report_records.hpp"

namespace rkit::rbench::detail {

// One bar: a result and its label (the metric and the params that tell it apart).
struct Bar {
  const Result* r;
  std::string label;
};

// Horizontal bars of the medians of `bars`, in their order, with min–max whiskers, each
// result's peak (dashed) where known and red for results that failed their check.
// `title`: the chart's aria-label; `unit`: the axis's.
std::string bar_chart(const std::string& title, const std::string& unit, const std::vector<Bar>& bars,
                      const std::vector<ResultsFile>& files);

// A compute roof of a roofline: a peak, or the best measured rate.
struct Roof {
  double gflops;
  std::string names;  // the metrics whose roof it is: "fp16, bf16"
  bool measured;      // the best measured rate, for want of a known peak
};

// A matrix multiply drawn on a roofline.
struct RoofPoint {
  double intensity, gflops;  // FLOP/byte, GFLOP/s
  std::size_t series;        // index in the chart's series: its colour and legend entry
  bool correct;
  std::string tooltip;
};

// Log-log: FLOP/s against FLOP/byte, under a memory roof of `bandwidth` GB/s (labelled
// `bandwidth_label`) and `roofs` (at least one). Rates are drawn in TFLOP/s when the top
// roof reaches 10 TFLOP/s (GPUs), else GFLOP/s. `series`: the legend's names, by index.
std::string roofline_chart(const std::string& title, double bandwidth, const std::string& bandwidth_label,
                           const std::vector<Roof>& roofs, const std::vector<RoofPoint>& points,
                           const std::vector<std::string>& series);

// One line of a collective chart.
struct Series {
  std::string label;
  std::vector<const Result*> rows;  // sorted by bytes; each with bytes_param and a to_giga(.., "B")
};

// GB/s against message size (log2), one line per series (at least one row in all).
std::string collective_chart(const std::string& title, const std::vector<Series>& series,
                             const std::vector<ResultsFile>& files);

}  // namespace rkit::rbench::detail
