// File: rsub/core/spec.cpp — the job spec's rules, its JSON form (the store's), flag
// overrides, and the parsers of arrays, dependencies and signals (spec.hpp). The TOML
// reader is spec_toml.cpp's; spec_rules.hpp is what the two share.
#include "core/spec.hpp"

#include <fmt/format.h>
#include <string.h>  // sigabbrev_np (glibc 2.32+)

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <functional>
#include <type_traits>
#include <utility>

#include "core/spec_rules.hpp"
#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {
namespace spec_rules {

constexpr std::array<std::pair<DepType, std::string_view>, 3> kDepTypes{
    {{DepType::AfterOk, "afterok"}, {DepType::AfterAny, "afterany"}, {DepType::AfterNotOk, "afternotok"}}};

// The flag that sets each validated key, so that an override's error names what was typed.
constexpr std::pair<std::string_view, std::string_view> kFlagOfKey[] = {{"name", "--name"},
                                                                        {"workflow", "--workflow"},
                                                                        {"rule", "--rule"},
                                                                        {"env", "--env"},
                                                                        {"resources.tasks", "--tasks"},
                                                                        {"resources.nodes", "--nodes"},
                                                                        {"resources.cpus_per_task", "--cpus-per-task"},
                                                                        {"resources.gpus_per_task", "--gpus-per-task"},
                                                                        {"priority", "--priority"},
                                                                        {"time_limit", "--time"},
                                                                        {"retry.on_exit_codes", "--retry-on"},
                                                                        {"retry.on_signals", "--retry-on"},
                                                                        {"array.range", "--array"},
                                                                        {"array.max_concurrent", "--array"},
                                                                        {"depends", "--depends"},
                                                                        {"backend", "--backend"}};

std::optional<DepType> dep_type(std::string_view name) {
  for (const auto& [type, n] : kDepTypes)
    if (n == name) return type;
  return std::nullopt;
}

// Plain decimal digits, as Slurm reads ids and indices: no sign, no spaces.
std::optional<std::int64_t> parse_digits(std::string_view s) {
  std::int64_t v = 0;
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s.front()))) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// {"a", "b"} for "a<sep>b", {"a", nullopt} for "a".
std::pair<std::string_view, std::optional<std::string_view>> cut(std::string_view s, char sep) {
  auto at = s.find(sep);
  if (at == std::string_view::npos) return {s, std::nullopt};
  return {s.substr(0, at), s.substr(at + 1)};
}

bool bad_name_char(char c) {
  return std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c));
}

// The command's basename ("sh" for a /bin/sh -c string), made valid as a name.
std::string default_name(const std::vector<std::string>& command) {
  return valid_name(command.empty() ? std::string() : base_name(command.front()));
}

std::optional<double> none_if_zero(double seconds) {
  return seconds == 0 ? std::nullopt : std::optional<double>(seconds);
}

[[noreturn]] void usage(std::string_view flag, std::string_view why) {
  throw Error(Exit::Usage, fmt::format("{}: {}", flag, why));
}

