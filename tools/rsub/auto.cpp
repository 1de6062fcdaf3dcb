// File: rsub/auto.cpp — where --backend auto sends a job (commands.hpp, place_job).
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "commands.hpp"
#include "rkit/error.hpp"
#include "rkit/prices.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {

namespace {

// "1 core", "2 cores".
std::string count(long n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); }

struct LocalFit {
  enum Verdict { Now, Later, Never } verdict;
  std::string why;
};

// Whether the local machine runs the job at once: nothing pending there and enough free
// cores and GPUs now; Never when it is too big for the machine.
LocalFit local_fit(Context& ctx, Store& store, const JobSpec& spec) {
  long cpus = 0, gpus = 0;
  if (auto cap = store.meta("capacity")) {
    const Json c = parse_json(*cap, "capacity");
    cpus = c.value("cpus", 0L);
    gpus = c.value("gpus", 0L);
  } else {
    const Machine m = local_machine(ctx.settings);
    cpus = static_cast<long>(m.topology.cores.size());
    gpus = static_cast<long>(m.topology.gpus.size());
  }
  const Resources& r = spec.resources;
  const long need_cpus = long{r.tasks} * r.cpus_per_task, need_gpus = long{r.tasks} * r.gpus_per_task;
  if (r.nodes > 1) return {LocalFit::Never, fmt::format("the job asks for {} nodes; this is one machine", r.nodes)};
  if (need_cpus > cpus || need_gpus > gpus)
    return {LocalFit::Never, fmt::format("too big: needs {} and {}, the machine has {} and {}", count(need_cpus, "core"),
                                         count(need_gpus, "GPU"), cpus, gpus)};
  long used_cpus = 0, used_gpus = 0, pending = 0;
  store.each_job({}, [&](const JobRecord& j) {
    if (j.backend != "local") return;
    if (j.state == JobState::Pending) pending += !j.held;
    else {
      used_cpus += long{j.spec.resources.tasks} * j.spec.resources.cpus_per_task;
      used_gpus += long{j.spec.resources.tasks} * j.spec.resources.gpus_per_task;
    }
  });
  if (pending > 0) return {LocalFit::Later, fmt::format("{} job(s) already wait there", pending)};
  if (need_cpus > cpus - used_cpus || need_gpus > gpus - used_gpus)
    return {LocalFit::Later, fmt::format("busy: needs {} and {}, {} and {} are free now", count(need_cpus, "core"),
                                         count(need_gpus, "GPU"), cpus - used_cpus, gpus - used_gpus)};
  return {LocalFit::Now,
          fmt::format("fits now ({} of {} cores and {} of {} GPUs free)", cpus - used_cpus, cpus, gpus - used_gpus, gpus)};
}

}  // namespace

Placement place_job(Context& ctx, const JobSpec& spec) {
  Placement p;
  Store& store = ctx.store();
  // A job waits only for jobs of its own backend: its dependencies decide.
  for (const Dependency& d : spec.depends) {
    const auto found = store.resolve(d.remote.empty() ? std::to_string(d.job) : d.remote);
    if (found.empty()) continue;  // submit names the unknown job
    p.backend = found.front().backend;
    p.reason = fmt::format("it depends on job {}, which runs there", found.front().display_id());
    p.considered.push_back(p.backend + ": " + p.reason);
    return p;
  }
  const LocalFit local = local_fit(ctx, store, spec);
  p.considered.push_back("local: " + local.why);
  if (local.verdict == LocalFit::Now) {
    p.backend = "local";
    p.reason = local.why;
    return p;
  }

  std::optional<PriceSheet> prices;
  if (!ctx.settings.prices_path.empty()) {
    std::filesystem::path path = ctx.settings.prices_path;
    if (path.is_relative() && !ctx.settings.config_path.empty())
      path = std::filesystem::path(ctx.settings.config_path).parent_path() / path;
    prices = load_prices(path.string());
  }
  const auto limit = ctx.settings.max_job_cost.find(spec.tenant);
  if (limit != ctx.settings.max_job_cost.end() && !prices)
    throw Error(Exit::Config, fmt::format("rsub.tenants.{}.max_job_cost needs a price sheet to price jobs with", spec.tenant),
                "set rsub.auto.prices (rsub(1), BACKENDS)");
  const Resources& r = spec.resources;
  const double hours = spec.time_limit_s.value_or(3600) / 3600;
  std::optional<double> best_wait;
  for (const std::string& name : ctx.settings.auto_backends) {
    const BackendConfig config = backend_config(ctx, name);  // asked as the caller, not as root
    std::string cost_text;
    if (prices) {
      const double cost = prices->at(name).hourly(static_cast<double>(r.tasks) * r.cpus_per_task, static_cast<double>(r.tasks) * r.gpus_per_task,
                                                  r.gpu_type, r.memory_bytes * static_cast<std::uint64_t>(r.tasks)) *
                          hours;
      cost_text = fmt::format("{:.2f} {} for {}{}", cost, prices->currency, format_duration(hours * 3600),
                              spec.time_limit_s ? "" : " (no time limit: one hour assumed)");
      if (limit != ctx.settings.max_job_cost.end() && cost > limit->second) {
        p.considered.push_back(fmt::format("{}: over tenant {}'s limit of {:.2f} {} ({})", name, spec.tenant,
                                           limit->second, prices->currency, cost_text));
        continue;
      }
    }
    std::optional<double> wait;
    try {
      wait = make_backend(config)->expected_wait(spec);  // also: can it take the job at all?
    } catch (const Error& e) {
      p.considered.push_back(fmt::format("{}: not eligible: {}", name, e.what()));
      continue;
    }
    if (!wait) wait = config.assumed_wait_s;
    const std::string wait_text = wait ? "expected wait " + format_duration(std::round(*wait)) : "no wait estimate";
    p.considered.push_back(fmt::format("{}: {}{}", name, wait_text, cost_text.empty() ? "" : ", costs " + cost_text));
    // The shortest known wait; a backend without an estimate only when no other has one.
    if (p.backend.empty() || (wait && (!best_wait || *wait < *best_wait))) {
      p.backend = name;
      best_wait = wait;
      p.reason = fmt::format("local {}; {}{}", local.why, wait_text, cost_text.empty() ? "" : " and costs " + cost_text);
    }
  }
  if (!p.backend.empty()) return p;
  if (local.verdict == LocalFit::Never) {
    std::string all;
    for (const auto& line : p.considered) all += (all.empty() ? "" : "; ") + line;
    throw Error(Exit::Unavailable, "--backend auto: no backend can take the job", all);
  }
  p.backend = "local";
  p.reason = "no remote backend qualifies, so it waits locally (" + local.why + ")";
  return p;
}

}  // namespace rkit::rsub
