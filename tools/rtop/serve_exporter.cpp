// File: tools/rtop/serve_exporter.cpp — rtop serve's Exporter (serve.hpp): the CPU window
// thread, and a scrape that gathers every source's metrics into one /metrics body.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/version.hpp"
#include "sample.hpp"
#include "serve.hpp"

namespace rkit::rtop {
namespace {

double now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// --- the exporter ---------------------------------------------------------------------

Exporter::Exporter(ServeOptions options) : opt_(std::move(options)) {
  if (opt_.use_nvml) {
    std::string why;
    nvml_ = Nvml::load(why);
  }
  // Counters start at 0, so that rate() sees the first error.
  errors_["node"] = 0;
  if (opt_.queue) errors_["queue"] = 0;
  if (opt_.queue && opt_.prices) errors_["prices"] = 0;
  cpu_thread_ = std::thread([this] { cpu_window_loop(); });
}

Exporter::~Exporter() {
  {
    std::lock_guard<std::mutex> lock(cpu_mutex_);
    stopping_ = true;
  }
  cpu_cv_.notify_all();
  cpu_thread_.join();
}

void Exporter::cpu_window_loop() {
  std::optional<CpuTimes> last;
  const auto window =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(opt_.cpu_window_s));
  std::unique_lock<std::mutex> lock(cpu_mutex_);
  for (;;) {
    try {
      CpuTimes now = parse_proc_stat(read_file("/proc/stat"))[0];
      if (last) cpu_utilization_ = utilisation(*last, now);
      last = now;
    } catch (const std::exception&) {
      cpu_utilization_.reset();  // shown as absent, rather than stale
      last.reset();
    }
    if (cpu_cv_.wait_for(lock, window, [this] { return stopping_; })) return;
  }
}

void Exporter::warn(const std::string& source, const std::string& error) {
  std::string& last = warned_[source];
  if (error == last) return;
  last = error;
  if (!error.empty() && !opt_.quiet) rkit::warn("rtop", fmt::format("{}: {}", source, error), std::cerr);
}

std::string Exporter::scrape(std::optional<double> timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(scrape_mutex_);
  std::vector<MetricFamily> families;
  const auto add = [&](std::vector<MetricFamily> more) {
    for (auto& f : more) families.push_back(std::move(f));
  };
  families.push_back({"rkit_build_info",
                      "The rtop that serves these metrics: version and git revision; always 1.",
                      MetricType::Gauge,
                      {}});
  families.back().add(1, {{"version", kVersion}, {"revision", kGitRevision}});

  try {
    NodeReading node = read_node(read_file("/proc/stat"), read_file("/proc/meminfo"), read_file("/proc/loadavg"),
                                 static_cast<double>(::sysconf(_SC_CLK_TCK)));
    {
      std::lock_guard<std::mutex> cpu_lock(cpu_mutex_);
      node.cpu_utilization = cpu_utilization_;
    }
    add(node_families(node));
    warn("node", "");
  } catch (const std::exception& e) {
    ++errors_["node"];
    warn("node", e.what());
  }

  std::vector<GpuReading> gpus;
  if (nvml_) {
    const int n = nvml_->device_count();
    for (int i = 0; i < n; ++i) {
      std::optional<NvmlUsage> u = nvml_->usage(i);
      if (!u) continue;  // refused by NVML: skipped, as rtop's topology skips it, so indices match
      auto id = gpu_identity_.find(i);
      if (id == gpu_identity_.end()) {
        std::optional<NvmlDevice> d = nvml_->device(i);
        if (!d) continue;
        id = gpu_identity_.emplace(i, std::make_pair(d->uuid, d->name)).first;
      }
      gpus.push_back({static_cast<int>(gpus.size()), id->second.first, id->second.second, *u});
    }
  }
  add(gpu_families(nvml_ != nullptr, gpus));

  if (opt_.queue) {
    // rsub gets what is left of the scraper's timeout, less a margin to answer in
    // (a scrape that times out loses every metric, not just the queue's).
    double wait_s = opt_.queue_timeout_s;
    if (timeout_s) {
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      wait_s = std::clamp(*timeout_s - spent - 0.5, 0.1, wait_s);
    }
    std::string error;
    std::optional<std::vector<Json>> jobs = read_queue(wait_s, error);
    std::optional<QueueSummary> summary;
    if (jobs) {
      try {
        summary = summarize_queue(*jobs, now_unix_s(), opt_.prices ? &*opt_.prices : nullptr);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    families.push_back(
        {"rkit_queue_up", "1 when the local rsub job store was read at this scrape, else 0.", MetricType::Gauge, {}});
    families.back().add(summary ? 1 : 0);
    if (summary) {
      add(queue_families(*summary, opt_.prices ? &*opt_.prices : nullptr));
      if (!summary->price_errors.empty()) ++errors_["prices"];
      warn("prices", summary->price_errors.empty() ? "" : summary->price_errors.front());
    } else {
      ++errors_["queue"];
    }
    warn("queue", error);
  }

  families.push_back({"rkit_scrape_errors_total",
                      "Scrapes at which a source could not be read (node: /proc; queue: rsub ls; prices: a running job "
                      "the price sheet cannot price); that source's metrics were left out.",
                      MetricType::Counter,
                      {}});
  for (const auto& [source, n] : errors_) families.back().add(n, {{"source", source}});
  return render_exposition(families);
}

}  // namespace rkit::rtop