// The rules every spec keeps, whether it came from a file, flags or the store.
void validate(const JobSpec& s, const Fail& fail) {
  auto range = [&](std::string_view key, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo) fail(key, fmt::format("must be at least {}", lo));
    if (v > hi) fail(key, fmt::format("must be at most {}", hi));
  };
  auto each = [&](std::string_view key, const std::vector<int>& values, int lo, int hi) {
    for (int v : values)
      if (v < lo || v > hi) fail(key, fmt::format("must be between {} and {} (not {})", lo, hi, v));
  };
  auto seconds = [&](std::string_view key, double v) {
    if (!std::isfinite(v) || v < 0) fail(key, "must be a finite number of seconds, at least 0");
  };
  if (s.command.empty())
    fail("command", "is required");
  else if (s.command.front().empty())
    fail("command", "must start with a program name");
  if (s.name.empty()) fail("name", "must not be empty");
  for (auto [key, text] : {std::pair{"name", &s.name}, std::pair{"workflow", &s.workflow}, std::pair{"rule", &s.rule}})
    if (std::any_of(text->begin(), text->end(), bad_name_char))
      fail(key, "must not contain whitespace or control characters");
  // Names are text; what a job runs with (its command, environment values, working
  // directory) may be any bytes, and records carry them (bytes_json).
  for (auto [key, text] : {std::pair{"name", &s.name}, std::pair{"tenant", &s.tenant}, std::pair{"project", &s.project},
                           std::pair{"workflow", &s.workflow}, std::pair{"rule", &s.rule},
                           std::pair{"resources.gpu_type", &s.resources.gpu_type}, std::pair{"backend", &s.backend},
                           std::pair{"slurm.partition", &s.slurm.partition}, std::pair{"slurm.qos", &s.slurm.qos},
                           std::pair{"slurm.account", &s.slurm.account}, std::pair{"kubernetes.image", &s.kube.image},
                           std::pair{"kubernetes.queue", &s.kube.queue}})
    if (!is_utf8(*text)) fail(key, "must be UTF-8 text");
  for (const auto& [key, value] : s.env) {
    if (!is_utf8(key)) fail("env", "variable names must be UTF-8 text");
    if (key.empty()) fail("env", "variable name must not be empty");
    if (key.find('=') != std::string::npos) fail("env", fmt::format("variable name \"{}\" must not contain '='", key));
  }
  range("resources.tasks", s.resources.tasks, 1, kMaxTasks);
  range("resources.cpus_per_task", s.resources.cpus_per_task, 1, INT_MAX);
  range("resources.gpus_per_task", s.resources.gpus_per_task, 0, INT_MAX);
  range("priority", s.priority, -1000, 1000);
  if (s.time_limit_s) seconds("time_limit", *s.time_limit_s);
  range("retry.max_attempts", s.retry.max_attempts, 1, kMaxAttempts);
  each("retry.on_exit_codes", s.retry.on_exit_codes, 1, 255);
  each("retry.on_signals", s.retry.on_signals, 1, kMaxSignal);
  seconds("retry.backoff", s.retry.backoff_s);
  if (s.array) {
    const auto& indices = s.array->indices;
    if (indices.empty()) fail("array.range", "must not be empty");
    if (indices.size() > kMaxArrayElements)
      fail("array.range", fmt::format("must have at most {} elements", kMaxArrayElements));
    each("array.range", indices, 0, kMaxArrayIndex);
    if (std::adjacent_find(indices.begin(), indices.end(), std::greater_equal<>()) != indices.end())
      fail("array.range", "indices must be sorted and unique");
    range("array.max_concurrent", s.array->max_concurrent, 0, INT_MAX);
  }
  for (const auto& d : s.depends)
    if (d.job < 1 && d.remote.empty()) fail("depends", fmt::format("job ids must be at least 1 (not {})", d.job));
  range("resources.nodes", s.resources.nodes, 1, kMaxTasks);
  if (s.resources.tasks % s.resources.nodes != 0)
    fail("resources.nodes",
         fmt::format("must divide resources.tasks ({} tasks on {} nodes)", s.resources.tasks, s.resources.nodes));
  range("slurm.switches", s.slurm.switches, 0, 1024);
  if (s.slurm.switch_wait_s < 0) fail("slurm.switch_wait", "must not be negative");
  if (s.backend.empty()) fail("backend", "must not be empty");
}

}  // namespace spec_rules

std::string valid_name(std::string name) {
  std::replace_if(name.begin(), name.end(), spec_rules::bad_name_char, '_');
  if (!is_utf8(name))  // a name is text: each byte outside ASCII then becomes _
    std::replace_if(
        name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }, '_');
  return name;
}

using namespace spec_rules;

namespace {

[[noreturn]] void bad_record(std::string_view key, std::string_view what) {
  throw Error(Exit::DataErr, fmt::format("job spec record: {} must be {}", key, what));
}

template <typename T>
void read_value(const Json& v, const std::string& key, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad_record(key, "a boolean");
    out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    bool fits = v.is_number_unsigned() ? std::in_range<T>(v.get<std::uint64_t>())
                                       : v.is_number_integer() && std::in_range<T>(v.get<std::int64_t>());
    if (!fits) bad_record(key, "an integer in range");
    out = v.get<T>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number()) bad_record(key, "a number");
    out = v.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string() && !v.is_object()) bad_record(key, "a string");
    out = bytes_of(v, "job spec record: " + key);  // or {"hex": ...}
  } else {                                         // a std::vector
    if (!v.is_array()) bad_record(key, "an array");
    out.clear();
    for (const Json& item : v) read_value(item, key, out.emplace_back());
  }
}

