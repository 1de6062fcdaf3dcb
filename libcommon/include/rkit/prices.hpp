// File: rkit/prices.hpp
//
// The price sheet: what an hour of a core, a GiB of memory and a GPU costs on each
// backend (local, a Slurm cluster, a Kubernetes site). rsub --backend auto reads it to
// keep a job within its tenant's cost limit; rcost reads it to price usage. The format
// (TOML; examples/prices.toml, rkit(7)):
//
//   currency = "USD"
//   [backends.local]
//   cpu_hour = 0.03            # per core-hour
//   memory_gib_hour = 0.004    # per GiB-hour
//   gpu_hour = { default = 2.0, H100 = 2.5 }   # per GPU-hour; keys match GPU names
//
//   PriceSheet sheet = load_prices("prices.toml");
//   double usd = sheet.at("slurm").hourly(8, 2, "H100", 64ull << 30) * hours;
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace rkit {

struct ResourcePrices {
  double cpu_hour = 0;
  double memory_gib_hour = 0;
  std::map<std::string, double> gpu_hour;  // GPU name part → price; "default" for the rest

  // A GPU's hourly price: the longest key found in `gpu_model` (case-insensitive), else
  // "default", else 0.
  double gpu_price(const std::string& gpu_model) const;
  // What holding these resources costs per hour.
  double hourly(double cpus, double gpus, const std::string& gpu_model, std::uint64_t memory_bytes) const;
};

struct PriceSheet {
  std::string currency = "USD";
  std::map<std::string, ResourcePrices> backends;
  // Error(DataErr) naming the sheet when the backend has no prices.
  const ResourcePrices& at(const std::string& backend) const;
  std::string source;  // the file it came from
};

// Reads a price sheet. Error(NoInput) when it cannot be read; Error(DataErr) naming
// file:line for a value of the wrong type or a negative price, or an unknown key.
PriceSheet load_prices(const std::string& path);

}  // namespace rkit
