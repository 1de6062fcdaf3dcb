#include "serve.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <toml++/toml.h>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/process.hpp"
#include "rkit/version.hpp"
#include "sample.hpp"

namespace rkit::rtop {
namespace {

double now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The first line of `text`, for one-line error messages.
std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

}  // namespace

// --- --listen ---------------------------------------------------------------------

std::string ListenAddress::text() const { return text(port); }

std::string ListenAddress::text(int bound_port) const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, bound_port)
                                             : fmt::format("{}:{}", host, bound_port);
}

ListenAddress parse_listen(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return Error(Exit::Usage, fmt::format("--listen {}: {}", text, why),
                 "give HOST:PORT, e.g. 127.0.0.1:9464, [::1]:9464, or :9464 for every interface");
  };
  ListenAddress out;
  std::string_view port;
  if (text.starts_with('[')) {
    const auto close = text.find("]:");
    if (close == std::string_view::npos) throw bad("an IPv6 address in brackets must be followed by :PORT");
    out.host = std::string(text.substr(1, close - 1));
    if (out.host.empty()) throw bad("empty address in brackets");
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad("no :PORT");
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) throw bad("an IPv6 address goes in brackets, e.g. [::1]:9464");
    if (out.host.empty()) out.host = "0.0.0.0";
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw bad("the port must be a number from 0 to 65535");
  out.port = std::stoi(std::string(port));
  if (out.port > 65535) throw bad("the port must be a number from 0 to 65535");
  return out;
}

// --- the node -----------------------------------------------------------------------

NodeReading read_node(const std::string& proc_stat, const std::string& meminfo, const std::string& loadavg,
                      double ticks_per_s) {
  NodeReading n;
  std::vector<CpuTimes> cpus = parse_proc_stat(proc_stat);
  n.cpus = cpus.size() - 1;
  if (ticks_per_s <= 0) ticks_per_s = 100;
  n.cpu_busy_s = static_cast<double>(cpus[0].busy) / ticks_per_s;
  n.cpu_idle_s = static_cast<double>(cpus[0].total - cpus[0].busy) / ticks_per_s;
  n.memory_total_bytes = meminfo_bytes(meminfo, "MemTotal");
  n.memory_available_bytes = meminfo_bytes(meminfo, "MemAvailable");
  std::istringstream load(loadavg);
  load >> n.load1 >> n.load5 >> n.load15;
  return n;
}

std::vector<MetricFamily> node_families(const NodeReading& node) {
  using T = MetricType;
  std::vector<MetricFamily> out;
  out.push_back({"rkit_node_cpus", "Online CPUs (hardware threads) of this node, as /proc/stat lists them.", T::Gauge, {}});
  out.back().add(static_cast<double>(node.cpus));
  out.push_back({"rkit_node_cpu_seconds_total",
                 "CPU time of all CPUs together since boot, from /proc/stat: mode busy, or idle (which includes iowait).",
                 T::Counter, {}});
  out.back().add(node.cpu_busy_s, {{"mode", "busy"}}).add(node.cpu_idle_s, {{"mode", "idle"}});
  out.push_back({"rkit_node_cpu_utilization_ratio",
                 "Share of all CPU time that was busy over the last window of rtop serve --interval, 0 to 1.", T::Gauge, {}});
  if (node.cpu_utilization) out.back().add(*node.cpu_utilization);
  out.push_back({"rkit_node_memory_total_bytes", "Memory of this node (MemTotal of /proc/meminfo).", T::Gauge, {}});
  out.back().add(static_cast<double>(node.memory_total_bytes));
  out.push_back({"rkit_node_memory_available_bytes",
                 "Memory available for new work without swapping (MemAvailable of /proc/meminfo).", T::Gauge, {}});
  out.back().add(static_cast<double>(node.memory_available_bytes));
  out.push_back({"rkit_node_load1", "Load average over 1 minute (/proc/loadavg).", T::Gauge, {}});
  out.back().add(node.load1);
  out.push_back({"rkit_node_load5", "Load average over 5 minutes (/proc/loadavg).", T::Gauge, {}});
  out.back().add(node.load5);
  out.push_back({"rkit_node_load15", "Load average over 15 minutes (/proc/loadavg).", T::Gauge, {}});
  out.back().add(node.load15);
  return out;
}