// One object of the record. A missing or null key keeps its default, so that records
// written before a key existed still read.
class RecordObject {
 public:
  RecordObject(const Json& json, std::string name) : json_(json), prefix_(name.empty() ? name : name + ".") {
    if (!json_.is_object()) bad_record(name.empty() ? "the record" : name, "an object");
  }
  const Json* find(const char* key) const {
    auto it = json_.find(key);
    return it == json_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string path(const char* key) const { return prefix_ + key; }
  template <typename T>
  void read(const char* key, T& out) const {
    if (const Json* v = find(key)) read_value(*v, path(key), out);
  }

 private:
  const Json& json_;
  std::string prefix_;
};

}  // namespace

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t at = 0;
  while ((at = s.find(sep)) != std::string_view::npos) {
    parts.push_back(s.substr(0, at));
    s.remove_prefix(at + 1);
  }
  parts.push_back(s);
  return parts;
}

std::string_view dep_type_name(DepType type) {
  for (const auto& [t, name] : kDepTypes)
    if (t == type) return name;
  return "?";
}

Json JobSpec::to_json() const {
  Json deps = Json::array();
  for (const auto& d : depends) {
    deps.push_back({{"type", std::string(dep_type_name(d.type))}, {"job", d.job}});
    if (!d.remote.empty()) deps.back()["remote"] = d.remote;
  }
  Json j;
  j["name"] = name;
  j["tenant"] = tenant;
  j["project"] = project;
  j["workflow"] = workflow;
  j["rule"] = rule;
  j["command"] = Json::array();
  for (const auto& arg : command) j["command"].push_back(bytes_json(arg));
  j["workdir"] = bytes_json(workdir);
  j["env"] = Json::object();
  for (const auto& [k, v] : env) j["env"][k] = bytes_json(v);
  j["resources"] = {{"tasks", resources.tasks},
                    {"nodes", resources.nodes},
                    {"cpus_per_task", resources.cpus_per_task},
                    {"gpus_per_task", resources.gpus_per_task},
                    {"gpu_type", resources.gpu_type},
                    {"memory_bytes", resources.memory_bytes}};
  j["time_limit_s"] = time_limit_s ? Json(*time_limit_s) : Json(nullptr);
  j["retry"] = {{"max_attempts", retry.max_attempts},
                {"on_exit_codes", retry.on_exit_codes},
                {"on_signals", retry.on_signals},
                {"backoff_s", retry.backoff_s}};
  j["array"] = array ? Json{{"indices", array->indices}, {"max_concurrent", array->max_concurrent}} : Json(nullptr);
  j["depends"] = std::move(deps);
  j["priority"] = priority;
  j["backend"] = backend;
  j["hold"] = hold;
  j["slurm"] = {{"partition", slurm.partition},
                {"qos", slurm.qos},
                {"account", slurm.account},
                {"switches", slurm.switches},
                {"switch_wait_s", slurm.switch_wait_s}};
  j["kubernetes"] = {{"image", kube.image}, {"queue", kube.queue}};
  return j;
}

JobSpec JobSpec::from_json(const Json& json) {
  JobSpec s;
  RecordObject top(json, "");
  top.read("name", s.name);
  top.read("tenant", s.tenant);
  top.read("project", s.project);
  top.read("workflow", s.workflow);
  top.read("rule", s.rule);
  top.read("command", s.command);
  top.read("workdir", s.workdir);
  if (const Json* env = top.find("env")) {
    RecordObject obj(*env, "env");
    for (const auto& [k, v] : env->items()) obj.read(k.c_str(), s.env[k]);
  }
  if (const Json* res = top.find("resources")) {
    RecordObject r(*res, "resources");
    r.read("tasks", s.resources.tasks);
    r.read("nodes", s.resources.nodes);
    r.read("cpus_per_task", s.resources.cpus_per_task);
    r.read("gpus_per_task", s.resources.gpus_per_task);
    r.read("gpu_type", s.resources.gpu_type);
    r.read("memory_bytes", s.resources.memory_bytes);
  }
  double limit = 0;
  top.read("time_limit_s", limit);
  s.time_limit_s = none_if_zero(limit);
  if (const Json* retry = top.find("retry")) {
    RecordObject r(*retry, "retry");
    r.read("max_attempts", s.retry.max_attempts);
    r.read("on_exit_codes", s.retry.on_exit_codes);
    r.read("on_signals", s.retry.on_signals);
    r.read("backoff_s", s.retry.backoff_s);
  }
  if (const Json* array = top.find("array")) {
    RecordObject a(*array, "array");
    s.array.emplace();
    a.read("indices", s.array->indices);
    a.read("max_concurrent", s.array->max_concurrent);
  }
  if (const Json* deps = top.find("depends")) {
    if (!deps->is_array()) bad_record("depends", "an array");
    for (const Json& item : *deps) {
      RecordObject d(item, "depends");
      std::string type;
      d.read("type", type);
      auto t = dep_type(type);
      if (!t) bad_record(d.path("type"), "afterok, afterany or afternotok");
      Dependency& dep = s.depends.emplace_back(Dependency{*t, 0, {}});
      d.read("job", dep.job);
      d.read("remote", dep.remote);
    }
  }
  top.read("priority", s.priority);
  top.read("backend", s.backend);
  top.read("hold", s.hold);
  if (const Json* h = top.find("slurm")) {
    RecordObject r(*h, "slurm");
    r.read("partition", s.slurm.partition);
    r.read("qos", s.slurm.qos);
    r.read("account", s.slurm.account);
    r.read("switches", s.slurm.switches);
    r.read("switch_wait_s", s.slurm.switch_wait_s);
  }
  if (const Json* h = top.find("kubernetes")) {
    RecordObject r(*h, "kubernetes");
    r.read("image", s.kube.image);
    r.read("queue", s.kube.queue);
  }
  validate(s, [](std::string_view key, const std::string& why) {
    throw Error(Exit::DataErr, fmt::format("job spec record: {} {}", key, why));
  });
  return s;
}

