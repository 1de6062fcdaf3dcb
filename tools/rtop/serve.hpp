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
// The HTTP server bounds what any client may cost it (ServeLimits): slow, huge or many
// clients are cut off or refused, and a scrape still gets a worker.
//
// The pieces below the Exporter are pure functions over text and records, for tests.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
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
  std::string rsub_config;            // the configuration file rsub gets (rtop's own; "" for rsub's default)
  double queue_timeout_s = 5;
  std::optional<PriceSheet> prices;
  bool quiet = false;  // no warnings on stderr
};

// The price sheet of the cost metric: `flag` (--prices) when given, else rcost.prices
// of the configuration, else its rsub.auto.prices (a relative path is relative to the
// configuration file, as rsub takes it), else none. Errors as load_prices (65, 66); Error(DataErr) when it has no
// prices for the local backend, whose jobs serve prices.
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
  std::map<std::string, double> errors_;       // source → scrape errors so far
  std::map<std::string, std::string> warned_;  // source → the last error warned about

  std::mutex cpu_mutex_;
  std::condition_variable cpu_cv_;
  bool stopping_ = false;
  std::optional<double> cpu_utilization_;
  std::thread cpu_thread_;
};

// --- HTTP, against hostile clients ------------------------------------------------------
//
// What clients may cost the exporter, fixed (rtop(1), SECURITY). A scraper sends a GET of
// a few hundred bytes at once and reads a response of some KiB, so these are far above
// its needs and far below what would let slow, huge or many clients stop the scrapes.
// One thread reads every request and sends every response without blocking; workers
// only answer requests that have fully arrived, so no client can hold one by being slow.
struct ServeLimits {
  std::size_t connections = 256;          // open at once; one more closes the oldest (503 if still sending its request)
  std::size_t workers = 8;                // requests answered at once (their scrapes run one at a time)
  std::size_t queue = 32;                 // arrived requests waiting for a worker; beyond, 503 at once
  std::size_t max_head_bytes = 16 << 10;  // request line and headers
  std::size_t max_body_bytes = 8 << 10;   // a declared body (Content-Length) beyond: 413, left unread
  double read_timeout_s = 5;              // the whole request, from the accept, however its bytes trickle
  double write_timeout_s = 5;             // the whole response, from its first send
  double linger_s = 1;                    // after the response, what the client still sends is discarded until
  std::size_t linger_bytes = 1 << 20;     // it closes, for at most this long and this much
};

// The status that refuses a request once its headers are read, before any body is, or 0
// to serve it: 400 for a Content-Length that is not a number, 413 for one above
// limits.max_body_bytes, 411 for a body of unknown length (any Transfer-Encoding), 405
// for a method other than GET and HEAD (nothing here takes a body). `content_length` is
// null when the header is absent.
int request_refusal(std::string_view method, const std::string* content_length, bool has_transfer_encoding,
                    const ServeLimits& limits);

// One accepted client connection through its stages, none of which blocks: Reading (what
// has arrived is taken, until the head is complete), Answering (a worker parses it from
// what was taken and writes the response into a buffer), Sending, Lingering (its input
// discarded after the response, so that closing does not reset a client still sending),
// Done (closed). Owns the socket; one thread at a time.
//
//   ClientConnection c(fd, limits, Clock::now());
//   while (c.stage() == Stage::Reading) { poll(c.fd(), c.events(), until c.deadline()); c.advance(now); }
//   ... read() and write() answer it (serve.cpp: through httplib's Stream) ...
//   c.answered(now);
//   while (c.stage() != Stage::Done) { poll as above; c.advance(now); }
class ClientConnection {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Stage { Reading, Answering, Sending, Lingering, Done };
  // The first reason the connection ended (or its request could not be read whole):
  // the client closed, a deadline or limit passed, the cap cut the request, the head
  // was incomplete, the socket failed, or it was refused.
  enum class End { None, PeerClosed, Deadline, TooLong, Incomplete, Failed, Refused };

  ClientConnection(int fd, const ServeLimits& limits, Clock::time_point accepted);
  ~ClientConnection();  // closes the socket, if still open
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Does what the stage allows without blocking and returns the stage then. Reading
  // ends as Answering once the head (through its blank line) has come or the request
  // reached max_head_bytes + max_body_bytes, as Done when the client closes or the
  // read deadline (read_timeout_s after the accept) passes; Sending as Lingering once
  // all is sent, as Done at its deadline; Lingering as Done when the client closes or
  // its limits are reached.
  Stage advance(Clock::time_point now);
  // After a worker has answered: the response goes out from now.
  void answered(Clock::time_point now);
  // Best effort without waiting: `response` is sent as far as the socket takes it, and
  // the connection is closed (Done, End::Refused).
  void refuse(std::string_view response);

  // For the worker, from what Reading took: up to `size` bytes; -1 past them (end()
  // is then TooLong when the cap cut the request, else Incomplete).
  ssize_t read(char* out, std::size_t size);
  bool readable() const { return in_off_ < in_.size(); }
  // Appends to the response (`size`; -1 once the connection has failed).
  ssize_t write(const char* data, std::size_t size);

  Stage stage() const { return stage_; }
  End end() const { return end_; }
  short events() const;                // to poll for in this stage
  Clock::time_point deadline() const;  // of this stage
  Clock::time_point accepted() const { return accepted_; }
  int fd() const { return fd_; }
  std::size_t bytes_received() const { return received_; }

 private:
  void close_now(End why);

  int fd_;
  ServeLimits limits_;
  Clock::time_point accepted_, stage_deadline_;
  Stage stage_ = Stage::Reading;
  End end_ = End::None;
  std::vector<char> in_;
  std::size_t in_off_ = 0, received_ = 0, discarded_ = 0;
  std::string out_;
  std::size_t out_off_ = 0;
};

// Listens on `listen` and serves /metrics (and a pointer to it at /) within `limits`
// until SIGINT, SIGTERM or SIGHUP arrives (an InterruptGuard must be installed), then
// stops accepting, drops the connections still sending their request or waiting for a
// worker, sends the answers in progress (within their deadlines) and returns. One
// request per connection (Connection: close). `on_listening` gets the metrics URL once
// bound ("http://127.0.0.1:41234/metrics"). Errors: Error(Unavailable) when the address
// is in use, Error(Usage) when it is not one of this machine's or does not resolve,
// Error(NoPerm) for a port the user may not bind.
void serve(Exporter& exporter, const ListenAddress& listen, const std::function<void(const std::string&)>& on_listening,
           const ServeLimits& limits = ServeLimits{});

}  // namespace rkit::rtop