// --- GPUs -----------------------------------------------------------------------------

std::vector<MetricFamily> gpu_families(bool nvml_loaded, const std::vector<GpuReading>& gpus) {
  using T = MetricType;
  std::vector<MetricFamily> out;
  out.push_back({"rkit_nvml_up", "1 when NVML is loaded, so that GPUs are reported, else 0 (no NVIDIA driver, or --no-nvml).",
                 T::Gauge, {}});
  out.back().add(nvml_loaded ? 1 : 0);
  MetricFamily util{"rkit_gpu_utilization_ratio",
                    "Share of the last sample period in which a kernel ran on the GPU, 0 to 1 (DCGM_FI_DEV_GPU_UTIL, a "
                    "percentage there).",
                    T::Gauge, {}};
  MetricFamily used{"rkit_gpu_memory_used_bytes", "GPU memory in use (DCGM_FI_DEV_FB_USED, MiB there).", T::Gauge, {}};
  MetricFamily free{"rkit_gpu_memory_free_bytes", "GPU memory free (DCGM_FI_DEV_FB_FREE, MiB there).", T::Gauge, {}};
  MetricFamily total{"rkit_gpu_memory_total_bytes", "GPU memory in all (DCGM_FI_DEV_FB_TOTAL, MiB there).", T::Gauge, {}};
  MetricFamily power{"rkit_gpu_power_watts", "Power the GPU draws (DCGM_FI_DEV_POWER_USAGE).", T::Gauge, {}};
  MetricFamily energy{"rkit_gpu_energy_joules_total",
                      "Energy the GPU used since the driver was loaded (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ there).",
                      T::Counter, {}};
  for (const GpuReading& g : gpus) {
    Labels labels{{"gpu", std::to_string(g.index)}};
    if (!g.uuid.empty()) labels.emplace_back("uuid", g.uuid);
    if (!g.model.empty()) labels.emplace_back("model", g.model);
    const NvmlUsage& u = g.usage;
    if (u.util) util.add(*u.util, labels);
    if (u.memory_used_bytes) used.add(static_cast<double>(*u.memory_used_bytes), labels);
    if (u.memory_free_bytes) free.add(static_cast<double>(*u.memory_free_bytes), labels);
    if (u.memory_total_bytes) total.add(static_cast<double>(*u.memory_total_bytes), labels);
    if (u.power_w) power.add(*u.power_w, labels);
    if (u.total_energy_mj) energy.add(static_cast<double>(*u.total_energy_mj) / 1000.0, labels);
  }
  for (auto* f : {&util, &used, &free, &total, &power, &energy}) out.push_back(std::move(*f));
  return out;
}

// --- the queue ------------------------------------------------------------------------

QueueSummary summarize_queue(const std::vector<Json>& jobs, double now_s, const PriceSheet* prices) {
  QueueSummary out;
  out.now_s = now_s;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const Json& j = jobs[i];
    const std::string where = fmt::format("rsub ls record {}", i + 1);
    check_schema(j, "rkit.job", 1, where);
    try {
      const std::string backend = j.at("backend").get<std::string>();
      const std::string state = j.at("state").get<std::string>();
      if (backend != "local" || (state != "PENDING" && state != "RUNNING")) continue;
      TenantQueue& t = out.tenants[j.at("tenant").get<std::string>()];
      const double cpus = j.at("cpus").get<double>(), gpus = j.at("gpus").get<double>();
      if (state == "PENDING") {
        ++t.pending_jobs;
        t.pending_cpus += cpus;
        t.pending_gpus += gpus;
        const double submit = j.at("submit_unix_s").get<double>();
        t.oldest_pending_submit_s = std::min(t.oldest_pending_submit_s.value_or(submit), submit);
        continue;
      }
      ++t.running_jobs;
      t.running_cpus += cpus;
      t.running_gpus += gpus;
      if (!prices) continue;
      const Json& type = j.at("gpu_type");
      const std::uint64_t memory =
          j.at("tasks").get<std::uint64_t>() * j.at("memory_per_task_bytes").get<std::uint64_t>();
      try {
        t.cost_per_hour +=
            prices->at(backend).hourly(cpus, gpus, type.is_null() ? std::string() : type.get<std::string>(), memory);
      } catch (const Error& e) {
        t.cost_known = false;
        out.price_errors.push_back(fmt::format("job {}: {}", j.value("id", "?"), e.what()));
      }
    } catch (const Json::exception& e) {
      throw Error(Exit::DataErr, fmt::format("{}: {}", where, e.what()));
    }
  }
  return out;
}

