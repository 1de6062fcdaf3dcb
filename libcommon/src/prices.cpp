// File: rkit/prices.cpp — the price sheet (prices.hpp).
#include "rkit/prices.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class SheetReader {
 public:
  explicit SheetReader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const toml::node& node, const std::string& key, std::string_view why) const {
    throw Error(Exit::DataErr, fmt::format("{}:{}: {} {}", source_, node.source().begin.line, key, why));
  }
  double price(const toml::node& node, const std::string& key) const {
    const auto v = node.value<double>();
    if (!node.is_number() || !v) fail(node, key, "must be a number");
    if (*v < 0) fail(node, key, "must not be negative");
    return *v;
  }
  ResourcePrices backend(const toml::node& node, const std::string& key) const {
    const auto* t = node.as_table();
    if (!t) fail(node, key, "must be a table");
    ResourcePrices p;
    for (const auto& [k, v] : *t) {
      const std::string name = key + "." + std::string(k.str());
      if (k.str() == "cpu_hour") p.cpu_hour = price(v, name);
      else if (k.str() == "memory_gib_hour") p.memory_gib_hour = price(v, name);
      else if (k.str() == "gpu_hour") {
        if (v.is_number()) p.gpu_hour["default"] = price(v, name);
        else if (const auto* gpus = v.as_table())
          for (const auto& [model, value] : *gpus) p.gpu_hour[std::string(model.str())] = price(value, name + "." + std::string(model.str()));
        else fail(v, name, "must be a number or a table of GPU names and prices");
      } else {
        fail(v, name, "is not a price sheet key (cpu_hour, memory_gib_hour, gpu_hour)");
      }
    }
    return p;
  }

 private:
  std::string source_;
};

}  // namespace

double ResourcePrices::gpu_price(const std::string& gpu_model) const {
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

double ResourcePrices::hourly(double cpus, double gpus, const std::string& gpu_model, std::uint64_t memory_bytes) const {
  return cpus * cpu_hour + gpus * gpu_price(gpu_model) + static_cast<double>(memory_bytes) / (1ull << 30) * memory_gib_hour;
}

const ResourcePrices& PriceSheet::at(const std::string& backend) const {
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
      if (!v.is_string()) reader.fail(v, "currency", "must be a string");
      sheet.currency = *v.value<std::string>();
    } else if (k.str() == "backends") {
      const auto* t = v.as_table();
      if (!t) reader.fail(v, "backends", "must be a table");
      for (const auto& [name, prices] : *t)
        sheet.backends[std::string(name.str())] = reader.backend(prices, "backends." + std::string(name.str()));
    } else {
      reader.fail(v, std::string(k.str()), "is not a price sheet key (currency, backends)");
    }
  }
  return sheet;
}

}  // namespace rkit