void apply_overrides(JobSpec& spec, const SpecOverrides& o) {
  if (!o.command.empty()) {
    if (spec.name == default_name(spec.command)) spec.name.clear();  // a derived name follows the command
    spec.command = o.command;
  }
  if (o.name) spec.name = *o.name;
  if (o.tenant) spec.tenant = *o.tenant;
  if (o.project) spec.project = *o.project;
  if (o.workflow) spec.workflow = *o.workflow;
  if (o.rule) spec.rule = *o.rule;
  if (o.workdir) spec.workdir = *o.workdir;
  for (const auto& kv : o.env) {
    auto [key, value] = cut(kv, '=');
    if (!value) usage("--env", fmt::format("expected NAME=VALUE, not \"{}\"", kv));
    spec.env[std::string(key)] = std::string(*value);
  }
  if (o.tasks) spec.resources.tasks = *o.tasks;
  if (o.nodes) spec.resources.nodes = *o.nodes;
  if (o.partition) spec.slurm.partition = *o.partition;
  if (o.qos) spec.slurm.qos = *o.qos;
  if (o.account) spec.slurm.account = *o.account;
  if (o.image) spec.kube.image = *o.image;
  if (o.cpus_per_task) spec.resources.cpus_per_task = *o.cpus_per_task;
  if (o.gpus_per_task) spec.resources.gpus_per_task = *o.gpus_per_task;
  if (o.gpu_type) spec.resources.gpu_type = *o.gpu_type;
  if (o.memory) spec.resources.memory_bytes = with_context(Exit::Usage, "--mem", [&] { return parse_size(*o.memory); });
  if (o.time_limit)
    spec.time_limit_s =
        none_if_zero(with_context(Exit::Usage, "--time", [&] { return parse_duration(*o.time_limit); }));
  if (o.priority) spec.priority = *o.priority;
  if (o.retries) {
    // Checked here, before the + 1, so that the message speaks of retries.
    if (*o.retries < 0 || *o.retries >= kMaxAttempts)
      usage("--retries", fmt::format("must be between 0 and {}", kMaxAttempts - 1));
    spec.retry.max_attempts = *o.retries + 1;
  }
  if (o.retry_on) {
    spec.retry.on_exit_codes.clear();
    spec.retry.on_signals.clear();
    for (std::string_view item : split(*o.retry_on, ',')) {
      auto [prefix, rest] = cut(item, ':');
      if (auto code = parse_digits(item))  // numbers are exit codes; out of range fails validation
        spec.retry.on_exit_codes.push_back(static_cast<int>(std::min<std::int64_t>(*code, INT_MAX)));
      else if (auto sig = parse_signal(prefix == "sig" && rest ? *rest : item))
        spec.retry.on_signals.push_back(*sig);
      else
        usage("--retry-on", fmt::format("\"{}\" is neither an exit code nor a signal", item));
    }
  }
  if (o.array) {
    auto [range, limit] = cut(*o.array, '%');
    auto max = limit ? parse_digits(*limit) : std::optional<std::int64_t>(0);
    if (!max || !std::in_range<int>(*max))
      usage("--array", fmt::format("\"{}\": expected RANGE or RANGE%MAX", *o.array));
    spec.array = ArraySpec{with_context(Exit::Usage, "--array", [&] { return parse_array_range(range); }),
                           static_cast<int>(*max)};
  }
  if (!o.depends.empty()) {
    spec.depends.clear();
    for (const auto& text : o.depends) {
      auto deps = with_context(Exit::Usage, "--depends", [&] { return parse_dependency(text); });
      spec.depends.insert(spec.depends.end(), deps.begin(), deps.end());
    }
  }
  if (o.hold) spec.hold = *o.hold;
  if (o.backend) spec.backend = *o.backend;
  if (spec.name.empty()) spec.name = default_name(spec.command);
  validate(spec, [&](std::string_view key, const std::string& why) {
    for (const auto& [k, flag] : kFlagOfKey)
      if (k == key) usage(flag, why);
    throw Error(Exit::Usage, fmt::format("{} {}", key, why));
  });
}

