// File: report_records.cpp — the records as rbench's report reads them (report_records.hpp),
// and gemm_intensity (report.hpp).
#include "report_records.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "rkit/html.hpp"
#include "rkit/printer.hpp"
#include "rkit/units.hpp"

namespace rkit::rbench {
namespace detail {
namespace {

const Json& empty_object() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

bool is_list(const Json& v) {
  return v.is_array() && !v.empty() &&
         std::none_of(v.begin(), v.end(), [](const Json& x) { return x.is_structured(); });
}

std::string all_params_text(const Json& params) {
  std::string out;
  for (auto& [k, v] : params.items()) out += (out.empty() ? "" : " ") + k + "=" + param_text(k, v);
  return out;
}

}  // namespace

std::string num(double v) { return fmt::format("{:.4g}", v); }

std::string percent(double fraction, int decimals) { return fmt::format("{:.{}f}%", 100 * fraction, decimals); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::optional<double> number(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string text(const Json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

const Json& object(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty_object();
}

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
    std::vector<std::string> items;
    for (const auto& x : v) items.push_back(param_text(key, x));
    return fmt::format("{}", fmt::join(items, ", "));
  }
  if (v.is_structured()) return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return Printer::cell(v, "null");
}

bool finite_positive(double v) { return std::isfinite(v) && v > 0; }

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

std::optional<double> to_giga(double value, const std::string& unit, const std::string& kind) {
  static const std::map<std::string, double> kPrefix = {{"", 1e-9}, {"k", 1e-6}, {"K", 1e-6}, {"M", 1e-3},
                                                        {"G", 1},   {"T", 1e3},  {"P", 1e6}};
  static const std::map<std::string, double> kBinary = {
      {"Ki", 1024e-9}, {"Mi", 1048576e-9}, {"Gi", 1.073741824}, {"Ti", 1099.511627776}};
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
    if (std::none_of(kept.begin(), kept.end(), [&](const std::string& by) { return restates(k, by); }))
      kept.push_back(k);
  return kept;
}

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

std::string params_html(const Json& params) {
  std::string out;
  for (auto& [k, v] : params.items()) {
    const std::string kv = k + "=" + param_text(k, v);
    out += (out.empty() ? "" : " ") +
           std::string(kv.find(' ') == std::string::npos ? "<span class=\"kv\">" : "<span>") + html_escape(kv) +
           "</span>";
  }
  return out;
}

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

}  // namespace detail

using namespace detail;

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
        {"dgemm", 8},   {"fp64", 8},  {"f64", 8},  {"double", 8}, {"hgemm", 2}, {"bf16", 2}, {"fp16", 2},
        {"float16", 2}, {"f16", 2},   {"half", 2}, {"fp8", 1},    {"e4m3", 1},  {"e5m2", 1}, {"int8", 1},
        {"i8", 1},      {"sgemm", 4}, {"tf32", 4}, {"fp32", 4},   {"f32", 4},   {"float", 4}};
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

}  // namespace rkit::rbench
