// File: rkit/prices.cpp — the price sheet (prices.hpp).
#include "rkit/prices.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string_view>
#include <vector>

#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The sheet's typed reads: TomlReader's ("backends.a.cpu_hour must be a number"), and a
// price's own.
class SheetReader : public TomlReader {
 public:
  explicit SheetReader(const std::string& source) : TomlReader(source) {}

  double price(const toml::node& node, const std::string& key) const {
    const double v = number(node, key);
    if (v < 0) fail(node, key, "must not be negative");
    return v;
  }
  double positive(const toml::node& node, const std::string& key) const {
    const double v = number(node, key);
    if (v <= 0) fail(node, key, "must be more than 0");
    return v;
  }
  // { purchase_price = 35000, depreciation_years = 4, power_w = 700, units = 1 }
  DerivedPrice derived(const toml::node& node, const std::string& key) const {
    DerivedPrice d;
    bool has_price = false, has_years = false;
    for (const auto& [k, v] : *node.as_table()) {
      const std::string name = key + "." + std::string(k.str());
      if (k.str() == "purchase_price") {
        d.purchase_price = price(v, name);
        has_price = true;
      } else if (k.str() == "depreciation_years") {
        d.depreciation_years = positive(v, name);
        has_years = true;
      } else if (k.str() == "power_w") {
        d.power_w = price(v, name);
      } else if (k.str() == "units") {
        d.units = positive(v, name);
      } else {
        fail(v, name, "is not a derived price key (purchase_price, depreciation_years, power_w, units)");
      }
    }
    if (!has_price) fail(node, key, "needs purchase_price");
    if (!has_years) fail(node, key, "needs depreciation_years");
    return d;
  }
  // A price as a number, or derived (its hourly value is filled in once the backend's
  // electricity_per_kwh and pue are known).
  double rate(const toml::node& node, const std::string& key, const std::string& derived_key, ResourcePrices& p) const {
    if (!node.is_table()) return price(node, key);
    p.derived[derived_key] = derived(node, key);
    return 0;
  }
  ResourcePrices backend(const toml::node& node, const std::string& key) const {
    const toml::table* t = &table(node, key);
    ResourcePrices p;
    const toml::node* market = nullptr;
    const toml::node* spot_discount = nullptr;
    for (const auto& [k, v] : *t) {
      const std::string name = key + "." + std::string(k.str());
      if (k.str() == "cpu_hour")
        p.cpu_hour = rate(v, name, "cpu_hour", p);
      else if (k.str() == "memory_gib_hour")
        p.memory_gib_hour = rate(v, name, "memory_gib_hour", p);
      else if (k.str() == "gpu_hour") {
        if (v.is_number() || is_derived(v))
          p.gpu_hour["default"] = rate(v, name, "gpu_hour.default", p);
        else if (const auto* gpus = v.as_table())
          for (const auto& [model, value] : *gpus) {
            const std::string m(model.str());
            p.gpu_hour[m] = rate(value, name + "." + m, "gpu_hour." + m, p);
          }
        else
          fail(v, name, "must be a number or a table of GPU names and prices");
      } else if (k.str() == "market") {
        const auto m = v.value<std::string>();
        if (!v.is_string() || (*m != "on_premises" && *m != "on_demand" && *m != "spot"))
          fail(v, name, "must be \"on_premises\", \"on_demand\" or \"spot\"");
        p.market = *m;
        market = &v;
      } else if (k.str() == "spot_discount") {
        p.spot_discount = number(v, name);
        if (p.spot_discount < 0 || p.spot_discount >= 1) fail(v, name, "must be at least 0 and less than 1");
        spot_discount = &v;
      } else if (k.str() == "electricity_per_kwh") {
        p.electricity_per_kwh = price(v, name);
      } else if (k.str() == "pue") {
        p.pue = number(v, name);
        if (p.pue < 1) fail(v, name, "must be at least 1");
      } else {
        fail(v, name,
             "is not a price sheet key (cpu_hour, memory_gib_hour, gpu_hour, market, spot_discount, "
             "electricity_per_kwh, pue)");
      }
    }
    if (p.market == "spot" && !spot_discount)
      fail(*market, key + ".market", "is \"spot\" but spot_discount is not given");
    if (p.market != "spot" && spot_discount)
      fail(*spot_discount, key + ".spot_discount", "is only for market = \"spot\"");
    for (const auto& [k, d] : p.derived) {
      const double hourly = d.hourly(p.electricity_per_kwh, p.pue);
      if (k == "cpu_hour")
        p.cpu_hour = hourly;
      else if (k == "memory_gib_hour")
        p.memory_gib_hour = hourly;
      else
        p.gpu_hour[k.substr(std::string_view("gpu_hour.").size())] = hourly;
    }
    return p;
  }

