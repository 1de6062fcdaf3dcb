#include "sample.hpp"

#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "rkit/cpus.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/host.hpp"
#include "rkit/units.hpp"

namespace rkit::rtop {

std::vector<CpuTimes> parse_proc_stat(const std::string& text) {
  std::vector<CpuTimes> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0) continue;
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    std::uint64_t v[10] = {};
    int k = 0;
    while (k < 10 && fields >> v[k]) ++k;
    if (k < 4) throw Error(Exit::DataErr, "/proc/stat: short cpu line: " + line);
    CpuTimes t;
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    for (int i = 0; i < std::min(k, 8); ++i) t.total += v[i];
    t.busy = t.total - v[3] - (k > 4 ? v[4] : 0);
    out.push_back(t);
  }
  if (out.empty()) throw Error(Exit::DataErr, "/proc/stat: no cpu lines");
  return out;
}

double utilisation(const CpuTimes& a, const CpuTimes& b) {
  if (b.total <= a.total) return 0.0;
  double busy = static_cast<double>(b.busy >= a.busy ? b.busy - a.busy : 0);
  return std::min(1.0, busy / static_cast<double>(b.total - a.total));
}

double parse_sample_interval(const std::string& text) {
  double s = parse_duration(text);
  if (s <= 0 || s > 86400) throw Error(Exit::Usage, "--interval must be more than 0 and at most 1d");
  return s;
}

std::uint64_t meminfo_bytes(const std::string& text, const std::string& key) {
  // "MemTotal:       16318264 kB", at the start of a line.
  std::size_t pos = 0;
  for (;;) {
    pos = text.find(key + ":", pos);
    if (pos == std::string::npos) return 0;
    if (pos == 0 || text[pos - 1] == '\n') break;
    pos += key.size();
  }
  try {
    return std::stoull(text.substr(pos + key.size() + 1)) * 1024;
  } catch (const std::exception&) {
    return 0;
  }
}

Sampler::Sampler(bool use_nvml) {
  host_ = rkit::host_name();
  cores_ = physical_cores();
  last_ = parse_proc_stat(read_file("/proc/stat"));
  last_time_ = deadline_ = std::chrono::steady_clock::now();
  std::string why;
  if (use_nvml) nvml_ = Nvml::load(why);
}

Json Sampler::next(double interval_s) {
  using Clock = std::chrono::steady_clock;
  deadline_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
  // After a stall (a suspended process) start afresh rather than firing a burst.
  if (deadline_ < Clock::now()) deadline_ = Clock::now();
  std::this_thread::sleep_until(deadline_);
  auto now = std::chrono::system_clock::now();
  auto taken = Clock::now();
  std::vector<CpuTimes> cur = parse_proc_stat(read_file("/proc/stat"));
  Json j;
  j["schema"] = "rkit.sample.v1";
  j["host"] = host_.empty() ? Json(nullptr) : Json(host_);
  j["time_unix_s"] = std::chrono::duration<double>(now.time_since_epoch()).count();
  j["interval_s"] = std::chrono::duration<double>(taken - last_time_).count();
  last_time_ = taken;
  j["cores"] = cores_;
  j["cpu_util"] = utilisation(last_[0], cur[0]);
  Json per_cpu = Json::array();
  for (std::size_t i = 1; i < cur.size() && i < last_.size(); ++i) per_cpu.push_back(utilisation(last_[i], cur[i]));
  j["cpu_util_per_cpu"] = per_cpu;
  last_ = std::move(cur);

  std::string mem = read_file("/proc/meminfo");
  std::uint64_t total = meminfo_bytes(mem, "MemTotal"), avail = meminfo_bytes(mem, "MemAvailable");
  j["memory_total_bytes"] = total;
  j["memory_available_bytes"] = avail;
  j["memory_used_bytes"] = total - std::min(total, avail);

  std::istringstream load(read_file("/proc/loadavg"));
  double l1 = 0, l5 = 0, l15 = 0;
  load >> l1 >> l5 >> l15;
  j["load_1m"] = l1;
  j["load_5m"] = l5;
  j["load_15m"] = l15;

  Json gpus = Json::array();
  if (nvml_) {
    int n = nvml_->device_count();
    for (int i = 0; i < n; ++i) {
      std::optional<NvmlUsage> u = nvml_->usage(i);
      if (!u) continue;  // refused by NVML; skipped, as the topology skips it, so indices match
      auto opt = [](const auto& v) { return v ? Json(*v) : Json(nullptr); };
      if (names_.size() <= static_cast<std::size_t>(i)) {
        const std::optional<NvmlDevice> d = nvml_->device(i);
        names_.resize(static_cast<std::size_t>(i) + 1);
        names_[static_cast<std::size_t>(i)] = d ? Json(d->name) : Json(nullptr);
      }
      gpus.push_back({{"index", gpus.size()},
                      {"name", names_[static_cast<std::size_t>(i)]},
                      {"util", opt(u->util)},
                      {"memory_used_bytes", opt(u->memory_used_bytes)},
                      {"memory_total_bytes", opt(u->memory_total_bytes)},
                      {"power_w", opt(u->power_w)}});
    }
  }
  j["gpus"] = gpus;
  // Flat summaries for tables and CSV: mean utilisation and total power of the GPUs.
  double util = 0, power = 0;
  int n_util = 0, n_power = 0;
  for (const auto& g : gpus) {
    if (!g["util"].is_null()) util += g["util"].get<double>(), ++n_util;
    if (!g["power_w"].is_null()) power += g["power_w"].get<double>(), ++n_power;
  }
  j["gpu_util_mean"] = n_util ? Json(util / n_util) : Json(nullptr);
  j["gpu_power_w_total"] = n_power ? Json(power) : Json(nullptr);
  return j;
}

}  // namespace rkit::rtop
