#include "record.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <fstream>

#include "rkit/cpus.hpp"
#include "rkit/error.hpp"
#include "rkit/host.hpp"
#include "rkit/nvml.hpp"
#include "rkit/version.hpp"
#include "stats.hpp"

namespace rkit::rbench {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

// The GPUs (index, name, uuid, bus id, memory) and driver version NVML reports: none,
// and a null driver, where NVML is absent (no NVIDIA driver) or fails.
std::pair<Json, Json> gpus_and_driver() {
  Json gpus = Json::array();
  std::string why;
  auto nvml = Nvml::load(why);
  if (!nvml) return {gpus, nullptr};
  for (int i = 0, n = nvml->device_count(); i < n; ++i) {
    auto d = nvml->device(i);
    gpus.push_back(Json{{"index", i},
                        {"name", d && !d->name.empty() ? Json(d->name) : Json(nullptr)},
                        {"uuid", d && !d->uuid.empty() ? Json(d->uuid) : Json(nullptr)},
                        {"pci_bus_id", d && !d->pci_bus_id.empty() ? Json(d->pci_bus_id) : Json(nullptr)},
                        {"memory_bytes", d && d->memory_bytes ? Json(*d->memory_bytes) : Json(nullptr)}});
  }
  std::string driver = nvml->driver_version();
  return {gpus, driver.empty() ? Json(nullptr) : Json(driver)};
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

const Json& field(const Json& rec, const char* key, const std::string& where) {
  auto it = rec.find(key);
  if (it == rec.end()) throw Error(Exit::DataErr, where + ": missing '" + key + "'");
  return *it;
}

}  // namespace

Json host_fingerprint() {
  const std::uint64_t memory = physical_memory_bytes();
  auto [gpus, driver] = gpus_and_driver();
  return Json{{"hostname", host_name()},
              {"cpu_model", cpu_model()},
              {"cores", physical_cores()},
              {"hw_threads", usable_cpus()},
              {"memory_bytes", memory > 0 ? Json(memory) : Json(nullptr)},
              {"kernel", kernel_name()},
              {"gpus", gpus},
              {"gpu_driver", driver},
              {"rkit_version", std::string(kVersion) + " (git " + kGitRevision + ")"}};
}

bool higher_is_better(const std::string& unit) { return unit != "s" && unit != "ms" && unit != "us" && unit != "ns"; }

Json bench_record(const Suite& suite, const Measurement& m, const RunOptions& opt, const Json& host) {
  Summary s = summarize(m.samples);
  Json j;
  j["schema"] = kRecordSchema;
  j["suite"] = suite.name();
  j["metric"] = m.metric;
  j["unit"] = m.unit;
  j["higher_is_better"] = higher_is_better(m.unit);
  j["params"] = m.params;
  j["median"] = s.median;
  j["min"] = s.min;
  j["max"] = s.max;
  j["mean"] = s.mean;
  j["cv"] = s.cv;
  j["reps"] = s.n;
  j["warmup"] = opt.warmup;
  j["samples"] = m.samples;
  j["correct"] = m.correct;
  j["check"] = m.check;
  j["peak"] = m.peak ? Json(*m.peak) : Json(nullptr);
  j["peak_fraction"] = m.peak && *m.peak > 0 ? Json(s.median / *m.peak) : Json(nullptr);
  j["peak_source"] = m.peak_source.empty() ? Json(nullptr) : Json(m.peak_source);
  j["quick"] = opt.quick;
  j["time_unix_s"] = unix_now();
  j["host"] = host;
  return j;
}

std::vector<Json> read_bench_records(const std::string& path) {
  JsonLinesReader in(path);
  std::vector<Json> out;
  Json rec;
  while (in.next(rec)) {
    std::string where = in.where();
    check_schema(rec, "rkit.bench", 1, where);
    for (const char* key : {"suite", "metric", "unit"})
      if (!field(rec, key, where).is_string()) throw Error(Exit::DataErr, where + ": '" + key + "' must be a string");
    if (!field(rec, "median", where).is_number()) throw Error(Exit::DataErr, where + ": 'median' must be a number");
    const Json& samples = field(rec, "samples", where);
    if (!samples.is_array() || samples.empty())
      throw Error(Exit::DataErr, where + ": 'samples' must be a non-empty array");
    for (const auto& x : samples)
      if (!x.is_number()) throw Error(Exit::DataErr, where + ": 'samples' must hold numbers");
    out.push_back(rec);
  }
  return out;
}

void require_bench_records(const std::vector<std::string>& paths, std::size_t records) {
  if (records > 0) return;
  throw Error(Exit::DataErr, fmt::format("{}: no {} records", fmt::join(paths, ", "), kRecordSchema),
              "rbench run -o FILE writes them");
}

std::string measurement_key(const Json& r) {
  auto params = r.find("params");
  return fmt::format("{} {} {}", r.at("suite").get<std::string>(), r.at("metric").get<std::string>(),
                     params == r.end() ? "{}" : params->dump());
}

}  // namespace rkit::rbench
