// File: rsub/core/spec_toml.cpp — the job spec from TOML (spec.hpp: parse_spec, load_spec),
// every error naming "file:line: key what-is-wrong".
#include <fmt/format.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>

#include "core/spec.hpp"
#include "core/spec_rules.hpp"
#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {

using namespace spec_rules;

namespace {

// Reads the TOML document; every error names "source:line: key what-is-wrong" (the typed
// reads of rkit::TomlReader, and the spec's own below).
class SpecReader : private TomlReader {
 public:
  SpecReader(const toml::table& root, const std::string& source) : TomlReader(source), root_(root) {}

  JobSpec read() const {
    JobSpec spec;
    for (auto&& [k, v] : root_) {
      const std::string key(k.str());
      if (key == "name")
        spec.name = string(v, key);
      else if (key == "tenant")
        spec.tenant = string(v, key);
      else if (key == "project")
        spec.project = string(v, key);
      else if (key == "workflow")
        spec.workflow = string(v, key);
      else if (key == "rule")
        spec.rule = string(v, key);
      else if (key == "command")
        spec.command = command(v);
      else if (key == "workdir")
        spec.workdir = string(v, key);
      else if (key == "env") {
        for (auto&& [name, value] : table(v, key))
          spec.env[std::string(name.str())] = string(value, fmt::format("env.{}", name.str()));
      } else if (key == "priority")
        spec.priority = integer(v, key);
      else if (key == "backend")
        spec.backend = string(v, key);
      else if (key == "time_limit")
        spec.time_limit_s = none_if_zero(seconds(v, key));
      else if (key == "hold")
        spec.hold = boolean(v, key);
      else if (key == "resources")
        spec.resources = resources(table(v, key));
      else if (key == "retry")
        spec.retry = retry(table(v, key));
      else if (key == "array")
        spec.array = array_spec(table(v, key));
      else if (key == "depends")
        spec.depends = depends(v);
      else if (key == "slurm")
        spec.slurm = slurm(table(v, key));
      else if (key == "kubernetes")
        spec.kube = kube(table(v, key));
      else
        unknown(k, "");
    }
    if (spec.name.empty()) spec.name = default_name(spec.command);
    validate(spec, [&](std::string_view key, const std::string& why) {
      auto node = root_.at_path(key);
      throw Error(Exit::DataErr, fmt::format("{}: {} {}", node ? where(*node.node()) : source(), key, why));
    });
    return spec;
  }

 private:
  [[noreturn]] void unknown(const toml::key& key, std::string_view prefix) const {
    throw Error(Exit::DataErr,
                fmt::format("{}:{}: unknown key \"{}{}\"", source(), key.source().begin.line, prefix, key.str()));
  }
  // A parser's Error(Usage) becomes a data error at `node`.
  template <typename F>
  auto parse_at(const toml::node& node, std::string_view key, F&& parse) const {
    return with_context(Exit::DataErr, fmt::format("{}: {}", where(node), key), std::forward<F>(parse));
  }

  double seconds(const toml::node& node, std::string_view key) const {
    if (const auto* s = node.as_string()) return parse_at(node, key, [&] { return parse_duration(s->get()); });
    if (node.is_number()) return *node.value<double>();
    fail(node, key, "must be a duration such as \"2h\" or a number of seconds");
  }
  std::uint64_t bytes(const toml::node& node, std::string_view key) const {
    if (const auto* s = node.as_string()) return parse_at(node, key, [&] { return parse_size(s->get()); });
    if (const auto* i = node.as_integer()) {
      if (i->get() < 0) fail(node, key, "must not be negative");
      return static_cast<std::uint64_t>(i->get());
    }
    fail(node, key, "must be a size such as \"16G\" or a number of bytes");
  }
  std::vector<std::string> command(const toml::node& node) const {
    constexpr std::string_view kWhat = "must be a string or an array of strings";
    if (const auto* s = node.as_string()) {
      if (s->get().empty()) fail(node, "command", "must not be empty");
      return {"/bin/sh", "-c", s->get()};
    }
    const auto* argv = node.as_array();
    if (!argv) fail(node, "command", kWhat);
    if (argv->empty()) fail(node, "command", "must not be empty");
    std::vector<std::string> out;
    for (const auto& arg : *argv) {
      if (!arg.is_string()) fail(arg, "command", kWhat);
      out.push_back(*arg.value<std::string>());
    }
    return out;
  }

