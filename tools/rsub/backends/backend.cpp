// File: rsub/backends/backend.cpp — the list of backend kinds, reading a backend's table, and
// finding a job's backend (backend.hpp).
#include "backends/backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "commands/commands.hpp"
#include "rkit/error.hpp"

namespace rkit::rsub {

BackendKind slurm_backend_kind();       // slurm.cpp
BackendKind kubernetes_backend_kind();  // kube_backend.cpp

const std::vector<BackendKind>& backend_kinds() {
  static const std::vector<BackendKind> kinds{slurm_backend_kind(), kubernetes_backend_kind()};
  return kinds;
}

std::shared_ptr<const BackendConfig> parse_backend(const Config& c, const std::string& name, const std::string& dir) {
  const std::string key = "rsub.backends." + name;
  // Names are ids' prefixes ("slurm:1234") and Kubernetes label values: letters and
  // digits at both ends.
  if (name == "local" || name == "auto" || name.empty() || name.size() > 63 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos ||
      !std::isalnum(static_cast<unsigned char>(name.front())) || !std::isalnum(static_cast<unsigned char>(name.back())))
    throw Error(Exit::Config,
                fmt::format("{}: backend name \"{}\": letters, digits, - and _, beginning and ending with "
                            "a letter or digit (not local or auto)",
                            c.where(key), name));
  const auto kind_name = c.get_string(key + ".kind");
  const auto& kinds = backend_kinds();
  const auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const BackendKind& k) { return kind_name == k.name; });
  if (kind == kinds.end()) {
    std::vector<std::string> names;
    for (const auto& k : kinds) names.push_back(fmt::format("\"{}\"", k.name));
    throw Error(Exit::Config,
                fmt::format("{}: {}.kind must be {}", c.where(key + ".kind"), key, fmt::join(names, " or ")));
  }
  static const std::vector<std::string> common{"kind", "log_dir", "refresh", "submit_retry", "assumed_wait"};
  for (const auto& [k, _] : *c.get_table(key)) {
    const std::string_view own(k.str());
    if (std::find(common.begin(), common.end(), own) == common.end() &&
        std::find(kind->keys.begin(), kind->keys.end(), own) == kind->keys.end())
      throw Error(Exit::Config, fmt::format("{}: unknown key {}.{} for a {} backend",
                                            c.where(key + "." + std::string(own)), key, own, kind->name));
  }
  BackendCommon b;
  b.name = name;
  b.kind = kind->name;
  b.log_dir = c.get_string(key + ".log_dir").value_or("");
  if (b.log_dir.empty()) b.log_dir = dir + "/logs/" + name;
  if (auto v = c.get_duration(key + ".refresh")) b.refresh_s = *v;
  if (auto v = c.get_duration(key + ".submit_retry")) b.submit_retry_s = *v;
  b.assumed_wait_s = c.get_duration(key + ".assumed_wait");
  return kind->parse(c, key, b);
}

std::unique_ptr<Backend> open_backend(const Context& ctx, const std::string& name) {
  if (const BackendConfig* config = ctx.settings.backend(name)) {
    std::optional<std::uint32_t> run_as;
    if (::geteuid() == 0 && ctx.me.uid != 0) run_as = ctx.me.uid;
    return config->open(run_as);
  }
  std::vector<std::string> known;
  for (const auto& b : ctx.settings.backends) known.push_back(b->name);
  known.push_back("and auto");
  throw Error(Exit::Usage,
              fmt::format("backend \"{}\" is not configured (configured: {})", name, fmt::join(known, ", ")),
              "backends are [rsub.backends.NAME] tables of the configuration (rsub(1), BACKENDS)");
}

}  // namespace rkit::rsub
