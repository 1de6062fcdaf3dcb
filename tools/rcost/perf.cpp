// File: tools/rcost/perf.cpp — price/performance of benchmark results (perf.hpp).
#include "perf.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <regex>

#include "rkit/error.hpp"

namespace rkit::rcost {

namespace {

double number_at(const Json& rec, const char* key, const std::string& where) {
  const auto it = rec.find(key);
  if (it == rec.end() || !it->is_number())
    throw Error(Exit::DataErr, fmt::format("{}: \"{}\" must be a number", where, key));
  return it->get<double>();
}

std::string text_at(const Json& rec, const char* key) {
  const auto it = rec.find(key);
  return it != rec.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// What an hour of the measured hardware costs, and how it was priced.
struct Priced {
  double hourly = 0;
  std::string what;
};

Priced price_gpus(const ResourcePrices& p, double gpus, const std::string& model) {
  return {gpus * p.gpu_price(model),
          fmt::format("{:g} GPU{}{}", gpus, gpus == 1 ? "" : "s", model.empty() ? "" : " (" + model + ")")};
}

Priced price_bench(const Json& rec, const ResourcePrices& p, const std::string& where) {
  const std::string suite = text_at(rec, "suite");
  const Json host = rec.value("host", Json::object());
  const Json params = rec.value("params", Json::object());
  if (suite.starts_with("gpu.") || suite.ends_with("_cuda")) {
    double gpus = 1;
    for (const char* k : {"gpus", "ranks"})
      if (params.contains(k) && params[k].is_number()) gpus = params[k].get<double>();
    if (!(gpus >= 1 && gpus <= 1e7))
      throw Error(Exit::DataErr, fmt::format("{}: the GPU count is out of range", where));
    std::size_t index =
        params.contains("gpu") && params["gpu"].is_number_unsigned() ? params["gpu"].get<std::size_t>() : 0;
    std::string model;
    if (host.contains("gpus") && host["gpus"].is_array() && index < host["gpus"].size())
      model = host["gpus"][index].value("name", std::string());
    return price_gpus(p, gpus, model);
  }
  if (!host.contains("cores") || !host["cores"].is_number())
    throw Error(Exit::DataErr, fmt::format("{}: \"host.cores\" must be a number (an rbench record)", where));
  const double cores = host["cores"].get<double>();
  const double memory =
      host.contains("memory_bytes") && host["memory_bytes"].is_number() ? host["memory_bytes"].get<double>() : 0;
  if (!(cores >= 0 && cores <= 1e7) || !(memory >= 0 && memory <= 0x1p60))
    throw Error(Exit::DataErr, fmt::format("{}: \"host.cores\" or \"host.memory_bytes\" is out of range", where));
  return {p.hourly(cores, 0, "", static_cast<std::uint64_t>(memory)),
          fmt::format("{:g} cores, {:.0f} GiB", cores, memory / (1ull << 30))};
}

// rtrain's device text: "cpu (2 BLAS threads)", "cuda (NVIDIA H200)".
Priced price_train(const Json& rec, const ResourcePrices& p, const std::string& where) {
  const std::string device = text_at(rec, "device");
  const double world = number_at(rec, "world_size", where);
  if (!(world >= 1 && world <= 1e7))
    throw Error(Exit::DataErr, fmt::format("{}: \"world_size\" is out of range", where));
  std::smatch m;
  if (device.starts_with("cuda")) {
    std::regex_search(device, m, std::regex(R"(\((.*)\))"));
    return price_gpus(p, world, m.empty() ? "" : m[1].str());
  }
  double threads = 1;
  if (std::regex_search(device, m, std::regex(R"((\d{1,6}) BLAS thread)"))) threads = std::stod(m[1].str());
  const double cores = threads * world;
  return {p.hourly(cores, 0, "", 0), fmt::format("{:g} cores", cores)};
}

}  // namespace

Json perf_record(const Json& rec, const ResourcePrices& prices, const std::string& backend, const std::string& currency,
                 const std::string& where) {
  const std::string schema = text_at(rec, "schema");
  Json out{{"schema", "rkit.cost.perf.v1"}};
  if (schema.starts_with("rkit.bench.v")) {
    check_schema(rec, "rkit.bench", 1, where);
    if (text_at(rec, "schema") != "rkit.bench.v1") return Json();  // suite and compare records
    const Priced priced = price_bench(rec, prices, where);
    const double value = number_at(rec, "median", where);
    std::string unit = text_at(rec, "unit");
    double cost = 0;
    std::string per;
    if (value <= 0) throw Error(Exit::DataErr, fmt::format("{}: \"median\" must be positive", where));
    if (unit == "GFLOP/s" || unit == "TFLOP/s") {
      cost = priced.hourly / (unit == "GFLOP/s" ? value / 1000 : value);
      per = "TFLOP/s-hour";
    } else if (unit == "GB/s" || unit == "MB/s") {
      cost = priced.hourly / (unit == "MB/s" ? value / 1000 : value);
      per = "GB/s-hour";
    } else if (unit == "samples/s") {
      cost = priced.hourly / (value * 3600) * 1e6;
      per = "million samples";
    } else if (unit == "s" || unit == "ms" || unit == "us" || unit == "ns") {
      const double scale = unit == "s" ? 1 : unit == "ms" ? 1e-3 : unit == "us" ? 1e-6 : 1e-9;
      cost = priced.hourly * value * scale / 3600;
      per = "run";
    } else {
      cost = priced.hourly / value;
      per = unit + "-hour";
    }
    out.update(Json{{"source", "rbench"},
                    {"suite", text_at(rec, "suite")},
                    {"metric", text_at(rec, "metric")},
                    {"value", value},
                    {"unit", unit},
                    {"host", rec.value("host", Json::object()).value("hostname", std::string())}});
    out.update(Json{{"backend", backend},
                    {"priced_as", priced.what},
                    {"hourly_cost", priced.hourly},
                    {"cost_per", cost},
                    {"per", per},
                    {"currency", currency}});
    return out;
  }
  if (schema.starts_with("rkit.train.plan.v")) {  // rtrain plan --json: a plan's steps, before running them
    check_schema(rec, "rkit.train.plan", 1, where);
    const Priced priced = price_train(rec, prices, where);
    const double step = number_at(rec, "step_time_s", where), rate = number_at(rec, "samples_per_s", where);
    const double steps = number_at(rec, "steps", where);
    out.update(Json{{"source", "rtrain plan"},
                    {"suite", "rtrain plan"},
                    {"metric", text_at(rec, "strategy")},
                    {"value", step * steps},
                    {"unit", "s"},
                    {"host", text_at(rec, "machine")}});
    out.update(Json{{"backend", backend},
                    {"priced_as", priced.what},
                    {"hourly_cost", priced.hourly},
                    {"cost_per", priced.hourly * step * steps / 3600},
                    {"per", fmt::format("{:g} steps", steps)},
                    {"currency", currency},
                    {"per_million_samples", rate > 0 ? Json(priced.hourly / (rate * 3600) * 1e6) : Json(nullptr)}});
    return out;
  }
  if (schema.starts_with("rkit.train.event.v")) {
    check_schema(rec, "rkit.train.event", 1, where);
    if (text_at(rec, "event") != "summary") return Json();
    const Priced priced = price_train(rec, prices, where);
    const double wall = number_at(rec, "wall_s", where);
    const double rate = number_at(rec, "samples_per_s", where);
    const bool has_target = rec.contains("time_to_target_s");
    const Json target = has_target ? rec["time_to_target_s"] : Json(nullptr);
    // The run to its target when one was asked for (null if it was not reached), else the whole run.
    const Json seconds = has_target ? target : Json(wall);
    out.update(Json{{"source", "rtrain"},
                    {"suite", "rtrain run"},
                    {"metric", has_target ? "time_to_target" : "wall"},
                    {"value", seconds},
                    {"unit", "s"},
                    {"host", ""}});
    out.update(
        Json{{"backend", backend},
             {"priced_as", priced.what},
             {"hourly_cost", priced.hourly},
             {"cost_per", seconds.is_number() ? Json(priced.hourly * seconds.get<double>() / 3600) : Json(nullptr)},
             {"per", has_target ? "run to target" : "run"},
             {"currency", currency},
             {"per_million_samples", rate > 0 ? Json(priced.hourly / (rate * 3600) * 1e6) : Json(nullptr)}});
    return out;
  }
  return Json();
}

int run_perf(const std::vector<std::string>& inputs, const PriceSheet& sheet, const std::string& backend, Format format,
             std::ostream& out) {
  const ResourcePrices& prices = sheet.at(backend);
  auto money4 = [](const Json& v) { return v.is_number() ? fmt::format("{:.4g}", v.get<double>()) : "-"; };
  Printer printer(
      out, format,
      {{"SUITE", "suite"},
       {"METRIC", "metric"},
       {"VALUE", "value", [](const Json& v) { return v.is_number() ? fmt::format("{:.4g}", v.get<double>()) : "-"; }},
       {"UNIT", "unit"},
       {"PRICED_AS", "priced_as"},
       {"HOURLY", "hourly_cost", money4},
       {"COST", "cost_per", money4},
       {"PER", "per"}});
  std::uint64_t printed = 0, skipped = 0;
  for (const std::string& path : inputs) {
    JsonLinesReader in(path);
    Json rec;
    while (in.next(rec)) {
      const Json p = perf_record(rec, prices, backend, sheet.currency, in.where());
      if (p.is_null()) {
        ++skipped;
        continue;
      }
      printer.print(p);
      ++printed;
    }
  }
  printer.finish();
  if (printed == 0)
    throw Error(
        Exit::DataErr,
        fmt::format("no rkit.bench.v1 results or rtrain summaries among the inputs ({} other records)", skipped),
        "give rbench run --json output or rtrain run --json output");
  return 0;
}

}  // namespace rkit::rcost
