// File: tools/rtop/sample.hpp
//
// Live utilisation samples (rkit.sample.v1): the host name, per-CPU utilisation over
// an interval from /proc/stat, memory from /proc/meminfo, load from /proc/loadavg, and
// per-GPU utilisation, memory and power from NVML when it loads.
//
//   rkit::rtop::Sampler s;                  // takes the first /proc/stat reading
//   Json rec = s.next(1.0);                 // sleeps 1 s, returns one record
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"
#include "rkit/nvml.hpp"

namespace rkit::rtop {

struct CpuTimes {
  std::uint64_t busy = 0, total = 0;
};

// Parses /proc/stat text: index 0 is the aggregate "cpu" line, then cpu0, cpu1, ...
// Throws Error(DataErr) if there is no cpu line.
std::vector<CpuTimes> parse_proc_stat(const std::string& text);

// Utilisation (0..1) between two readings; null-safe for counters that did not move.
double utilisation(const CpuTimes& before, const CpuTimes& after);

// The --interval text as seconds: a duration in (0, 1d]. Throws Error(Usage).
double parse_sample_interval(const std::string& text);

// Memory from /proc/meminfo text: the value of `key` ("MemTotal") in bytes; 0 when absent.
std::uint64_t meminfo_bytes(const std::string& text, const std::string& key);

class Sampler {
 public:
  explicit Sampler(bool use_nvml = true);
  // Sleeps until `interval_s` after the previous deadline (so samples do not drift)
  // and returns a record covering the time since the previous reading.
  Json next(double interval_s);

 private:
  std::vector<CpuTimes> last_;
  std::chrono::steady_clock::time_point last_time_, deadline_;
  std::string host_;
  std::unique_ptr<Nvml> nvml_;
  unsigned cores_ = 0;
  std::vector<Json> names_;  // GPU names by NVML index, read once
};

}  // namespace rkit::rtop
