#include "serve.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <sstream>

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
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
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
  out.push_back(
      {"rkit_node_cpus", "Online CPUs (hardware threads) of this node, as /proc/stat lists them.", T::Gauge, {}});
  out.back().add(static_cast<double>(node.cpus));
  out.push_back(
      {"rkit_node_cpu_seconds_total",
       "CPU time of all CPUs together since boot, from /proc/stat: mode busy, or idle (which includes iowait).",
       T::Counter,
       {}});
  out.back().add(node.cpu_busy_s, {{"mode", "busy"}}).add(node.cpu_idle_s, {{"mode", "idle"}});
  out.push_back({"rkit_node_cpu_utilization_ratio",
                 "Share of all CPU time that was busy over the last window of rtop serve --interval, 0 to 1.",
                 T::Gauge,
                 {}});
  if (node.cpu_utilization) out.back().add(*node.cpu_utilization);
  out.push_back({"rkit_node_memory_total_bytes", "Memory of this node (MemTotal of /proc/meminfo).", T::Gauge, {}});
  out.back().add(static_cast<double>(node.memory_total_bytes));
  out.push_back({"rkit_node_memory_available_bytes",
                 "Memory available for new work without swapping (MemAvailable of /proc/meminfo).",
                 T::Gauge,
                 {}});
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
  out.push_back({"rkit_nvml_up",
                 "1 when NVML is loaded, so that GPUs are reported, else 0 (no NVIDIA driver, or --no-nvml).",
                 T::Gauge,
                 {}});
  out.back().add(nvml_loaded ? 1 : 0);
  MetricFamily util{"rkit_gpu_utilization_ratio",
                    "Share of the last sample period in which a kernel ran on the GPU, 0 to 1 (DCGM_FI_DEV_GPU_UTIL, a "
                    "percentage there).",
                    T::Gauge,
                    {}};
  MetricFamily used{"rkit_gpu_memory_used_bytes", "GPU memory in use (DCGM_FI_DEV_FB_USED, MiB there).", T::Gauge, {}};
  MetricFamily free{"rkit_gpu_memory_free_bytes", "GPU memory free (DCGM_FI_DEV_FB_FREE, MiB there).", T::Gauge, {}};
  MetricFamily total{
      "rkit_gpu_memory_total_bytes", "GPU memory in all (DCGM_FI_DEV_FB_TOTAL, MiB there).", T::Gauge, {}};
  MetricFamily power{"rkit_gpu_power_watts", "Power the GPU draws (DCGM_FI_DEV_POWER_USAGE).", T::Gauge, {}};
  MetricFamily energy{
      "rkit_gpu_energy_joules_total",
      "Energy the GPU used since the driver was loaded (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ there).",
      T::Counter,
      {}};
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
  MetricFamily jobs{"rkit_queue_jobs",
                    "Jobs in the local rsub queue, by tenant and state (pending includes held jobs).",
                    T::Gauge,
                    {}};
  MetricFamily cpus{"rkit_queue_cpus", "Cores the tenant's jobs ask for (pending) or hold (running).", T::Gauge, {}};
  MetricFamily gpus{"rkit_queue_gpus", "GPUs the tenant's jobs ask for (pending) or hold (running).", T::Gauge, {}};
  MetricFamily age{"rkit_queue_oldest_pending_age_seconds",
                   "Time since the submission of the tenant's oldest pending job; absent when none pends.",
                   T::Gauge,
                   {}};
  MetricFamily cost{"rkit_tenant_cost_per_hour",
                    "What the tenant's running jobs cost per hour at the price sheet's rates, in its currency.",
                    T::Gauge,
                    {}};
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

