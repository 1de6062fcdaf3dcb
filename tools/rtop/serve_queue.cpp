// File: tools/rtop/serve_queue.cpp — rtop serve's bridge to rsub and rcost (serve.hpp): the
// local queue read through `rsub ls --json`, summed per tenant and priced with the price sheet.
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "rkit/error.hpp"
#include "rkit/process.hpp"
#include "serve.hpp"

namespace rkit::rtop {
namespace {

// The first line of `text`, for one-line error messages.
std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

}  // namespace

// --- the queue ------------------------------------------------------------------------

QueueSummary summarize_queue(const std::vector<Json>& jobs, double now_s, const PriceSheet* prices) {
  QueueSummary out;
  out.now_s = now_s;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const Json& j = jobs[i];
    const std::string where = fmt::format("rsub ls record {}", i + 1);
    check_schema(j, "rkit.job", 1, where);
    try {
      const std::string backend = j.at("backend").get<std::string>();
      const std::string state = j.at("state").get<std::string>();
      if (backend != "local" || (state != "PENDING" && state != "RUNNING")) continue;
      TenantQueue& t = out.tenants[j.at("tenant").get<std::string>()];
      const double cpus = j.at("cpus").get<double>(), gpus = j.at("gpus").get<double>();
      if (state == "PENDING") {
        ++t.pending_jobs;
        t.pending_cpus += cpus;
        t.pending_gpus += gpus;
        const double submit = j.at("submit_unix_s").get<double>();
        t.oldest_pending_submit_s = std::min(t.oldest_pending_submit_s.value_or(submit), submit);
        continue;
      }
      ++t.running_jobs;
      t.running_cpus += cpus;
      t.running_gpus += gpus;
      if (!prices) continue;
      const Json& type = j.at("gpu_type");
      const std::uint64_t memory =
          j.at("tasks").get<std::uint64_t>() * j.at("memory_per_task_bytes").get<std::uint64_t>();
      try {
        t.cost_per_hour +=
            prices->at(backend).hourly(cpus, gpus, type.is_null() ? std::string() : type.get<std::string>(), memory);
      } catch (const Error& e) {
        t.cost_known = false;
        out.price_errors.push_back(fmt::format("job {}: {}", j.value("id", "?"), e.what()));
      }
    } catch (const Json::exception& e) {
      throw Error(Exit::DataErr, fmt::format("{}: {}", where, e.what()));
    }
  }
  return out;
}

std::vector<MetricFamily> queue_families(const QueueSummary& queue, const PriceSheet* prices) {
  using T = MetricType;
  MetricFamily jobs{"rkit_queue_jobs",
                    "Jobs in the local rsub queue, by tenant and state (pending includes held jobs).",
                    T::Gauge,
                    {}};
  MetricFamily cpus{"rkit_queue_cpus", "Cores the tenant's jobs ask for (pending) or hold (running).", T::Gauge, {}};
  MetricFamily gpus{"rkit_queue_gpus", "GPUs the tenant's jobs ask for (pending) or hold (running).", T::Gauge, {}};
  MetricFamily age{"rkit_queue_oldest_pending_age_seconds",
                   "Time since the submission of the tenant's oldest pending job; absent when none pends.",
                   T::Gauge,
                   {}};
  MetricFamily cost{"rkit_tenant_cost_per_hour",
                    "What the tenant's running jobs cost per hour at the price sheet's rates, in its currency.",
                    T::Gauge,
                    {}};
  for (const auto& [tenant, t] : queue.tenants) {
    for (const char* state : {"pending", "running"}) {
      const bool p = state[0] == 'p';
      Labels labels{{"tenant", tenant}, {"state", state}};
      jobs.add(p ? t.pending_jobs : t.running_jobs, labels);
      cpus.add(p ? t.pending_cpus : t.running_cpus, labels);
      gpus.add(p ? t.pending_gpus : t.running_gpus, labels);
    }
    if (t.oldest_pending_submit_s)
      age.add(std::max(0.0, queue.now_s - *t.oldest_pending_submit_s), {{"tenant", tenant}});
    if (prices && t.cost_known) cost.add(t.cost_per_hour, {{"tenant", tenant}, {"currency", prices->currency}});
  }
  std::vector<MetricFamily> out;
  for (auto* f : {&jobs, &cpus, &gpus, &age, &cost}) out.push_back(std::move(*f));
  return out;
}

// --- options ----------------------------------------------------------------------------

std::optional<PriceSheet> serve_prices(const Config& config, const std::optional<std::string>& flag) {
  std::string path;
  if (flag) {
    path = *flag;
  } else {
    const std::optional<std::string> configured = configured_price_sheet(config);
    if (!configured) return std::nullopt;
    path = *configured;
  }
  PriceSheet sheet = load_prices(path);
  sheet.at("local");  // the jobs serve prices are local ones: a sheet without them is a mistake
  return sheet;
}

std::optional<std::vector<Json>> Exporter::read_queue(double timeout_s, std::string& error) {
  SpawnOptions so;
  // rsub finds its daemon (and so the job store) as a user's `rsub ls` would, with rtop's
  // configuration; --cached: remote jobs as last read, so that a scrape never waits on
  // Slurm or Kubernetes.
  so.argv = {opt_.rsub_program, "-q", "ls", "--json", "--cached"};
  if (!opt_.rsub_config.empty()) so.argv.insert(so.argv.begin() + 1, {"--config", opt_.rsub_config});
  so.in = Redirect::null();
  so.out = Redirect::pipe();
  so.err = Redirect::pipe();
  RunResult r;
  try {
    r = run(so, timeout_s, 0.5);
  } catch (const Error& e) {
    error = e.what();
    return std::nullopt;
  }
  if (r.timed_out) {
    error = fmt::format("rsub ls: no answer within {:.1f} s", timeout_s);
    return std::nullopt;
  }
  if (!r.status.success()) {
    const std::string why = first_line(r.err);
    error = fmt::format("rsub ls: {}{}", r.status.describe(), why.empty() ? "" : ": " + why);
    return std::nullopt;
  }
  std::vector<Json> jobs;
  std::istringstream lines(r.out);
  std::string line;
  try {
    for (std::size_t n = 1; std::getline(lines, line); ++n)
      if (!line.empty()) jobs.push_back(parse_json(line, fmt::format("rsub ls line {}", n)));
  } catch (const Error& e) {
    error = e.what();
    return std::nullopt;
  }
  return jobs;
}

}  // namespace rkit::rtop