  Resources resources(const toml::table& t) const {
    Resources r;
    for (auto&& [k, v] : t) {
      const std::string key = "resources." + std::string(k.str());
      if (k.str() == "tasks")
        r.tasks = integer(v, key);
      else if (k.str() == "nodes")
        r.nodes = integer(v, key);
      else if (k.str() == "cpus_per_task")
        r.cpus_per_task = integer(v, key);
      else if (k.str() == "gpus_per_task")
        r.gpus_per_task = integer(v, key);
      else if (k.str() == "gpu_type")
        r.gpu_type = string(v, key);
      else if (k.str() == "memory")
        r.memory_bytes = bytes(v, key);
      else
        unknown(k, "resources.");
    }
    return r;
  }

  SlurmHints slurm(const toml::table& t) const {
    SlurmHints h;
    for (auto&& [k, v] : t) {
      const std::string key = "slurm." + std::string(k.str());
      if (k.str() == "partition")
        h.partition = string(v, key);
      else if (k.str() == "qos")
        h.qos = string(v, key);
      else if (k.str() == "account")
        h.account = string(v, key);
      else if (k.str() == "switches")
        h.switches = integer(v, key);
      else if (k.str() == "switch_wait")
        h.switch_wait_s = seconds(v, key);
      else
        unknown(k, "slurm.");
    }
    return h;
  }

  KubeHints kube(const toml::table& t) const {
    KubeHints h;
    for (auto&& [k, v] : t) {
      const std::string key = "kubernetes." + std::string(k.str());
      if (k.str() == "image")
        h.image = string(v, key);
      else if (k.str() == "queue")
        h.queue = string(v, key);
      else
        unknown(k, "kubernetes.");
    }
    return h;
  }

  RetryPolicy retry(const toml::table& t) const {
    RetryPolicy r;
    for (auto&& [k, v] : t) {
      const std::string key = "retry." + std::string(k.str());
      if (k.str() == "max_attempts")
        r.max_attempts = integer(v, key);
      else if (k.str() == "on_exit_codes") {
        for (const auto& code : array(v, key)) r.on_exit_codes.push_back(integer(code, key));
      } else if (k.str() == "on_signals") {
        for (const auto& sig : array(v, key)) r.on_signals.push_back(signal(sig, key));
      } else if (k.str() == "backoff")
        r.backoff_s = seconds(v, key);
      else
        unknown(k, "retry.");
    }
    return r;
  }

  int signal(const toml::node& node, std::string_view key) const {
    if (node.is_integer()) return integer(node, key);
    const auto* name = node.as_string();
    if (!name) fail(node, key, "must hold signal names or numbers");
    if (auto sig = parse_signal(name->get())) return *sig;
    fail(node, key, fmt::format("has an unknown signal \"{}\"", name->get()));
  }

  ArraySpec array_spec(const toml::table& t) const {
    ArraySpec a;
    bool has_range = false;
    for (auto&& [k, v] : t) {
      const std::string key = "array." + std::string(k.str());
      if (k.str() == "range") {
        const std::string text = string(v, key);
        a.indices = parse_at(v, key, [&] { return parse_array_range(text); });
        has_range = true;
      } else if (k.str() == "max_concurrent")
        a.max_concurrent = integer(v, key);
      else
        unknown(k, "array.");
    }
    if (!has_range) fail(t, "array.range", "is required");
    return a;
  }

  // An array of "afterok:12:13" strings or of { type = "afterok", job = 12 } tables.
  std::vector<Dependency> depends(const toml::node& node) const {
    std::vector<Dependency> out;
    for (const auto& item : array(node, "depends")) {
      if (const auto* s = item.as_string()) {
        auto deps = parse_at(item, "depends", [&] { return parse_dependency(s->get()); });
        out.insert(out.end(), deps.begin(), deps.end());
      } else if (const auto* t = item.as_table()) {
        out.push_back(dependency(*t));
      } else {
        fail(item, "depends", "must hold strings such as \"afterok:12\" or tables");
      }
    }
    return out;
  }

  Dependency dependency(const toml::table& t) const {
    std::optional<DepType> type;
    std::optional<std::int64_t> job;
    for (auto&& [k, v] : t) {
      if (k.str() == "type") {
        type = dep_type(string(v, "depends.type"));
        if (!type) fail(v, "depends.type", "must be afterok, afterany or afternotok");
      } else if (k.str() == "job") {
        job = integer<std::int64_t>(v, "depends.job");
      } else {
        unknown(k, "depends.");
      }
    }
    if (!type) fail(t, "depends.type", "is required");
    if (!job) fail(t, "depends.job", "is required");
    return {*type, *job, {}};
  }

  const toml::table& root_;
};

}  // namespace

JobSpec parse_spec(std::string_view text, const std::string& source) {
  toml::table root = parse_toml(text, source, Exit::DataErr);
  return SpecReader(root, source).read();
}

JobSpec load_spec(const std::string& path) { return parse_spec(read_file(path, kMaxSpecBytes), input_name(path)); }

}  // namespace rkit::rsub