std::vector<int> parse_array_range(std::string_view text) {
  auto bad = [&](std::string_view why) { throw Error(Exit::Usage, fmt::format("array range \"{}\": {}", text, why)); };
  if (text.empty()) bad("empty");
  std::vector<bool> seen(kMaxArrayIndex + 1);
  std::size_t count = 0;
  for (std::string_view part : split(text, ',')) {
    auto [span, step_text] = cut(part, ':');
    auto [first_text, last_text] = cut(span, '-');
    auto first = parse_digits(first_text);
    auto last = last_text ? parse_digits(*last_text) : first;
    auto step = step_text ? parse_digits(*step_text) : std::optional<std::int64_t>(1);
    if (!first || !last || !step) bad(fmt::format("\"{}\" is not N, A-B or A-B:STEP", part));
    if (*last < *first) bad("end before start");
    if (*step < 1) bad("step must be at least 1");
    if (*last > kMaxArrayIndex) bad(fmt::format("indices must be at most {}", kMaxArrayIndex));
    const std::int64_t stride = std::min<std::int64_t>(*step, kMaxArrayIndex + 1);  // i + stride cannot overflow
    for (std::int64_t i = *first; i <= *last; i += stride) {
      if (seen[i]) continue;
      seen[i] = true;
      if (++count > kMaxArrayElements) bad(fmt::format("more than {} elements", kMaxArrayElements));
    }
  }
  std::vector<int> indices;
  indices.reserve(count);
  for (int i = 0; i <= kMaxArrayIndex; ++i)
    if (seen[i]) indices.push_back(i);
  return indices;
}

std::vector<Dependency> parse_dependency(std::string_view text) {
  auto bad = [&](std::string_view why) { throw Error(Exit::Usage, fmt::format("dependency \"{}\": {}", text, why)); };
  std::vector<Dependency> out;
  for (std::string_view item : split(text, ',')) {  // Slurm's "afterok:1,afterany:2"
    auto [type_text, ids] = cut(item, ':');
    auto type = dep_type(type_text);
    if (!type) bad(fmt::format("\"{}\" is not afterok, afterany or afternotok", type_text));
    if (!ids) bad("expected TYPE:JOB[:JOB...]");
    // Ids are rsub's (12) or a backend's: a name, then its id there (slurm:1234,
    // gke:rsub-12-train).
    const auto parts = split(*ids, ':');
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (auto job = parse_digits(parts[i])) {
        if (*job < 1) bad(fmt::format("\"{}\" is not a job id", parts[i]));
        out.push_back({*type, *job, {}});
        continue;
      }
      const auto id_char = [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      };
      if (parts[i].empty() || i + 1 == parts.size() || parts[i + 1].empty() ||
          !std::all_of(parts[i + 1].begin(), parts[i + 1].end(), id_char))
        bad(fmt::format("\"{}\" is not a job id (12, or BACKEND:ID such as slurm:1234)", parts[i]));
      out.push_back({*type, 0, fmt::format("{}:{}", parts[i], parts[i + 1])});
      ++i;
    }
  }
  return out;
}

std::optional<int> parse_signal(std::string_view text) {
  if (auto n = parse_digits(text))
    return *n >= 1 && *n <= kMaxSignal ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
  std::string name(text);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.starts_with("SIG")) name.erase(0, 3);
  for (int sig = 1; sig <= kMaxSignal; ++sig)
    if (const char* abbrev = sigabbrev_np(sig); abbrev && name == abbrev) return sig;
  return std::nullopt;
}

}  // namespace rkit::rsub