std::vector<MetricFamily> queue_families(const QueueSummary& queue, const PriceSheet* prices) {
  using T = MetricType;
  MetricFamily jobs{"rkit_queue_jobs", "Jobs in the local rsub queue, by tenant and state (pending includes held jobs).",
                    T::Gauge, {}};
  MetricFamily cpus{"rkit_queue_cpus", "Cores the tenant's jobs ask for (pending) or hold (running).", T::Gauge, {}};
  MetricFamily gpus{"rkit_queue_gpus", "GPUs the tenant's jobs ask for (pending) or hold (running).", T::Gauge, {}};
  MetricFamily age{"rkit_queue_oldest_pending_age_seconds",
                   "Time since the submission of the tenant's oldest pending job; absent when none pends.", T::Gauge, {}};
  MetricFamily cost{"rkit_tenant_cost_per_hour",
                    "What the tenant's running jobs cost per hour at the price sheet's rates, in its currency.",
                    T::Gauge, {}};
  for (const auto& [tenant, t] : queue.tenants) {
    for (const char* state : {"pending", "running"}) {
      const bool p = state[0] == 'p';
      Labels labels{{"tenant", tenant}, {"state", state}};
      jobs.add(p ? t.pending_jobs : t.running_jobs, labels);
      cpus.add(p ? t.pending_cpus : t.running_cpus, labels);
      gpus.add(p ? t.pending_gpus : t.running_gpus, labels);
    }
    if (t.oldest_pending_submit_s)
      age.add(std::max(0.0, queue.now_s - *t.oldest_pending_submit_s), {{"tenant", tenant}});
    if (prices && t.cost_known) cost.add(t.cost_per_hour, {{"tenant", tenant}, {"currency", prices->currency}});
  }
  std::vector<MetricFamily> out;
  for (auto* f : {&jobs, &cpus, &gpus, &age, &cost}) out.push_back(std::move(*f));
  return out;
}

// --- options ----------------------------------------------------------------------------

std::string rsub_config_text(const Config& config) {
  const std::optional<std::string> dir = config.get_string("rsub.state_dir");
  if (!dir) return {};
  toml::table rsub;
  rsub.insert("state_dir", *dir);
  toml::table root;
  root.insert("rsub", std::move(rsub));
  std::ostringstream out;
  out << root << '\n';
  return out.str();
}

std::optional<PriceSheet> serve_prices(const Config& config, const std::optional<std::string>& flag) {
  std::string path;
  if (flag) {
    path = *flag;
  } else {
    const std::optional<std::string> configured = configured_price_sheet(config);
    if (!configured) return std::nullopt;
    path = *configured;
  }
  PriceSheet sheet = load_prices(path);
  sheet.at("local");  // the jobs serve prices are local ones: a sheet without them is a mistake
  return sheet;
}

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
  const auto window = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(opt_.cpu_window_s));
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
  if (!error.empty() && !opt_.quiet) std::cerr << fmt::format("rtop: warning: {}: {}\n", source, error) << std::flush;
}

std::optional<std::vector<Json>> Exporter::read_queue(double timeout_s, std::string& error) {
  SpawnOptions so;
  // The configuration rsub gets names only its job store: no backends, so that ls never
  // waits on Slurm or Kubernetes to refresh remote states (those jobs are skipped).
  so.argv = {opt_.rsub_program, "--config", "/dev/stdin", "-q", "ls", "--json"};
  so.in = Redirect::pipe();
  so.out = Redirect::pipe();
  so.err = Redirect::pipe();
  RunResult r;
  try {
    r = run(so, timeout_s, 0.5, opt_.rsub_config);
  } catch (const Error& e) {
    error = e.what();
    return std::nullopt;
  }
  if (r.timed_out) {
    error = fmt::format("rsub ls: no answer within {:.1f} s", timeout_s);
    return std::nullopt;
  }
  if (!r.status.success()) {
    const std::string why = first_line(r.err);
    error = fmt::format("rsub ls: {}{}", r.status.describe(), why.empty() ? "" : ": " + why);
    return std::nullopt;
  }
  std::vector<Json> jobs;
  std::istringstream lines(r.out);
  std::string line;
  try {
    for (std::size_t n = 1; std::getline(lines, line); ++n)
      if (!line.empty()) jobs.push_back(parse_json(line, fmt::format("rsub ls line {}", n)));
  } catch (const Error& e) {
    error = e.what();
    return std::nullopt;
  }
  return jobs;
}

