// File: rkit/prices.hpp
//
// The price sheet: what an hour of a core, a GiB of memory and a GPU costs on each
// backend (local, a Slurm cluster, a Kubernetes site). rsub --backend auto reads it to
// keep a job within its tenant's cost limit; rcost reads it to price usage. The format
// (TOML; examples/prices.toml, rkit(7)):
//
//   currency = "USD"
//   [backends.local]
//   market = "on_premises"     # or "on_demand", "spot" (then spot_discount = 0.6)
//   electricity_per_kwh = 0.12 # for derived prices; pue = 1.4 scales the power draw
//   cpu_hour = 0.03            # per core-hour
//   memory_gib_hour = 0.004    # per GiB-hour
//   gpu_hour = { default = 2.0, H100 = 2.5 }   # per GPU-hour; keys match GPU names
//   # Any price may be derived from what the hardware cost and draws instead:
//   #   H200 = { purchase_price = 35000, depreciation_years = 4, power_w = 700, units = 1 }
//
//   PriceSheet sheet = load_prices("prices.toml");
//   double usd = sheet.at("slurm").hourly(8, 2, "H100", 64ull << 30) * hours;
//
// Prices written in the sheet are list prices; on a spot market what is billed (the
// effective price) is list × (1 − spot_discount). hourly() and gpu_price() are
// effective; list_hourly() and list_gpu_price() are not.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rkit {

struct Config;

// Hours in a (depreciation) year: 365 × 24.
inline constexpr double kHoursPerYear = 8760;

// An on-premises price derived from the hardware: its purchase price spread over its
// depreciation years, plus its power draw at the site's PUE and electricity price,
// shared among `units` (cores of a server, GPUs of a box; default 1).
struct DerivedPrice {
  double purchase_price = 0;      // currency
  double depreciation_years = 0;  // > 0
  double power_w = 0;             // watts drawn
  double units = 1;               // > 0

  // (purchase_price / (depreciation_years × 8760) + power_w / 1000 × pue × electricity_per_kwh) / units
  double hourly(double electricity_per_kwh, double pue) const;
  // How hourly() comes about, e.g. "35000 / (4 y × 8760 h) + 0.7 kW × 1.4 PUE × 0.12/kWh",
  // wrapped as "(...) / 64 units" when units is not 1.
  std::string text(double electricity_per_kwh, double pue) const;
};

struct ResourcePrices {
  // List prices (as written, or derived); what is billed is these × effective_factor().
  double cpu_hour = 0;
  double memory_gib_hour = 0;
  std::map<std::string, double> gpu_hour;  // GPU name part → price; "default" for the rest

  std::string market = "on_premises";  // "on_premises", "on_demand" or "spot"
  double spot_discount = 0;            // spot only: 0 ≤ d < 1
  double electricity_per_kwh = 0;      // for derived prices
  double pue = 1;                      // power usage effectiveness, ≥ 1

  // The prices given as a DerivedPrice, keyed "cpu_hour", "memory_gib_hour" or
  // "gpu_hour.KEY" (KEY as in gpu_hour, "default" for a single number). Their hourly
  // value is already in the fields above.
  std::map<std::string, DerivedPrice> derived;

  // 1 − spot_discount on the spot market, else 1.
  double effective_factor() const;
  // A GPU's hourly list price: the longest key found in `gpu_model` (case-insensitive),
  // else "default", else 0.
  double list_gpu_price(const std::string& gpu_model) const;
  // The same, as billed: list_gpu_price × effective_factor().
  double gpu_price(const std::string& gpu_model) const;
  // What holding these resources costs per hour at list (on-demand) prices.
  double list_hourly(double cpus, double gpus, const std::string& gpu_model, std::uint64_t memory_bytes) const;
  // What holding these resources costs per hour, as billed: list_hourly × effective_factor().
  double hourly(double cpus, double gpus, const std::string& gpu_model, std::uint64_t memory_bytes) const;
  // How the price under `key` (as in `derived`) comes about: DerivedPrice::text, or
  // "as given".
  std::string derivation(const std::string& key) const;
};

struct PriceSheet {
  std::string currency = "USD";
  std::map<std::string, ResourcePrices> backends;
  // Error(DataErr) naming the sheet when the backend has no prices; every backend's are
  // 0 in a sheet that is not `priced`.
  const ResourcePrices& at(const std::string& backend) const;
  std::string source;  // the file it came from
  // False: there is no sheet (rcost report then shows hours and leaves money out).
  bool priced = true;
};

// One rate of one backend, for showing the sheet (rcost).
struct PriceLine {
  std::string backend;
  std::string resource;    // "cpu_hour", "memory_gib_hour", "gpu_hour"
  std::string gpu;         // the gpu_hour key ("default", "H100", ...); "" for the others
  std::string market;      // as ResourcePrices::market
  std::string unit;        // "core-hour", "GiB-hour", "GPU-hour"
  std::string derivation;  // ResourcePrices::derivation
  double list = 0;         // per unit, as in the sheet
  double effective = 0;    // per unit, as billed
};

// Every rate of every backend: backends by name; in each, cpu_hour, memory_gib_hour
// (both even when not given, then 0), then the gpu_hour keys by name.
std::vector<PriceLine> price_lines(const PriceSheet& sheet);

// Reads a price sheet. Error(NoInput) when it cannot be read; Error(DataErr) naming
// file:line for a value of the wrong type, out of range (a negative price, zero
// depreciation years, a pue under 1, a spot_discount outside [0, 1)), missing
// (spot_discount on the spot market, purchase_price or depreciation_years in a derived
// price), or not allowed (spot_discount off the spot market), or an unknown key.
PriceSheet load_prices(const std::string& path);

// The price sheet the configuration names for reports and metrics: rcost.prices, else
// rsub.auto.prices (the sheet rsub --backend auto reads); a relative path is taken
// from the configuration file's folder. nullopt when neither is set.
std::optional<std::string> configured_price_sheet(const Config& config);

}  // namespace rkit
