// File: report.cpp — rbench's HTML report page (report.hpp): the sections, what each
// chart shows and the notes for what cannot be drawn, the results and hosts tables.
// The records' fields and labels are report_records.hpp's, the charts report_charts.hpp's.
#include "report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "record.hpp"
#include "report_charts.hpp"
#include "report_records.hpp"
#include "rkit/html.hpp"
#include "rkit/time.hpp"

namespace rkit::rbench {
namespace {

using namespace detail;

std::string esc(std::string_view s) { return html_escape(s); }

// ---------------------------------------------------------------- the page

// What rcost's page does not have (the rest is rkit::kPageStyle).
constexpr const char* kStyle = R"(
figcaption .params { color: #666; font-size: 0.9em; display: block; }
.key.dashed { height: 0; width: 1.2em; border-top: 3px dashed #f28e2b; }
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
  return fmt::format("{}", fmt::join(items, sep));
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
    h += html_page_start("rbench report: " + join(host_names(), ", "), kStyle);
    h += "<h1>rbench report</h1>\n" + summary();
    h += "<nav><a href=\"#suites\">Results by suite</a><a href=\"#roofline\">Roofline</a>"
         "<a href=\"#collectives\">Collectives</a><a href=\"#results\">All results</a><a "
         "href=\"#hosts\">Hosts</a></nav>\n";
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
    h += html_page_end("rbench");
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
    if (t0 > 0)
      s += " Measured " + (utc_time(t0) == utc_time(t1) ? utc_time(t0) : utc_time(t0) + " to " + utc_time(t1)) + ".";
    std::string out = "<p class=\"lead\">" + esc(s) + "</p>\n";
    if (wrong > 0)
      out += "<p class=\"note\"><strong>" +
             esc(fmt::format("{} result{} failed {} own check", wrong, wrong == 1 ? "" : "s",
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

  std::string source_label(const Result& r) const {
    return files_.size() > 1 ? " [" + base_name(files_[r.file].name) + "]" : "";
  }

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
  static std::vector<const Result*> largest_messages(const std::vector<const Result*>& rows,
                                                     std::string& caption_extra) {
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
      if (fresh)
        order.push_back(key);
      else if (*bytes_param(*r) > *bytes_param(*it->second))
        it->second = r;
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
      note(html,
           "No roofline: it needs a memory bandwidth suite (cpu.stream or gpu.stream) and a matrix multiply "
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
      auto same = std::find_if(roofs.begin(), roofs.end(),
                               [&](const Roof& r) { return std::fabs(r.gflops / peak - 1) < 0.005; });
      if (same == roofs.end())
        roofs.push_back({peak, metric, false});
      else
        same->names += ", " + metric;
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
      note(html, fmt::format("{}: {} result{} of {} not drawn as points (no m, n, k or element size).", name, unplaced,
                             unplaced == 1 ? "" : "s", gemm));
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
          if (bytes_param(r) && gb && std::isfinite(*gb) && *gb >= 0)
            rows.push_back(&r);
          else
            ++skipped;
        }
        if (!on_this_host) continue;
        std::string name = suite + on_host(host);
        if (rows.empty()) {
          note(html,
               fmt::format("No chart for {}: none of its results has params.bytes and a bandwidth unit (GB/s).", name));
          continue;
        }
        auto keys = label_keys(rows, {"bytes"}, true);
        std::vector<Series> series;
        for (const Result* r : rows) {
          std::string label = r->metric;
          if (auto p = params_text(r->params(), keys); !p.empty()) label += " " + p;
          label += source_label(*r);
          auto it = std::find_if(series.begin(), series.end(), [&](const Series& s) { return s.label == label; });
          if (it == series.end())
            series.push_back({label, {r}});
          else
            it->rows.push_back(r);
        }
        for (auto& s : series)
          std::stable_sort(s.rows.begin(), s.rows.end(),
                           [](const Result* a, const Result* b) { return *bytes_param(*a) < *bytes_param(*b); });
        std::string caption =
            "<strong>" + esc(name) + "</strong> \u2014 GB/s against message size, one line per metric";
        html += figure(caption, common_params_text(rows), collective_chart(name, series, files_));
        ++report_.charts;
        if (skipped > 0)
          note(html, fmt::format("{}: {} result{} without params.bytes or a bandwidth unit not drawn.", name, skipped,
                                 skipped == 1 ? "" : "s"));
      }
    }
    if (!any)
      note(html,
           "No collective results: bandwidth against message size is drawn for the suites comm.* and gpu.nccl, "
           "and these results have none.");
    return html;
  }

  std::string results_table() const {
    const bool sources = files_.size() > 1;
    std::vector<HtmlColumn> columns = {
        {"Suite"},      {"Metric"}, {"Params", "params"}, {"Median", "num"}, {"Min", "num"},
        {"Max", "num"}, {"Unit"},   {"CV", "num"},        {"Peak", "num"},   {"Check"}};
    if (sources) columns.push_back({"File"});
    if (many_hosts_) columns.push_back({"Host"});
    HtmlTable table(std::move(columns));
    for (const auto& r : results_) {
      std::vector<HtmlCell> cells = {
          r.suite,
          HtmlCell::markup(breakable(esc(r.metric))),
          HtmlCell::markup(params_html(r.params())),
          num(r.median),
          num(r.min),
          num(r.max),
          r.unit,
          r.cv ? percent(*r.cv, 1) : "-",
          {r.peak_fraction ? percent(*r.peak_fraction, 0) : "-", text(*r.rec, "peak_source")},
          {r.correct ? "ok" : "WRONG", text(*r.rec, "check")}};
      if (sources) cells.emplace_back(base_name(files_[r.file].name), files_[r.file].name);
      if (many_hosts_) cells.emplace_back(r.host);
      table.row(cells, r.correct ? "" : "wrong");
    }
    return table.str() + "<p>Point at a check or a peak for what was checked and how the peak was derived.</p>\n";
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
    HtmlTable table({{"Host"},
                     {"CPU"},
                     {"Cores", "num"},
                     {"HW threads", "num"},
                     {"Memory", "num"},
                     {"Kernel"},
                     {"GPUs"},
                     {"GPU driver"},
                     {"rkit"},
                     {"Results"}});
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
      table.row({cell("hostname"), cell("cpu_model"), cell("cores"), cell("hw_threads"), cell("memory_bytes"),
                 cell("kernel"), gpus, cell("gpu_driver"), cell("rkit_version"),
                 fmt::format("{} from {}", counts[i], join(srcs, ", "))});
    }
    return table.str();
  }

  const std::vector<ResultsFile>& files_;
  std::vector<Result> results_;
  bool many_hosts_ = false;
  Report report_;
};

}  // namespace

Report html_report(const std::vector<ResultsFile>& files) { return Page(files).render(); }

}  // namespace rkit::rbench
