// File: rsub/record.cpp — the rkit.job.v1 record of a stored job (rkit(7)).
#include <fmt/format.h>

#include "rkit/process.hpp"
#include "store.hpp"

namespace rkit::rsub {

std::string JobRecord::display_id() const {
  if (!remote_id.empty()) return fmt::format("{}:{}", backend, remote_id);
  return array_parent && array_index ? fmt::format("{}_{}", *array_parent, *array_index) : std::to_string(id);
}

std::string spec_record_fields(const JobSpec& spec) {
  const Resources& r = spec.resources;
  Json depends = Json::array();
  for (const Dependency& d : spec.depends) depends.push_back(fmt::format("{}:{}", dep_type_name(d.type), d.job));
  return Json{{"name", spec.name},
              {"tenant", spec.tenant},
              {"project", spec.project},
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
              {"command", spec.command},
              {"workdir", spec.workdir}}
      .dump();
}

std::string JobRecord::to_json_line() const {
  auto opt = [](const auto& v) { return v ? Json(*v) : Json(nullptr); };
  std::optional<double> elapsed;
  if (start_s) elapsed = end_s.value_or(now_s()) - *start_s;
  const std::string head = Json{{"schema", "rkit.job.v1"},
                                {"id", display_id()},
                                {"backend", backend},
                                {"remote_id", remote_id.empty() ? Json(nullptr) : Json(remote_id)},
                                {"job_id", id},
                                {"array_parent", opt(array_parent)},
                                {"array_index", opt(array_index)}}
                               .dump();
  const std::string tail = Json{{"user", user},
                                {"uid", uid},
                                {"state", state_name(state)},
                                {"reason", reason},
                                {"held", held},
                                {"exit_code", opt(exit_code)},
                                {"signal", signal ? Json(signal_name(*signal)) : Json(nullptr)},
                                {"attempts", attempts},
                                {"submit_unix_s", submit_s},
                                {"start_unix_s", opt(start_s)},
                                {"end_unix_s", opt(end_s)},
                                {"elapsed_s", opt(elapsed)},
                                {"host", host.empty() ? Json(nullptr) : Json(host)},
                                {"cpu_used_s", opt(cpu_s)},
                                {"memory_peak_bytes", opt(peak_memory_bytes)}}
                               .dump();
  const std::string fields = record_fields.empty() ? spec_record_fields(spec) : record_fields;
  const std::string alloc_json = alloc_text.empty() ? alloc_to_json(alloc).dump() : alloc_text;
  // Three objects spliced into one: {head..., fields..., tail..., "alloc": [...]}.
  std::string line = head;
  line.back() = ',';
  line.append(fields, 1, fields.size() - 2);
  line += ',';
  line.append(tail, 1, tail.size() - 2);
  line += ",\"alloc\":";
  line += alloc_json;
  line += '}';
  return line;
}

Json JobRecord::to_json() const { return parse_json(to_json_line(), "job record"); }

}  // namespace rkit::rsub