std::optional<std::vector<Json>> Exporter::read_queue(double timeout_s, std::string& error) {
  SpawnOptions so;
  // rsub finds its daemon (and so the job store) as a user's `rsub ls` would, with rtop's
  // configuration; --cached: remote jobs as last read, so that a scrape never waits on
  // Slurm or Kubernetes.
  so.argv = {opt_.rsub_program, "-q", "ls", "--json", "--cached"};
  if (!opt_.rsub_config.empty()) so.argv.insert(so.argv.begin() + 1, {"--config", opt_.rsub_config});
  so.in = Redirect::null();
  so.out = Redirect::pipe();
  so.err = Redirect::pipe();
  RunResult r;
  try {
    r = run(so, timeout_s, 0.5);
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

// --- HTTP ------------------------------------------------------------------------------

int request_refusal(std::string_view method, const std::string* content_length, bool has_transfer_encoding,
                    const ServeLimits& limits) {
  if (content_length) {
    const std::string& v = *content_length;
    if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return 400;
    if (std::stoull(v) > limits.max_body_bytes) return 413;
  }
  if (has_transfer_encoding) return 411;
  if (method != "GET" && method != "HEAD") return 405;
  return 0;
}

namespace {

using Clock = ClientConnection::Clock;
using Stage = ClientConnection::Stage;
using End = ClientConnection::End;

Clock::time_point after(Clock::time_point t, double s) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

constexpr std::size_t kReadChunk = 4096;

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

ClientConnection::ClientConnection(int fd, const ServeLimits& limits, Clock::time_point accepted)
    : fd_(fd), limits_(limits), accepted_(accepted), stage_deadline_(after(accepted, limits.read_timeout_s)) {}

ClientConnection::~ClientConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void ClientConnection::close_now(End why) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  stage_ = Stage::Done;
  if (end_ == End::None) end_ = why;
}

short ClientConnection::events() const {
  return stage_ == Stage::Sending ? POLLOUT : stage_ == Stage::Reading || stage_ == Stage::Lingering ? POLLIN : 0;
}

Clock::time_point ClientConnection::deadline() const { return stage_deadline_; }

ClientConnection::Stage ClientConnection::advance(Clock::time_point now) {
  switch (stage_) {
    case Stage::Reading: {
      const std::size_t cap = limits_.max_head_bytes + limits_.max_body_bytes;
      while (received_ < cap) {
        const std::size_t old = in_.size();
        in_.resize(old + std::min(kReadChunk, cap - received_));
        const ssize_t n = ::recv(fd_, in_.data() + old, in_.size() - old, MSG_DONTWAIT);
        if (n <= 0) {
          in_.resize(old);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && would_block(errno)) break;
          close_now(n == 0 ? End::PeerClosed : End::Failed);
          return stage_;
        }
        in_.resize(old + static_cast<std::size_t>(n));
        received_ += static_cast<std::size_t>(n);
        // The head ends at its blank line (httplib skips a line without its CR).
        const std::size_t from = old >= 2 ? old - 2 : 0;
        if (std::string_view(in_.data() + from, in_.size() - from).find("\n\r\n") != std::string_view::npos)
          return stage_ = Stage::Answering;
      }
      if (received_ >= cap) return stage_ = Stage::Answering;  // the worker answers 400
      if (now >= stage_deadline_) close_now(End::Deadline);
      return stage_;
    }
    case Stage::Sending: {
      while (out_off_ < out_.size()) {
        const ssize_t n = ::send(fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
          out_off_ += static_cast<std::size_t>(n);
        } else if (would_block(errno)) {
          break;
        } else if (errno != EINTR) {
          close_now(End::Failed);
          return stage_;
        }
      }
      if (out_off_ < out_.size()) {
        if (now >= stage_deadline_) close_now(End::Deadline);
        return stage_;
      }
      std::string().swap(out_);
      ::shutdown(fd_, SHUT_WR);
      stage_ = Stage::Lingering;
      stage_deadline_ = after(now, limits_.linger_s);
      [[fallthrough]];
    }
    case Stage::Lingering: {
      // Closing with unread input makes the kernel send a reset, which can destroy the
      // response before the client has read it: what it still sends is taken, for a while.
      char scratch[kReadChunk];
      while (discarded_ < limits_.linger_bytes) {
        const ssize_t n = ::recv(fd_, scratch, sizeof scratch, MSG_DONTWAIT);
        if (n > 0) {
          discarded_ += static_cast<std::size_t>(n);
        } else if (n < 0 && would_block(errno)) {
          break;
        } else if (n == 0 || errno != EINTR) {
          close_now(n == 0 ? End::PeerClosed : End::Failed);
          return stage_;
        }
      }
      if (discarded_ >= limits_.linger_bytes || now >= stage_deadline_) close_now(End::Deadline);
      return stage_;
    }
    case Stage::Answering:
    case Stage::Done: return stage_;
  }
  return stage_;
}

void ClientConnection::answered(Clock::time_point now) {
  if (stage_ != Stage::Answering) return;
  std::vector<char>().swap(in_);
  in_off_ = 0;
  stage_ = Stage::Sending;
  stage_deadline_ = after(now, limits_.write_timeout_s);
}

void ClientConnection::refuse(std::string_view response) {
  if (fd_ < 0) return;
  // What has come is read first, so that closing sends a FIN rather than a reset.
  char scratch[kReadChunk];
  for (int i = 0; i < 4 && ::recv(fd_, scratch, sizeof scratch, MSG_DONTWAIT) > 0; ++i) {
  }
  if (!response.empty()) {
    [[maybe_unused]] const ssize_t n = ::send(fd_, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::shutdown(fd_, SHUT_WR);
  close_now(End::Refused);
}

ssize_t ClientConnection::read(char* out, std::size_t size) {
  if (size == 0) return 0;
  if (in_off_ >= in_.size()) {
    if (end_ == End::None)
      end_ = received_ >= limits_.max_head_bytes + limits_.max_body_bytes ? End::TooLong : End::Incomplete;
    return -1;
  }
  const std::size_t n = std::min(size, in_.size() - in_off_);
  std::memcpy(out, in_.data() + in_off_, n);
  in_off_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ClientConnection::write(const char* data, std::size_t size) {
  if (stage_ == Stage::Done) return -1;
  out_.append(data, size);
  return static_cast<ssize_t>(size);
}

namespace {

// httplib parses a request and writes its response over this Stream, which never
// waits: the request has come whole (or as far as the cap), the response is buffered.
class LimitedStream final : public httplib::Stream {
 public:
  explicit LimitedStream(ClientConnection& c) : c_(c) {}
  bool is_readable() const override { return c_.readable(); }
  bool is_writable() const override { return c_.stage() != Stage::Done; }
  ssize_t read(char* ptr, size_t size) override { return c_.read(ptr, size); }
  ssize_t write(const char* ptr, size_t size) override { return c_.write(ptr, size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(::getsockname, ip, port); }
  socket_t socket() const override { return c_.fd(); }

 private:
  template <typename F>
  void address_of(F get, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    if (get(c_.fd(), reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  ClientConnection& c_;
};

// httplib's Server for its routing, request parsing and response writing, without its
// accept loop and socket streams: their timeouts are per read, its queue has no bound,
// and a slow client holds one of its threads.
class LimitedServer : public httplib::Server {
 public:
  void answer(ClientConnection& c) {
    LimitedStream stream(c);
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, nullptr);
  }
};

// Workers that answer connections whose request has come, from a bounded queue, and
// hand them back for sending.
class WorkerPool {
 public:
  WorkerPool(LimitedServer& server, const ServeLimits& limits, int wake_fd)
      : server_(server), limits_(limits), wake_fd_(wake_fd) {
    for (std::size_t i = 0; i < std::max<std::size_t>(limits.workers, 1); ++i)
      threads_.emplace_back([this] { work(); });
  }
  ~WorkerPool() { stop(); }

  // Takes `c` (leaving it null) unless workers + queue connections are already queued
  // or being answered.
  bool offer(std::unique_ptr<ClientConnection>& c) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ || queued_.size() + answering_ >= threads_.size() + limits_.queue) return false;
      queued_.push_back(std::move(c));
    }
    cv_.notify_one();
    return true;
  }

  // The connections answered since the last call, to send.
  std::vector<std::unique_ptr<ClientConnection>> take_answered() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(answered_, {});
  }

  // Connections queued, being answered or answered and not yet taken.
  std::size_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return queued_.size() + answering_ + answered_.size();
  }

  // Drops the queued connections and waits for the workers to finish their answers.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
      queued_.clear();
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::unique_ptr<ClientConnection> c;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
        if (queued_.empty()) return;
        c = std::move(queued_.front());
        queued_.pop_front();
        ++answering_;
      }
      try {
        server_.answer(*c);
      } catch (...) {
        // httplib makes a handler's exception a 500; anything else costs this connection only
        c->refuse({});
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --answering_;
        answered_.push_back(std::move(c));
      }
      [[maybe_unused]] const ssize_t n = ::write(wake_fd_, "x", 1);  // a full pipe already wakes
    }
  }

  LimitedServer& server_;
  ServeLimits limits_;
  int wake_fd_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<ClientConnection>> queued_;
  std::vector<std::unique_ptr<ClientConnection>> answered_;
  std::size_t answering_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Why binding `l` failed (errno `err`, 0 when no address could be tried).
Error bind_error(const ListenAddress& l, int err) {
  const std::string what = "--listen " + l.text();
  switch (err) {
    case EADDRINUSE:
      return Error(Exit::Unavailable, what + ": address already in use",
                   "another program listens there: choose another port, or port 0 for any free one");
    case EACCES:
    case EPERM:
      return Error(Exit::NoPerm, what + ": permission denied", "ports below 1024 need root or CAP_NET_BIND_SERVICE");
    case EADDRNOTAVAIL: return Error(Exit::Usage, what + ": not an address of this machine");
    case 0: return Error(Exit::Unavailable, what + ": cannot listen there");
    default: return Error(Exit::Unavailable, fmt::format("{}: {}", what, std::strerror(err)));
  }
}

// A listening socket on exactly `l`'s address (the first of its name's addresses that
// binds): close-on-exec, so that rsub and a daemon it starts never inherit it; with
// SO_REUSEADDR but not SO_REUSEPORT, with which a second exporter would share the port
// silently. Sets `port` to the port bound.
int open_listener(const ListenAddress& l, int& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(l.host.c_str(), std::to_string(l.port).c_str(), &hints, &found);
  if (rc != 0)
    throw Error(rc == EAI_AGAIN ? Exit::TempFail : Exit::Usage,
                fmt::format("--listen {}: {}", l.text(), ::gai_strerror(rc)));
  int err = 0, fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw bind_error(l, err);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

const std::string& busy_response() {
  static const std::string text = [] {
    const std::string_view body = "rtop serve: too many connections, try again\n";
    return fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n"
        "Retry-After: 1\r\nConnection: close\r\n\r\n{}",
        body.size(), body);
  }();
  return text;
}

// The thread that listens: it accepts, reads every request and sends every response
// without blocking, and hands requests that have come to the workers.
class Frontend {
 public:
  Frontend(int listener, const ServeLimits& limits, WorkerPool& pool, int wake_fd)
      : listener_(listener), limits_(limits), pool_(pool), wake_fd_(wake_fd) {}
  ~Frontend() {
    if (listener_ >= 0) ::close(listener_);
  }
  Frontend(const Frontend&) = delete;
  Frontend& operator=(const Frontend&) = delete;

  // Until a signal comes; then stops listening (closing the listener), drops what is
  // still being read, and sends the answers in progress.
  void run() {
    while (!interrupt_signal()) step(std::chrono::milliseconds(100), true);
    ::close(listener_);
    listener_ = -1;
    std::erase_if(open_, [](const auto& c) { return c->stage() == Stage::Reading; });
    pool_.stop();
    stopping_ = true;
    do step(std::chrono::milliseconds(100), false);  // the first one takes the last answers
    while (!open_.empty());
  }

 private:
  void step(std::chrono::milliseconds most, bool accepting) {
    fds_.clear();
    fds_.push_back({accepting ? listener_ : -1, POLLIN, 0});
    fds_.push_back({wake_fd_, POLLIN, 0});
    Clock::time_point until = Clock::now() + most;
    for (const auto& c : open_) {
      fds_.push_back({c->fd(), c->events(), 0});
      until = std::min(until, c->deadline());
    }
    const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    if (::poll(fds_.data(), fds_.size(), static_cast<int>(std::max<long long>(wait_ms, 0))) < 0 && errno != EINTR)
      throw system_error("poll", errno);
    const Clock::time_point now = Clock::now();
    for (std::size_t i = 0; i < open_.size(); ++i) {
      std::unique_ptr<ClientConnection>& c = open_[i];
      if (fds_[i + 2].revents == 0 && now < c->deadline()) continue;
      advance(c, now);
    }
    std::erase_if(open_, [](const auto& c) { return !c || c->stage() == Stage::Done; });
    if (fds_[1].revents & POLLIN) {
      char drain[64];
      while (::read(wake_fd_, drain, sizeof drain) > 0) {
      }
    }
    for (std::unique_ptr<ClientConnection>& c : pool_.take_answered()) {
      c->answered(now);
      advance(c, now);
      if (c && c->stage() != Stage::Done) open_.push_back(std::move(c));
    }
    if (accepting && (fds_[0].revents & POLLIN)) accept_some(now);
  }

  // Moves `c` on; one whose request has come goes to the workers (null here then), or
  // is refused when they have enough.
  void advance(std::unique_ptr<ClientConnection>& c, Clock::time_point now) {
    const Stage stage = c->advance(now);
    if (stage == Stage::Lingering && stopping_) c->refuse({});
    if (stage == Stage::Answering && !pool_.offer(c)) c->refuse(busy_response());
  }

  void accept_some(Clock::time_point now) {
    for (int i = 0; i < 64; ++i) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        const int err = errno;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        if (would_block(err)) return;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // until connections end
          return;
        }
        throw system_error("accept", err);
      }
      auto c = std::make_unique<ClientConnection>(fd, limits_, now);
      if (open_.size() + pool_.held() >= limits_.connections && !evict_oldest()) {
        c->refuse(busy_response());
        continue;
      }
      advance(c, now);
      if (c && c->stage() != Stage::Done) open_.push_back(std::move(c));
    }
  }

  // Makes room for a new connection: the one here that has been open the longest (in
  // a flood, one still sending its request or lingering) is closed, so that connections
  // that say nothing cannot keep a scraper out. False when none is here.
  bool evict_oldest() {
    const auto oldest = std::min_element(open_.begin(), open_.end(),
                                         [](const auto& a, const auto& b) { return a->accepted() < b->accepted(); });
    if (oldest == open_.end()) return false;
    (*oldest)->refuse((*oldest)->stage() == Stage::Reading ? std::string_view(busy_response()) : std::string_view());
    open_.erase(oldest);
    return true;
  }

  int listener_;
  ServeLimits limits_;
  WorkerPool& pool_;
  int wake_fd_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<ClientConnection>> open_;  // being read, sent or lingering
  std::vector<pollfd> fds_;
};

}  // namespace

