// File: tools/rtop/serve.hpp
//
// `rtop serve`: a Prometheus exporter. At each scrape of /metrics it reads this node's
// CPU, memory and load (/proc), its GPUs (NVML, when it loads), and the local rsub
// queue (by running `rsub ls --json`: tools compose through processes), and prices the
// running jobs per tenant with the price sheet. Metric names and meanings: rtop(1),
// SERVE METRICS.
//
//   ServeOptions opt;
//   opt.listen = parse_listen("127.0.0.1:0");
//   Exporter exporter(opt);                  // loads NVML, starts the CPU window thread
//   std::string text = exporter.scrape();    // one /metrics body
//   serve(exporter, opt.listen, [](const std::string& url) { std::cout << url << '\n'; });
//
// The pieces below the Exporter are pure functions over text and records, for tests.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "exposition.hpp"
#include "rkit/config.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/nvml.hpp"
#include "rkit/prices.hpp"

namespace rkit::rtop {

// --listen HOST:PORT. HOST is an IPv4 address, a host name, or an IPv6 address in
// brackets ("[::1]:9464"); PORT is 0 to 65535, 0 for any free port.
struct ListenAddress {
  std::string host;  // without brackets
  int port = 0;
  // "127.0.0.1:9464", "[::1]:9464".
  std::string text() const;
  std::string text(int bound_port) const;
};
// Throws Error(Usage) naming --listen when the text is not HOST:PORT.
ListenAddress parse_listen(std::string_view text);

// This node, from /proc.
struct NodeReading {
  std::size_t cpus = 0;                   // online CPUs: the per-CPU lines of /proc/stat
  double cpu_busy_s = 0, cpu_idle_s = 0;  // all CPUs together, since boot; idle includes iowait
  std::optional<double> cpu_utilization;  // 0..1 over the last window, once one has passed
  std::uint64_t memory_total_bytes = 0, memory_available_bytes = 0;
  double load1 = 0, load5 = 0, load15 = 0;
};
// From the text of /proc/stat, /proc/meminfo and /proc/loadavg; `ticks_per_s` is
// sysconf(_SC_CLK_TCK). Throws Error(DataErr) on a /proc/stat without cpu lines.
NodeReading read_node(const std::string& proc_stat, const std::string& meminfo, const std::string& loadavg,
                      double ticks_per_s);
std::vector<MetricFamily> node_families(const NodeReading& node);

// One GPU as NVML reports it; `index` counts only the GPUs NVML opens, as rtop does.
struct GpuReading {
  int index = 0;
  std::string uuid, model;  // "" when unknown
  NvmlUsage usage;
};
// rkit_nvml_up, then the per-GPU families (DCGM exporter equivalents in rtop(1)).
std::vector<MetricFamily> gpu_families(bool nvml_loaded, const std::vector<GpuReading>& gpus);

// The local queue of one tenant.
struct TenantQueue {
  int pending_jobs = 0, running_jobs = 0;
  double pending_cpus = 0, running_cpus = 0, pending_gpus = 0, running_gpus = 0;
  std::optional<double> oldest_pending_submit_s;  // Unix time of the oldest pending job
  double cost_per_hour = 0;                       // of its running jobs
  bool cost_known = true;                         // false when a running job could not be priced
};

struct QueueSummary {
  double now_s = 0;  // Unix time the ages are measured at
  std::map<std::string, TenantQueue> tenants;
  std::vector<std::string> price_errors;  // why jobs could not be priced, one per job
};

// Sums rkit.job.v1 records (rsub ls --json) per tenant: PENDING and RUNNING jobs of the
// local backend; others are skipped (their states may be stale, see rtop(1)). With a
// price sheet, each running job costs prices.at(backend).hourly(cpus, gpus, gpu_type,
// tasks × memory_per_task_bytes). Throws Error(DataErr) on a record that is not a
// rkit.job.v1 of a known major version or lacks a field.
QueueSummary summarize_queue(const std::vector<Json>& jobs, double now_s, const PriceSheet* prices);
// rkit_queue_jobs, rkit_queue_cpus, rkit_queue_gpus, rkit_queue_oldest_pending_age_seconds,
// and with a price sheet rkit_tenant_cost_per_hour.
std::vector<MetricFamily> queue_families(const QueueSummary& queue, const PriceSheet* prices);

struct ServeOptions {
  ListenAddress listen{"127.0.0.1", 9464};
  double cpu_window_s = 5;  // --interval: the window of rkit_node_cpu_utilization_ratio
  bool use_nvml = true;
  bool queue = true;                  // run rsub ls at each scrape
  std::string rsub_program = "rsub";  // rkit_program("rsub")
  std::string rsub_config;            // TOML given to rsub as its configuration (rsub.state_dir)
  double queue_timeout_s = 5;
  std::optional<PriceSheet> prices;
  bool quiet = false;  // no warnings on stderr
};

// The configuration serve hands rsub (TOML): its rsub.state_dir when `config` sets one,
// else nothing, so that rsub finds the same job store as a user's `rsub ls` would, and
// no backends, so that it never waits on one.
std::string rsub_config_text(const Config& config);

// The price sheet of the cost metric: `flag` (--prices) when given, else rcost.prices
// of the configuration, else its rsub.auto.prices (a relative path is relative to the
// configuration file, as rsub takes it), else none. Errors as load_prices (65, 66); Error(DataErr) when it has no prices for the
// local backend, whose jobs serve prices.
std::optional<PriceSheet> serve_prices(const Config& config, const std::optional<std::string>& flag);

// Collects the metrics. scrape() may be called from several threads (one at a time runs).
class Exporter {
 public:
  explicit Exporter(ServeOptions options);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;
  // The /metrics body. Never throws for a source that fails: that source's metrics are
  // left out, its *_up gauge is 0 and rkit_scrape_errors_total{source} counts it.
  // `timeout_s`, the scraper's own timeout (Prometheus sends it in the header
  // X-Prometheus-Scrape-Timeout-Seconds), shortens the wait for rsub to fit in it.
  std::string scrape(std::optional<double> timeout_s = std::nullopt);

 private:
  void cpu_window_loop();
  std::optional<std::vector<Json>> read_queue(double timeout_s, std::string& error);
  void warn(const std::string& source, const std::string& error);

  ServeOptions opt_;
  std::unique_ptr<Nvml> nvml_;
  std::map<int, std::pair<std::string, std::string>> gpu_identity_;  // NVML index → uuid, model
  std::mutex scrape_mutex_;
  std::map<std::string, double> errors_;         // source → scrape errors so far
  std::map<std::string, std::string> warned_;    // source → the last error warned about

  std::mutex cpu_mutex_;
  std::condition_variable cpu_cv_;
  bool stopping_ = false;
  std::optional<double> cpu_utilization_;
  std::thread cpu_thread_;
};

// Listens on `listen` and serves /metrics (and a pointer to it at /) until SIGINT,
// SIGTERM or SIGHUP arrives (an InterruptGuard must be installed), then stops
// accepting, finishes the requests in progress and returns. `on_listening` gets the
// metrics URL once bound ("http://127.0.0.1:41234/metrics"). Errors: Error(Unavailable)
// when the address is in use, Error(Usage) when it is not one of this machine's or
// does not resolve, Error(NoPerm) for a port the user may not bind.
void serve(Exporter& exporter, const ListenAddress& listen, const std::function<void(const std::string&)>& on_listening);

}  // namespace rkit::rtop
