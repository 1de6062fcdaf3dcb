// File: tools/rcost/focus.cpp — the report as FinOps FOCUS CSV (output.hpp).
//
// Follows FOCUS 1.0 (the FinOps Open Cost and Usage Specification, focus.finops.org):
// its column names, allowed values (ChargeCategory "Usage", ChargeFrequency
// "Usage-Based", PricingCategory "Standard" or "Dynamic", ServiceCategory "Compute"),
// date/times in ISO 8601 UTC ("2026-11-01T00:00:00Z"), charge periods with an inclusive
// start and exclusive end, null as an empty field, Tags as a JSON object, and custom
// columns after the FOCUS ones with an x_ prefix. Numbers are plain decimals (no
// exponent, no thousands separator), unrounded, so that the rows add up to the report.
//
// Rows:
//   - usage: one per job × resource it held (GPU, CPU, memory; a zero quantity has
//     none) × UTC day of its run within the window, priced as report.cpp prices it:
//     ConsumedQuantity = quantity × hours, BilledCost = ConsumedQuantity × the
//     effective rate of job_rates(), ListCost = BilledCost × list_factor. Their
//     BilledCost adds up to the report's total cost;
//   - idle: one per sampled host × day × resource for its unallocated capacity
//     (x_ChargeKind "idle", no SubAccount), from make_report() on that host's samples
//     and jobs alone (every figure of a host's capacity depends only on them). With
//     them the BilledCost adds up to the report's total_cost (cost + idle share),
//     whichever way idle capacity is shared.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <unordered_map>

#include "output.hpp"
#include "rkit/error.hpp"
#include "rkit/printer.hpp"

