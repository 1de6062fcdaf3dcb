// File: tools/rtop/serve_metrics.cpp — rtop serve's node and GPU metrics (serve.hpp): /proc
// read into a NodeReading, and the metric families of the node and of NVML's GPUs.
#include <sstream>

#include "sample.hpp"
#include "serve.hpp"

namespace rkit::rtop {

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

}  // namespace rkit::rtop