std::string Exporter::scrape(std::optional<double> timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(scrape_mutex_);
  std::vector<MetricFamily> families;
  const auto add = [&](std::vector<MetricFamily> more) {
    for (auto& f : more) families.push_back(std::move(f));
  };
  families.push_back({"rkit_build_info", "The rtop that serves these metrics: version and git revision; always 1.",
                      MetricType::Gauge, {}});
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
    families.push_back({"rkit_queue_up", "1 when the local rsub job store was read at this scrape, else 0.",
                        MetricType::Gauge, {}});
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
                      MetricType::Counter, {}});
  for (const auto& [source, n] : errors_) families.back().add(n, {{"source", source}});
  return render_exposition(families);
}

// --- HTTP ------------------------------------------------------------------------------

namespace {

// Why binding `l` fails, found by trying it with a socket of our own (cpp-httplib only
// says that it failed).
Error bind_error(const ListenAddress& l) {
  const std::string what = "--listen " + l.text();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(l.host.c_str(), std::to_string(l.port).c_str(), &hints, &found);
  if (rc != 0)
    return Error(rc == EAI_AGAIN ? Exit::TempFail : Exit::Usage, fmt::format("{}: {}", what, ::gai_strerror(rc)));
  int err = 0;
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const int bound = ::bind(fd, a->ai_addr, a->ai_addrlen);
    err = bound == 0 ? 0 : errno;
    ::close(fd);
    if (bound == 0) break;
  }
  ::freeaddrinfo(found);
  switch (err) {
    case EADDRINUSE:
      return Error(Exit::Unavailable, what + ": address already in use",
                   "another program listens there: choose another port, or port 0 for any free one");
    case EACCES:
    case EPERM:
      return Error(Exit::NoPerm, what + ": permission denied", "ports below 1024 need root or CAP_NET_BIND_SERVICE");
    case EADDRNOTAVAIL:
      return Error(Exit::Usage, what + ": not an address of this machine");
    case 0:
      return Error(Exit::Unavailable, what + ": cannot listen there");
    default:
      return Error(Exit::Unavailable, fmt::format("{}: {}", what, std::strerror(err)));
  }
}

}  // namespace

void serve(Exporter& exporter, const ListenAddress& listen, const std::function<void(const std::string&)>& on_listening) {
  // A scraper that hangs up mid-response must not end the exporter.
  std::signal(SIGPIPE, SIG_IGN);
  httplib::Server server;
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a second
  // exporter on the same port would share it silently instead of failing.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.new_task_queue = [] { return new httplib::ThreadPool(4); };
  server.Get("/metrics", [&exporter](const httplib::Request& req, httplib::Response& res) {
    std::optional<double> timeout_s;
    try {
      const std::string h = req.get_header_value("X-Prometheus-Scrape-Timeout-Seconds");
      if (!h.empty() && std::stod(h) > 0) timeout_s = std::stod(h);
    } catch (const std::exception&) {
      // not a number: as if absent
    }
    res.set_content(exporter.scrape(timeout_s), kExpositionContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("rtop serve: Prometheus metrics are at /metrics\n", "text/plain; charset=utf-8");
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string why = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content("rtop serve: internal error: " + why + "\n", "text/plain; charset=utf-8");
  });

  int port = listen.port;
  if (port == 0) port = server.bind_to_any_port(listen.host);
  else if (!server.bind_to_port(listen.host, port)) port = -1;
  if (port <= 0) throw bind_error(listen);
  on_listening("http://" + listen.text(port) + "/metrics");

  // The signal handler only records the signal; this thread turns it into a stop.
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done) {
      if (interrupt_signal() && server.is_running()) {
        server.stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const bool ok = server.listen_after_bind();
  done = true;
  watcher.join();
  if (!ok && !interrupt_signal()) throw Error(Exit::Unavailable, "--listen " + listen.text(port) + ": the server stopped");
}

}  // namespace rkit::rtop