void serve(Exporter& exporter, const ListenAddress& listen, const std::function<void(const std::string&)>& on_listening,
           const ServeLimits& limits) {
  // A scraper that hangs up mid-response must not end the exporter (sends say
  // MSG_NOSIGNAL; this covers anything else).
  std::signal(SIGPIPE, SIG_IGN);
  LimitedServer server;
  server.set_payload_max_length(limits.max_body_bytes);  // a second line: no route reads a body
  // A request its headers already refuse is answered before its body is read, then closed.
  const auto refused = [&limits](const httplib::Request& req, httplib::Response& res) {
    const auto length = req.headers.find("Content-Length");
    const int status = request_refusal(req.method, length == req.headers.end() ? nullptr : &length->second,
                                       req.has_header("Transfer-Encoding"), limits);
    if (status == 0) return false;
    res.status = status;
    if (status == 405) res.set_header("Allow", "GET, HEAD");
    const std::string why = status == 413   ? fmt::format("a request body is at most {} bytes", limits.max_body_bytes)
                            : status == 411 ? "a request body needs a Content-Length"
                            : status == 405 ? "only GET and HEAD"
                                            : "bad Content-Length";
    res.set_content("rtop serve: " + why + "\n", "text/plain; charset=utf-8");
    return true;
  };
  server.set_pre_routing_handler([refused](const httplib::Request& req, httplib::Response& res) {
    return refused(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  // Expect: 100-continue would invite the body that the routing then refuses.
  server.set_expect_100_continue_handler(
      [refused](const httplib::Request& req, httplib::Response& res) { return refused(req, res) ? res.status : 100; });
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

  int wake[2];  // workers to the frontend: an answer is ready to send
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) throw system_error("pipe", errno);
  struct PipeCloser {
    int* fds;
    ~PipeCloser() { ::close(fds[0]), ::close(fds[1]); }
  } pipe_closer{wake};
  int port = 0;
  WorkerPool pool(server, limits, wake[1]);
  Frontend frontend(open_listener(listen, port), limits, pool, wake[0]);  // which closes the listener
  on_listening("http://" + listen.text(port) + "/metrics");
  try {
    frontend.run();
  } catch (const Error& e) {
    throw Error(Exit::Unavailable, fmt::format("--listen {}: {}", listen.text(port), e.what()));
  }
}

}  // namespace rkit::rtop
