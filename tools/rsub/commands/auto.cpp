// File: rsub/commands/auto.cpp — where --backend auto sends a job (commands.hpp, place_job).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "commands/commands.hpp"
#include "rkit/error.hpp"
#include "rkit/prices.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {

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
  // The local machine when it starts the job now.
  const Offer local = open_backend(ctx, "local")->offer(ctx, spec);
  p.considered.push_back("local: " + local.why);
  if (local.fit == Offer::Now) {
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
    throw Error(Exit::Config,
                fmt::format("rsub.tenants.{}.max_job_cost needs a price sheet to price jobs with", spec.tenant),
                "set rsub.auto.prices (rsub(1), BACKENDS)");
  const Resources& r = spec.resources;
  const double hours = spec.time_limit_s.value_or(3600) / 3600;
  std::optional<double> best_wait;
  for (const std::string& name : ctx.settings.auto_backends) {
    const auto backend = open_backend(ctx, name);  // asked as the caller, not as root
    std::string cost_text;
    if (prices) {
      const double cost = prices->at(name).hourly(static_cast<double>(r.tasks) * r.cpus_per_task,
                                                  static_cast<double>(r.tasks) * r.gpus_per_task, r.gpu_type,
                                                  r.memory_bytes * static_cast<std::uint64_t>(r.tasks)) *
                          hours;
      cost_text = fmt::format("{:.2f} {} for {}{}", cost, prices->currency, format_duration(hours * 3600),
                              spec.time_limit_s ? "" : " (no time limit: one hour assumed)");
      if (limit != ctx.settings.max_job_cost.end() && cost > limit->second) {
        p.considered.push_back(fmt::format("{}: over tenant {}'s limit of {:.2f} {} ({})", name, spec.tenant,
                                           limit->second, prices->currency, cost_text));
        continue;
      }
    }
    const Offer there = backend->offer(ctx, spec);
    if (there.fit == Offer::Never) {
      p.considered.push_back(fmt::format("{}: not eligible: {}", name, there.why));
      continue;
    }
    const std::optional<double> wait = there.wait_s;
    const std::string& wait_text = there.why;
    p.considered.push_back(fmt::format("{}: {}{}", name, wait_text, cost_text.empty() ? "" : ", costs " + cost_text));
    // The shortest known wait; a backend without an estimate only when no other has one.
    if (p.backend.empty() || (wait && (!best_wait || *wait < *best_wait))) {
      p.backend = name;
      best_wait = wait;
      p.reason =
          fmt::format("local {}; {}{}", local.why, wait_text, cost_text.empty() ? "" : " and costs " + cost_text);
    }
  }
  if (!p.backend.empty()) return p;
  if (local.fit == Offer::Never) {
    throw Error(Exit::Unavailable, "--backend auto: no backend can take the job",
                fmt::format("{}", fmt::join(p.considered, "; ")));
  }
  p.backend = "local";
  p.reason = "no remote backend qualifies, so it waits locally (" + local.why + ")";
  return p;
}

}  // namespace rkit::rsub