 private:
  // gpu_hour = { purchase_price = ..., ... } is one derived price, not a table of GPUs.
  static bool is_derived(const toml::node& node) {
    const auto* t = node.as_table();
    if (!t) return false;
    for (const char* k : {"purchase_price", "depreciation_years", "power_w", "units"})
      if (t->contains(k)) return true;
    return false;
  }
};

}  // namespace

double DerivedPrice::hourly(double electricity_per_kwh, double pue) const {
  return (purchase_price / (depreciation_years * kHoursPerYear) + power_w / 1000 * pue * electricity_per_kwh) / units;
}

std::string DerivedPrice::text(double electricity_per_kwh, double pue) const {
  std::string s = fmt::format("{} / ({} y × {} h)", purchase_price, depreciation_years, kHoursPerYear);
  if (power_w > 0) s += fmt::format(" + {} kW × {} PUE × {}/kWh", power_w / 1000, pue, electricity_per_kwh);
  if (units != 1) s = fmt::format("({}) / {} units", s, units);
  return s;
}

double ResourcePrices::effective_factor() const { return market == "spot" ? 1 - spot_discount : 1; }

double ResourcePrices::list_gpu_price(const std::string& gpu_model) const {
  const std::string model = lower(gpu_model);
  const std::pair<const std::string, double>* best = nullptr;
  for (const auto& entry : gpu_hour)
    if (entry.first != "default" && model.find(lower(entry.first)) != std::string::npos &&
        (!best || entry.first.size() > best->first.size()))
      best = &entry;
  if (best) return best->second;
  const auto it = gpu_hour.find("default");
  return it == gpu_hour.end() ? 0 : it->second;
}

double ResourcePrices::gpu_price(const std::string& gpu_model) const {
  return list_gpu_price(gpu_model) * effective_factor();
}

double ResourcePrices::list_hourly(double cpus, double gpus, const std::string& gpu_model,
                                   std::uint64_t memory_bytes) const {
  return cpus * cpu_hour + gpus * list_gpu_price(gpu_model) +
         static_cast<double>(memory_bytes) / (1ull << 30) * memory_gib_hour;
}

double ResourcePrices::hourly(double cpus, double gpus, const std::string& gpu_model,
                              std::uint64_t memory_bytes) const {
  return list_hourly(cpus, gpus, gpu_model, memory_bytes) * effective_factor();
}

std::string ResourcePrices::derivation(const std::string& key) const {
  const auto it = derived.find(key);
  return it == derived.end() ? "as given" : it->second.text(electricity_per_kwh, pue);
}

const ResourcePrices& PriceSheet::at(const std::string& backend) const {
  static const ResourcePrices kNone;
  if (!priced) return kNone;
  const auto it = backends.find(backend);
  if (it == backends.end())
    throw Error(Exit::DataErr, fmt::format("price sheet {}: no prices for backend \"{}\"", source, backend),
                fmt::format("add a [backends.{}] table", backend));
  return it->second;
}

PriceSheet load_prices(const std::string& path) {
  const std::string source = input_name(path);
  const toml::table root = parse_toml(read_file(path, 1 << 20), source, Exit::DataErr);
  const SheetReader reader(source);
  PriceSheet sheet;
  sheet.source = source;
  for (const auto& [k, v] : root) {
    if (k.str() == "currency") {
      sheet.currency = reader.string(v, "currency");
    } else if (k.str() == "backends") {
      for (const auto& [name, prices] : reader.table(v, "backends"))
        sheet.backends[std::string(name.str())] = reader.backend(prices, "backends." + std::string(name.str()));
    } else {
      reader.fail(v, std::string(k.str()), "is not a price sheet key (currency, backends)");
    }
  }
  return sheet;
}

std::vector<PriceLine> price_lines(const PriceSheet& sheet) {
  std::vector<PriceLine> lines;
  for (const auto& [backend, p] : sheet.backends) {
    const auto add = [&](const std::string& resource, const std::string& gpu, const std::string& unit, double list) {
      const std::string key = gpu.empty() ? resource : resource + "." + gpu;
      lines.push_back({backend, resource, gpu, p.market, unit, p.derivation(key), list, list * p.effective_factor()});
    };
    add("cpu_hour", "", "core-hour", p.cpu_hour);
    add("memory_gib_hour", "", "GiB-hour", p.memory_gib_hour);
    for (const auto& [gpu, list] : p.gpu_hour) add("gpu_hour", gpu, "GPU-hour", list);
  }
  return lines;
}

std::optional<std::string> configured_price_sheet(const Config& config) {
  std::optional<std::string> v = config.get_string("rcost.prices");
  if (!v) v = config.get_string("rsub.auto.prices");
  if (!v) return std::nullopt;
  std::filesystem::path p = *v;
  if (p.is_relative() && !config.path.empty()) p = std::filesystem::path(config.path).parent_path() / p;
  return p.string();
}

}  // namespace rkit
