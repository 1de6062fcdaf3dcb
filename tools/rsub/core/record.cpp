// File: rsub/core/record.cpp — the rkit.job.v1 record of a stored job (rkit(7)).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <string_view>
#include <type_traits>

#include "core/store.hpp"
#include "rkit/process.hpp"

namespace rkit::rsub {

std::string JobRecord::display_id() const {
  if (!remote_id.empty()) return fmt::format("{}:{}", backend, remote_id);
  return array_parent && array_index ? fmt::format("{}_{}", *array_parent, *array_index) : std::to_string(id);
}

std::string spec_record_fields(const JobSpec& spec) {
  const Resources& r = spec.resources;
  Json depends = Json::array(), command = Json::array();
  for (const Dependency& d : spec.depends) depends.push_back(fmt::format("{}:{}", dep_type_name(d.type), d.job));
  for (const std::string& arg : spec.command) command.push_back(bytes_json(arg));
  return Json{{"name", spec.name},
              {"tenant", spec.tenant},
              {"project", spec.project},
              {"workflow", spec.workflow.empty() ? Json(nullptr) : Json(spec.workflow)},
              {"rule", spec.rule.empty() ? Json(nullptr) : Json(spec.rule)},
              {"tasks", r.tasks},
              {"cpus_per_task", r.cpus_per_task},
              {"gpus_per_task", r.gpus_per_task},
              {"gpu_type", r.gpu_type.empty() ? Json(nullptr) : Json(r.gpu_type)},
              {"memory_per_task_bytes", r.memory_bytes},
              {"cpus", r.tasks * r.cpus_per_task},
              {"gpus", r.tasks * r.gpus_per_task},
              {"time_limit_s", spec.time_limit_s ? Json(*spec.time_limit_s) : Json(nullptr)},
              {"priority", spec.priority},
              {"depends", depends},
              {"command", command},
              {"workdir", bytes_json(spec.workdir)}}
      .dump();
}

namespace {

// The record's own fields, written straight into its line: `rsub ls --json` writes one
// line per job (a store holds 100,000), and building a Json object for each was most of
// its time. The text is what Json::dump writes for the same values: numbers through the
// same conversions, strings as they are when nothing in them needs escaping, else through
// Json.
class FieldWriter {
 public:
  explicit FieldWriter(std::string& out) : out_(out) {}
  FieldWriter& operator()(std::string_view key, std::string_view v) {
    name(key);
    const bool plain =
        std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
    if (plain)
      out_.append(1, '"').append(v).append(1, '"');
    else
      out_ += Json(std::string(v)).dump(-1, ' ', false, Json::error_handler_t::replace);
    return *this;
  }
  FieldWriter& operator()(std::string_view key, const char* v) { return (*this)(key, std::string_view(v)); }
  FieldWriter& operator()(std::string_view key, bool v) {
    name(key);
    out_ += v ? "true" : "false";
    return *this;
  }
  template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
  FieldWriter& operator()(std::string_view key, T v) {
    name(key);
    fmt::format_to(std::back_inserter(out_), "{}", v);
    return *this;
  }
  FieldWriter& operator()(std::string_view key, double v) {
    name(key);
    if (!std::isfinite(v)) {
      out_ += "null";  // as to_json_line writes NaN and infinities
    } else {
      char buf[64];  // the conversion Json::dump makes (its Grisu2 digits, "5.0" for 5)
      out_.append(buf, nlohmann::detail::to_chars(buf, buf + sizeof buf, v));
    }
    return *this;
  }
  template <typename T>
  FieldWriter& operator()(std::string_view key, const std::optional<T>& v) {
    if (v) return (*this)(key, *v);
    name(key);
    out_ += "null";
    return *this;
  }

 private:
  void name(std::string_view key) {
    if (out_.back() != '{') out_ += ',';
    out_.append(1, '"').append(key).append("\":");
  }
  std::string& out_;
};

std::optional<std::string> unless_empty(const std::string& s) { return s.empty() ? std::nullopt : std::optional(s); }

}  // namespace

std::string JobRecord::to_json_line() const {
  std::optional<double> elapsed;
  if (start_s) elapsed = end_s.value_or(now_s()) - *start_s;
  std::optional<std::string> signal_text;
  if (signal) signal_text = signal_name(*signal);
  const std::string fields = record_fields.empty() ? spec_record_fields(spec) : record_fields;
  const std::string alloc_json = alloc_text.empty() ? alloc_to_json(alloc).dump() : alloc_text;
  // {own fields..., the spec's fields (stored with the job as one object)..., own fields..., "alloc": [...]}
  std::string line = "{";
  line.reserve(256 + fields.size() + alloc_json.size());
  FieldWriter field(line);
  field("schema", "rkit.job.v1")("id", display_id())("backend", backend)("remote_id", unless_empty(remote_id))(
      "job_id", id)("array_parent", array_parent)("array_index", array_index);
  line += ',';
  line.append(fields, 1, fields.size() - 2);
  field("user", user)("uid", uid)("state", state_name(state))("reason", reason)("held", held)("exit_code", exit_code)(
      "signal", signal_text)("attempts", attempts)("submit_unix_s", submit_s)("start_unix_s", start_s)(
      "end_unix_s", end_s)("elapsed_s", elapsed)("host", unless_empty(host))("cpu_used_s", cpu_s)("memory_peak_bytes",
                                                                                                  peak_memory_bytes);
  line += ",\"alloc\":";
  line += alloc_json;
  line += '}';
  return line;
}

Json JobRecord::to_json() const { return parse_json(to_json_line(), "job record"); }

}  // namespace rkit::rsub
