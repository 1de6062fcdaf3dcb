// File: tools/rtop/exposition.hpp
//
// The Prometheus text exposition format, version 0.0.4: metric families with their
// HELP and TYPE lines, label values escaped, numbers as Prometheus parses them. What
// `rtop serve` writes at /metrics.
//
//   MetricFamily f{"rkit_queue_jobs", "Jobs in the local rsub queue", MetricType::Gauge, {}};
//   f.add(3, {{"tenant", "desk-a"}, {"state", "pending"}});
//   std::string text = render_exposition({f});
//   // # HELP rkit_queue_jobs Jobs in the local rsub queue
//   // # TYPE rkit_queue_jobs gauge
//   // rkit_queue_jobs{tenant="desk-a",state="pending"} 3
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rkit::rtop {

// The Content-Type of the text format.
inline constexpr const char* kExpositionContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { Gauge, Counter };

using Labels = std::vector<std::pair<std::string, std::string>>;  // name → value, in order

struct MetricSample {
  Labels labels;
  double value = 0;
};

struct MetricFamily {
  std::string name;  // [a-zA-Z_:][a-zA-Z0-9_:]*; a counter's ends in _total
  std::string help;
  MetricType type = MetricType::Gauge;
  std::vector<MetricSample> samples;
  MetricFamily& add(double value, Labels labels = {}) {
    samples.push_back({std::move(labels), value});
    return *this;
  }
};

// Whether `name` is a valid metric name, or (label = true) a valid label name, which
// has no ':' and does not start with "__" (reserved for Prometheus itself).
bool valid_metric_name(std::string_view name, bool label = false);

// A label value in its quotes: \ " and newline escaped; bytes that are not UTF-8
// become U+FFFD, since Prometheus refuses a whole scrape over one invalid label value.
std::string escape_label_value(std::string_view value);

// HELP text: \ and newline escaped (and invalid UTF-8 replaced, as above).
std::string escape_help(std::string_view help);

// A sample value as Prometheus reads it: shortest round-trip decimal ("0.37",
// "85899345920", "1e+21"), "NaN", "+Inf", "-Inf".
std::string format_value(double value);

// The families in order, each as "# HELP", "# TYPE", then its samples, one per line.
// A family without samples is left out. Throws Error(Software) on an invalid metric
// or label name (a bug: the names are the program's own).
std::string render_exposition(const std::vector<MetricFamily>& families);

}  // namespace rkit::rtop
