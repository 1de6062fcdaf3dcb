// File: rsub/daemon/settings.cpp — rsub's settings from the configuration file (daemon.hpp,
// load_settings), and the machine the local backend runs jobs on.
#include <fmt/format.h>
#include <unistd.h>

#include <utility>

#include "daemon/daemon.hpp"
#include "rkit/error.hpp"
#include "rkit/topology.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {

Settings load_settings(const Config& c) {
  Settings s;
  s.config_path = c.path;
  s.dir = state_dir() + "/rsub";
  if (auto v = c.get_string("rsub.state_dir")) s.dir = *v;
  if (auto v = c.get_string("rsub.socket")) {
    if (v->empty() || v->front() != '/')
      throw Error(Exit::Config, fmt::format("{}: rsub.socket must be an absolute path", c.where("rsub.socket")));
    s.socket = *v;
  }
  if (auto v = c.get_duration("rsub.kill_grace")) s.kill_grace_s = *v;
  if (auto v = c.get_duration("rsub.default_time_limit"); v && *v > 0) s.default_time_limit_s = *v;
  if (auto v = c.get_duration("rsub.priority.half_life")) s.half_life_s = *v;
  if (auto v = c.get_duration("rsub.priority.max_age")) {
    if (*v < 1)
      throw Error(Exit::Config,
                  fmt::format("{}: rsub.priority.max_age must be at least 1s", c.where("rsub.priority.max_age")));
    s.sched.max_age_s = *v;
  }
  if (auto v = c.get_number("rsub.priority.gpu_weight", 0, 1e6)) s.gpu_weight = *v;
  if (auto v = c.get_number("rsub.priority.weight_fairshare", 0, 1e9)) s.sched.weight_fairshare = *v;
  if (auto v = c.get_number("rsub.priority.weight_age", 0, 1e9)) s.sched.weight_age = *v;
  if (auto v = c.get_number("rsub.priority.weight_priority", 0, 1e9)) s.sched.weight_priority = *v;
  s.sched.max_running_jobs_per_user = c.get_whole("rsub.limits.max_running_jobs_per_user", 1, 1'000'000'000);
  if (auto v = c.get_whole("rsub.limits.max_pids_per_job", 0, 1 << 22)) s.job_pids_max = static_cast<int>(*v);
  if (auto v = c.get_choice("rsub.policy", {"pack", "spread"})) s.sched.policy = *parse_policy(*v);
  s.local_cpus = c.get_whole("local.cpus", 1, 1 << 20);
  s.local_gpus = c.get_whole("local.gpus", 0, 1024);
  if (auto v = c.get_string("local.memory")) {
    try {
      s.local_memory = parse_size(*v);
    } catch (const Error& e) {
      throw Error(Exit::Config, fmt::format("{}: local.memory: {}", c.where("local.memory"), e.what()));
    }
  }
  if (auto admins = c.get_strings("rsub.admins")) s.admins = std::move(*admins);
  s.tenants_of_users = c.get_string_map("rsub.users");
  if (const auto* tenants = c.get_table("rsub.tenants"))
    for (const auto& [name, _] : *tenants) {
      const std::string key = "rsub.tenants." + std::string(name.str());
      TenantPolicy t;
      if (auto v = c.get_number(key + ".shares", 0, 1e9)) t.shares = *v;
      t.max_gpus = c.get_whole(key + ".max_gpus", 0, 1 << 20);
      t.max_cpus = c.get_whole(key + ".max_cpus", 0, 1 << 20);
      s.sched.tenants[std::string(name.str())] = t;
      TenantAccess& access = s.tenant_access[std::string(name.str())];
      for (auto [field, out] : {std::pair{".users", &access.users}, std::pair{".groups", &access.groups}})
        if (auto names = c.get_strings(key + field)) *out = std::move(*names);
      if (auto v = c.get_number(key + ".max_job_cost", 0, 1e12)) s.max_job_cost[std::string(name.str())] = *v;
    }
  s.backends.push_back(local_backend_config(s.dir));
  if (const auto* backends = c.get_table("rsub.backends"))
    for (const auto& [name, _] : *backends) {
      s.backends.push_back(parse_backend(c, std::string(name.str()), s.dir));
      s.auto_backends.push_back(std::string(name.str()));
    }
  if (const auto* order = c.get_array("rsub.auto.backends")) {
    s.auto_backends.clear();
    for (const auto& b : *order) {
      const auto name = b.value<std::string>();
      if (!name || *name == "local" || !s.backend(*name))
        throw Error(Exit::Config,
                    fmt::format("{}: rsub.auto.backends must name configured backends", c.where("rsub.auto.backends")));
      s.auto_backends.push_back(*name);
    }
  }
  if (auto v = c.get_string("rsub.auto.prices")) s.prices_path = *v;
  return s;
}

Machine local_machine(const Settings& s) {
  Machine m;
  ProbeOptions probe_options;
  if (s.local_cpus) probe_options.synthetic = fmt::format("core:{} pu:1", *s.local_cpus);
  if (s.local_gpus) probe_options.use_nvml = false;
  m.topology = probe(probe_options);
  if (s.local_gpus) {
    m.topology.gpus.clear();
    m.topology.gpu_links.clear();
    m.topology.gpu_nic_links.clear();
    for (int i = 0; i < *s.local_gpus; ++i) {
      Gpu g;
      g.index = i;
      g.name = "GPU";
      g.source = "config";
      m.topology.gpus.push_back(g);
    }
  }
  // A synthetic topology's memory is hwloc's invention: the host's counts then.
  m.memory_bytes = s.local_memory.value_or(0);
  if (!m.memory_bytes && !s.local_cpus)
    for (const auto& node : m.topology.numa_nodes) m.memory_bytes += node.memory_bytes;
  if (!m.memory_bytes)
    m.memory_bytes =
        static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(::sysconf(_SC_PAGE_SIZE));
  return m;
}

const BackendConfig* Settings::backend(const std::string& name) const {
  for (const auto& b : backends)
    if (b->name == name) return b.get();
  return nullptr;
}

}  // namespace rkit::rsub