namespace rkit::rcost {

namespace {

constexpr double kGiB = 1ull << 30;
// Quantities below this (unit-hours) are rounding noise of differences: no row.
constexpr double kNoise = 1e-9;

constexpr const char* kColumns[] = {"BilledCost",
                                    "EffectiveCost",
                                    "ListCost",
                                    "ContractedCost",
                                    "BillingCurrency",
                                    "BillingAccountId",
                                    "BillingAccountName",
                                    "BillingPeriodStart",
                                    "BillingPeriodEnd",
                                    "ChargePeriodStart",
                                    "ChargePeriodEnd",
                                    "ChargeCategory",
                                    "ChargeClass",
                                    "ChargeDescription",
                                    "ChargeFrequency",
                                    "ConsumedQuantity",
                                    "ConsumedUnit",
                                    "PricingQuantity",
                                    "PricingUnit",
                                    "PricingCategory",
                                    "ListUnitPrice",
                                    "ContractedUnitPrice",
                                    "ProviderName",
                                    "PublisherName",
                                    "InvoiceIssuerName",
                                    "RegionId",
                                    "RegionName",
                                    "ResourceId",
                                    "ResourceName",
                                    "ResourceType",
                                    "ServiceCategory",
                                    "ServiceName",
                                    "SkuId",
                                    "SkuPriceId",
                                    "SubAccountId",
                                    "SubAccountName",
                                    "Tags",
                                    "x_ChargeKind",
                                    "x_User",
                                    "x_Project",
                                    "x_Node"};

enum class Resource { Gpu, Cpu, Memory };

struct ResourceText {
  const char* type;  // ResourceType
  const char* unit;  // ConsumedUnit and PricingUnit
  const char* sku;   // the resource part of SkuId
};

ResourceText text_of(Resource r) {
  switch (r) {
    case Resource::Gpu: return {"GPU", "GPU-Hours", "gpu"};
    case Resource::Cpu: return {"CPU", "Core-Hours", "cpu"};
    default: return {"Memory", "GiB-Hours", "memory"};
  }
}

// A decimal without exponent: up to 10 decimals, trailing zeros dropped ("12.5", "0").
std::string decimal(double v) {
  if (!std::isfinite(v)) return "";
  std::string s = fmt::format("{:.10f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

// "PricingCategory": spot prices move, the others are the sheet's agreed rate.
const char* pricing_category(const ResourcePrices& p) { return p.market == "spot" ? "Dynamic" : "Standard"; }

// The fields of one FOCUS row that differ between rows.
struct Charge {
  double billed = 0, list_factor = 1, quantity = 0, rate = 0;  // rate: effective, per unit-hour
  double from = 0, to = 0;
  Resource resource = Resource::Gpu;
  std::string backend, gpu_type, description, resource_id, tenant, user, project, node, state;
  const char* pricing = "Standard";
  const char* kind = "usage";
};

class Writer {
 public:
  Writer(std::ostream& out, const std::string& currency) : out_(out), currency_(currency) {
    out_ << fmt::format("{}\n", fmt::join(kColumns, ","));
  }
  ~Writer() { flush(); }

  void row(const Charge& c) {
    const ResourceText rt = text_of(c.resource);
    const auto [month_start, month_end] = month_of(c.from);
    std::string sku = c.backend + "/" + rt.sku;
    if (c.resource == Resource::Gpu && !c.gpu_type.empty()) sku += "/" + c.gpu_type;
    Json tags = Json::object();
    auto tag = [&](const char* key, const std::string& v) {
      if (!v.empty()) tags[key] = v;
    };
    tag("user", c.user);
    tag("project", c.project);
    tag("node", c.node);
    tag("state", c.state);
    const std::string billed = decimal(c.billed), quantity = decimal(c.quantity);
    const std::string fields[] = {
        billed,                                                     // BilledCost
        billed,                                                     // EffectiveCost: no commitment to amortise
        decimal(c.billed * c.list_factor),                          // ListCost
        billed,                                                     // ContractedCost
        currency_,                                                  // BillingCurrency
        "rkit",                                                     // BillingAccountId
        "rkit",                                                     // BillingAccountName
        format_iso(month_start),                                    // BillingPeriodStart
        format_iso(month_end),                                      // BillingPeriodEnd
        format_iso(c.from),                                         // ChargePeriodStart
        format_iso(c.to),                                           // ChargePeriodEnd
        "Usage",                                                    // ChargeCategory
        "",                                                         // ChargeClass: null, not a correction
        c.description,                                              // ChargeDescription
        "Usage-Based",                                              // ChargeFrequency
        quantity,                                                   // ConsumedQuantity
        rt.unit,                                                    // ConsumedUnit
        quantity,                                                   // PricingQuantity
        rt.unit,                                                    // PricingUnit
        c.pricing,                                                  // PricingCategory
        decimal(c.rate * c.list_factor),                            // ListUnitPrice
        decimal(c.rate),                                            // ContractedUnitPrice
        "rkit",                                                     // ProviderName
        "rkit",                                                     // PublisherName
        "rkit",                                                     // InvoiceIssuerName
        c.backend,                                                  // RegionId
        c.backend,                                                  // RegionName
        c.resource_id,                                              // ResourceId
        c.resource_id,                                              // ResourceName
        rt.type,                                                    // ResourceType
        "Compute",                                                  // ServiceCategory
        "rkit " + c.backend,                                        // ServiceName
        sku,                                                        // SkuId
        sku,                                                        // SkuPriceId: one price per SKU in a sheet
        c.tenant,                                                   // SubAccountId
        c.tenant,                                                   // SubAccountName
        tags.dump(-1, ' ', false, Json::error_handler_t::replace),  // Tags
        c.kind,                                                     // x_ChargeKind
        c.user,                                                     // x_User
        c.project,                                                  // x_Project
        c.node,                                                     // x_Node
    };
    static_assert(std::size(fields) == std::size(kColumns));
    for (std::size_t i = 0; i < std::size(fields); ++i) {
      if (i) buffer_ += ',';
      buffer_ += Printer::csv_quote(fields[i]);
    }
    buffer_ += '\n';
    if (buffer_.size() > (1u << 20)) flush();
  }

  void flush() {
    out_ << buffer_;
    buffer_.clear();
  }

 private:
  std::ostream& out_;
  std::string currency_;
  std::string buffer_;
};

// The samples and jobs of each sampled host, by index.
struct ByHost {
  std::vector<std::uint32_t> samples, jobs;
};

std::unordered_map<std::uint32_t, ByHost> index_by_host(const Dataset& data) {
  std::unordered_map<std::uint32_t, ByHost> out;
  for (std::uint32_t i = 0; i < data.samples.size(); ++i) out[data.samples[i].host].samples.push_back(i);
  for (std::uint32_t i = 0; i < data.jobs.size(); ++i)
    if (auto it = out.find(data.jobs[i].node); it != out.end()) it->second.jobs.push_back(i);
  return out;
}

// One host's samples and the jobs that ran on it, as a Dataset of their own (their
// index ranges into units, utils and gpu_utils rebased).
Dataset host_dataset(const Dataset& data, const ByHost& host) {
  Dataset d;
  d.strings = data.strings;  // ids stay valid
  // Appends `count` items of `from` at `at` to `to`; returns where they are in `to`.
  auto copy_range = [](auto& to, const auto& from, std::uint32_t at, std::uint32_t count) {
    const auto there = static_cast<std::uint32_t>(to.size());
    to.insert(to.end(), from.begin() + at, from.begin() + at + count);
    return there;
  };
  for (std::uint32_t i : host.samples) {
    const Sample& s = data.samples[i];
    Sample c = s;
    c.cpus_at = copy_range(d.utils, data.utils, s.cpus_at, s.cpus_count);
    c.gpus_at = copy_range(d.gpu_utils, data.gpu_utils, s.gpus_at, s.gpus_count);
    d.samples.push_back(c);
  }
  for (std::uint32_t i : host.jobs) {
    const Job& j = data.jobs[i];
    Job c = j;
    c.pus_at = copy_range(d.units, data.units, j.pus_at, j.pus_count);
    c.gpus_at = copy_range(d.units, data.units, j.gpus_at, j.gpus_count);
    d.jobs.push_back(std::move(c));
  }
  return d;
}

std::string count_text(double v) { return fmt::format("{:g}", v); }

}  // namespace

void write_focus(std::ostream& out, const Dataset& data, const ReportOptions& opt) {
  if (!opt.prices) throw Error(Exit::Software, "write_focus: no price sheet");
  // The window exactly as the report has it (--since, else its first record).
  ReportOptions by_day = opt;
  by_day.keys = {Key::Day};
  by_day.share_idle = ShareIdle::None;
  by_day.budgets.clear();
  const Report whole = make_report(data, by_day);  // for its window only
  const double since = whole.since, until = whole.until;
  by_day.since = since;

  const auto hosts = host_facts(data, opt.capacity_backend);
  Writer w(out, opt.prices->currency);
  const Strings& names = data.strings;

  // Usage: job × day × resource.
  struct Priced {
    Rates rates;
    const char* pricing;
  };
  std::unordered_map<std::uint64_t, Priced> cache;
  Charge c;
  for (std::size_t index = 0; index < data.jobs.size(); ++index) {
    const Job& j = data.jobs[index];
    if (!known(j.start)) continue;
    const double a = std::max(j.start, since);
    const double b = std::min(known(j.end) ? j.end : until, until);
    if (!(b > a)) continue;
    std::uint32_t model = j.gpu_type;
    if (!model)
      if (auto it = hosts.find(j.node); it != hosts.end()) model = it->second.model;
    const std::uint64_t key = (static_cast<std::uint64_t>(j.backend) << 32) | model;
    auto it = cache.find(key);
    if (it == cache.end()) {
      const std::string& backend = names.name(j.backend);
      it = cache
               .emplace(key, Priced{job_rates(*opt.prices, backend, names.name(model)),
                                    pricing_category(opt.prices->at(backend))})
               .first;
    }
    const Priced& p = it->second;
    c.backend = names.name(j.backend);
    c.gpu_type = names.name(model);
    c.list_factor = p.rates.list_factor;
    c.pricing = p.pricing;
    c.kind = "usage";
    c.resource_id = data.job_id(index);
    c.tenant = names.name(j.tenant);
    c.user = names.name(j.user);
    c.project = names.name(j.project);
    c.node = names.name(j.node);
    c.state = names.name(j.state);
    const std::string on = " on " + c.backend + ", job " + c.resource_id;
    const struct {
      Resource r;
      double quantity, rate;
      std::string what;
    } held[] = {
        {Resource::Gpu, j.gpus, p.rates.gpu,
         count_text(j.gpus) + " GPU" + (c.gpu_type.empty() ? "" : " (" + c.gpu_type + ")")},
        {Resource::Cpu, j.cpus, p.rates.cpu, count_text(j.cpus) + (j.cpus == 1 ? " core" : " cores")},
        {Resource::Memory, j.memory_bytes / kGiB, p.rates.memory_gib,
         fmt::format("{:.4g} GiB memory", j.memory_bytes / kGiB)},
    };
    for (double from = a; from < b;) {
      const double to = std::min(b, (std::floor(from / kDay) + 1) * kDay);
      const double hours = (to - from) / 3600;
      c.from = from;
      c.to = to;
      for (const auto& h : held) {
        if (!(h.quantity > 0)) continue;
        c.resource = h.r;
        c.quantity = h.quantity * hours;
        c.rate = h.rate;
        c.billed = c.quantity * h.rate;
        c.description = h.what + on;
        w.row(c);
      }
      from = to;
    }
  }

  // Idle: unallocated capacity, host × day × resource.
  const auto by_host = index_by_host(data);
  std::vector<std::pair<std::string, std::uint32_t>> sampled;  // by name, for a stable order
  for (const auto& [host, facts] : hosts) sampled.emplace_back(names.name(host), host);
  std::sort(sampled.begin(), sampled.end());
  for (const auto& [host_name, host] : sampled) {
    const HostFacts& facts = hosts.at(host);
    const Dataset one = host_dataset(data, by_host.at(host));
    const Report r = make_report(one, by_day);
    const std::string model = names.name(facts.model);
    const Rates rates = job_rates(*opt.prices, facts.backend, model);
    Charge idle;
    idle.backend = facts.backend;
    idle.gpu_type = model;
    idle.list_factor = rates.list_factor;
    idle.pricing = pricing_category(opt.prices->at(facts.backend));
    idle.kind = "idle";
    idle.resource_id = host_name;
    idle.node = host_name;
    for (const PeriodCapacity& p : r.periods) {
      const auto row =
          std::find_if(r.rows.begin(), r.rows.end(), [&](const Row& x) { return x.idle_row && x.keys[0] == p.label; });
      const double pool = row == r.rows.end() ? 0 : row->idle_cost;
      idle.from = p.start;
      idle.to = p.end;
      const double memory_cost = pool - p.gpu.unallocated_cost - p.cpu.unallocated_cost;
      const struct {
        Resource r;
        double quantity, cost, rate;
        const char* what;
      } parts[] = {
          {Resource::Gpu, p.gpu.unallocated, p.gpu.unallocated_cost, rates.gpu, "GPU"},
          {Resource::Cpu, p.cpu.unallocated, p.cpu.unallocated_cost, rates.cpu, "CPU"},
          // Memory's capacity is not given per period: its hours follow from its cost.
          {Resource::Memory, rates.memory_gib > 0 ? memory_cost / rates.memory_gib : 0, memory_cost, rates.memory_gib,
           "memory"},
      };
      for (const auto& part : parts) {
        if (!(part.quantity > kNoise)) continue;
        idle.resource = part.r;
        idle.quantity = part.quantity;
        idle.rate = part.rate;
        idle.billed = part.cost;
        idle.description = fmt::format("Unallocated {} capacity of {} on {}", part.what, host_name, facts.backend);
        w.row(idle);
      }
    }
  }
  w.flush();
}

}  // namespace rkit::rcost
