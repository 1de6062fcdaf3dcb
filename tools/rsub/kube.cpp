// File: rsub/kube.cpp — Kubernetes manifests for a job spec (kube.hpp).
#include "kube.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

#include "rkit/error.hpp"

namespace rkit::rsub {
namespace {

constexpr std::size_t kMaxLabel = 63;  // DNS-1123 labels and label values alike
// Where the Job controller writes each pod's completion index (0..tasks-1).
constexpr const char* kIndexField = "metadata.annotations['batch.kubernetes.io/job-completion-index']";
constexpr const char* kMasterPort = "29500";  // torch.distributed's default
// activeDeadlineSeconds is an int64; a longer limit (30,000 years) is no limit anyway.
constexpr double kMaxDeadlineS = 1e12;

// ASCII only: the <cctype> functions depend on the locale and on char's signedness.
bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// A label value: at most 63 of [A-Za-z0-9._-], starting and ending alphanumeric, or empty.
// Other characters become '_' ("alice@corp" → "alice_corp"); the annotations keep the text.
std::string label_value(std::string_view text) {
  std::string v;
  for (char c : text) v += is_alnum(c) || c == '.' || c == '-' || c == '_' ? c : '_';
  v.resize(std::min(v.size(), kMaxLabel));
  const auto first = std::find_if(v.begin(), v.end(), is_alnum);
  const auto last = std::find_if(v.rbegin(), v.rend(), is_alnum).base();
  return first < last ? std::string(first, last) : std::string();
}

// A string as a double-quoted scalar. JSON's escapes are YAML's too; YAML also needs DEL,
// the C1 controls and U+FEFF, U+FFFE, U+FFFF escaped (it refuses them raw), and U+0085,
// U+2028 and U+2029 (YAML 1.1 reads them as line breaks: a raw NEL comes back a space).
std::string quote(const std::string& text) {
  // Replacing invalid UTF-8 with U+FFFD, as to_json_line does, leaves the decoding below
  // well-formed input.
  const std::string json = Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  for (std::size_t i = 0; i < json.size();) {
    const auto lead = static_cast<unsigned char>(json[i]);
    const std::size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    std::uint32_t cp = len == 1 ? lead : lead & (0x3Fu >> (len - 1));
    for (std::size_t k = 1; k < len; ++k) cp = cp << 6 | (static_cast<unsigned char>(json[i + k]) & 0x3Fu);
    if (cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF || cp == 0xFFFE ||
        cp == 0xFFFF)
      out += fmt::format("\\u{:04x}", cp);
    else
      out.append(json, i, len);
    i += len;
  }
  return out;
}

bool is_plain_key_char(char c) { return is_alnum(c) || c == '_' || c == '.' || c == '/' || c == '-'; }

std::string yaml_key(const std::string& key) {
  // Words YAML 1.1 reads as bools or null even as keys: kubectl's reader takes "on:" for true.
  static const std::set<std::string, std::less<>> kWords = {"y", "n", "yes", "no", "on", "off"};
  std::string folded(key);
  std::transform(folded.begin(), folded.end(), folded.begin(), lower);
  const bool plain = !key.empty() && !(key[0] >= '0' && key[0] <= '9') && key[0] != '-' && key[0] != '.' &&
                     std::all_of(key.begin(), key.end(), is_plain_key_char) && !kWords.contains(folded) &&
                     folded != "true" && folded != "false" && folded != "null";
  return plain ? key : quote(key);
}

// A value written on its key's or its dash's line: a scalar or an empty container.
std::string inline_value(const Json& v) {
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  if (v.is_string()) return quote(v.get_ref<const std::string&>());
  std::string text = v.dump();  // numbers, bools, null (NaN and infinities dump as null)
  // YAML 1.1 reads "1e+20" as a string: its floats need a '.' before the exponent.
  if (v.is_number_float() && text.find('.') == std::string::npos && text.find('e') != std::string::npos)
    text.insert(text.find('e'), ".0");
  return text;
}

bool is_block(const Json& v) { return v.is_structured() && !v.empty(); }

// A non-empty object or array, every line indented by `indent`.
void emit_block(const Json& v, std::size_t indent, std::string& out) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    for (const auto& [key, child] : v.items()) {
      out += pad + yaml_key(key) + ":";
      if (is_block(child)) {
        out += "\n";
        emit_block(child, indent + 2, out);
      } else {
        out += " " + inline_value(child) + "\n";
      }
    }
    return;
  }
  for (const Json& child : v) {
    if (is_block(child)) {
      // The child's first line goes on the dash's line: "- name: x" then "  value: y".
      std::string inner;
      emit_block(child, indent + 2, inner);
      out += pad + "- " + inner.substr(indent + 2);
    } else {
      out += pad + "- " + inline_value(child) + "\n";
    }
  }
}

Json env_value(const std::string& name, const std::string& value) { return Json{{"name", name}, {"value", value}}; }

Json env_completion_index(const std::string& name) {
  return Json{{"name", name}, {"valueFrom", Json{{"fieldRef", Json{{"fieldPath", kIndexField}}}}}};
}

// The pod failure policy that retries only the listed exit codes and signals, or null
// when none are listed (and then nothing retries: backoffLimit 0).
Json pod_failure_policy(const RetryPolicy& retry) {
  std::set<int> codes(retry.on_exit_codes.begin(), retry.on_exit_codes.end());
  for (int signal : retry.on_signals) codes.insert(128 + signal);  // how a container killed by it exits
  if (codes.empty()) return nullptr;
  // A preempted or evicted pod (Kueue, node drain) is restarted without counting as a failure.
  const Json preempted = {{"action", "Ignore"},
                          {"onPodConditions", Json::array({Json{{"type", "DisruptionTarget"}, {"status", "True"}}})}};
  const Json other_exit = {{"action", "FailJob"},
                           {"onExitCodes", Json{{"containerName", "task"}, {"operator", "NotIn"}, {"values", codes}}}};
  return Json{{"rules", Json::array({preempted, other_exit})}};
}

Json container_resources(const Resources& r, const KubeTarget& target) {
  Json quantities = {{"cpu", std::to_string(r.cpus_per_task)}};
  if (r.memory_bytes > 0) quantities["memory"] = std::to_string(r.memory_bytes);
  if (r.gpus_per_task > 0) quantities[target.gpu_resource] = std::to_string(r.gpus_per_task);
  return Json{{"requests", quantities}, {"limits", quantities}};
}

}  // namespace

std::string kube_job_name(const JobSpec& spec, std::int64_t id, std::optional<int> array_index,
                          const std::string& store_tag) {
  std::string name = store_tag.empty() ? "rsub" : "rsub-" + store_tag;
  name += array_index ? fmt::format("-{}-{}", id, *array_index) : fmt::format("-{}", id);
  std::string tail;
  for (char c : spec.name) {
    if (is_alnum(c))
      tail += lower(c);
    else if (!tail.empty() && tail.back() != '-')
      tail += '-';
  }
  if (!tail.empty()) name += "-" + tail;
  // Pod hostnames are "<job>-<index>" and must be DNS-1123 labels too.
  const std::size_t longest = kMaxLabel - fmt::formatted_size("-{}", spec.resources.tasks - 1);
  name.resize(std::min(name.size(), longest));
  while (name.back() == '-') name.pop_back();
  return name;
}

Json kube_manifests(const JobSpec& spec, const KubeTarget& target, std::int64_t id, const std::string& user,
                    std::optional<int> array_index) {
  const std::string& image = spec.kube.image.empty() ? target.image : spec.kube.image;
  if (image.empty())
    throw Error(
        Exit::DataErr, fmt::format("job \"{}\": backend {} needs a container image", spec.name, target.backend),
        "set image under [kubernetes] in the job file, --image, or the backend's image in rsub's configuration");
  const Resources& r = spec.resources;
  const bool gang = r.tasks > 1;
  const std::string name = kube_job_name(spec, id, array_index, target.store_tag);
  const std::string ns = target.namespace_name.empty() ? "default" : target.namespace_name;
  const std::string shown_id = array_index ? fmt::format("{}_{}", id, *array_index) : std::to_string(id);
  const std::string& queue = spec.kube.queue.empty() ? target.queue : spec.kube.queue;

  const std::string id_label = label_value(shown_id);
  const Json labels = {{"rkit.io/job-id", id_label},
                       {"rkit.io/tenant", label_value(spec.tenant)},
                       {"rkit.io/user", label_value(user)},
                       {"rkit.io/backend", label_value(target.backend)}};
  Json job_labels = Json::object();
  if (!queue.empty()) job_labels["kueue.x-k8s.io/queue-name"] = label_value(queue);
  if (!target.priority_class.empty()) job_labels["kueue.x-k8s.io/priority-class"] = label_value(target.priority_class);
  job_labels.update(labels);
  const Json annotations = {{"rkit.io/tenant", spec.tenant},
                            {"rkit.io/user", user},
                            {"rkit.io/project", spec.project},
                            {"rkit.io/priority", std::to_string(spec.priority)}};

  Json env = Json::array();
  for (const auto& [key, value] : spec.env) env.push_back(env_value(key, value));
  env.push_back(env_value("RSUB_JOB_ID", shown_id));
  env.push_back(env_value("RSUB_NTASKS", std::to_string(r.tasks)));
  env.push_back(env_completion_index("RSUB_TASK_ID"));
  if (array_index) env.push_back(env_value("RSUB_ARRAY_INDEX", std::to_string(*array_index)));
  if (gang) {
    env.push_back(env_completion_index("RANK"));
    env.push_back(env_value("WORLD_SIZE", std::to_string(r.tasks)));
    env.push_back(env_value("MASTER_ADDR", fmt::format("{}-0.{}", name, name)));
    env.push_back(env_value("MASTER_PORT", kMasterPort));
  }

  Json container = {{"name", "task"}, {"image", image}, {"command", spec.command}};
  if (!spec.workdir.empty()) container["workingDir"] = spec.workdir;
  container["env"] = env;
  container["resources"] = container_resources(r, target);

  // Never: a failed pod is replaced by the Job (counted by backoffLimit), not restarted in
  // place, which podFailurePolicy requires and which keeps each attempt's logs.
  Json pod = {{"restartPolicy", "Never"}};
  if (gang) pod["subdomain"] = name;  // the Service: pods resolve as <job>-<index>.<job>
  if (r.gpus_per_task > 0 && !r.gpu_type.empty()) {
    const Json match = {{"key", target.gpu_label}, {"operator", "In"}, {"values", Json::array({r.gpu_type})}};
    pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] =
        Json::array({Json{{"matchExpressions", Json::array({match})}}});
  }
  pod["containers"] = Json::array({container});

  const Json policy = pod_failure_policy(spec.retry);
  Json job_spec = {{"completionMode", "Indexed"},
                   {"completions", r.tasks},
                   {"parallelism", r.tasks},
                   {"suspend", true},  // Kueue admits the whole gang by unsuspending it
                   // As locally, only the listed exit codes and signals retry (podFailurePolicy).
                   {"backoffLimit", policy.is_null() ? 0 : spec.retry.max_attempts - 1}};
  if (spec.time_limit_s)
    job_spec["activeDeadlineSeconds"] =
        static_cast<std::int64_t>(std::ceil(std::min(*spec.time_limit_s, kMaxDeadlineS)));
  if (!policy.is_null()) job_spec["podFailurePolicy"] = policy;
  job_spec["template"] = Json{{"metadata", Json{{"labels", Json{{"rkit.io/job-id", id_label}}}}}, {"spec", pod}};

  Json out = Json::array();
  if (gang) {
    // Headless: DNS names for the pods, no virtual IP. Addresses are published before the
    // pods are ready so that rank 0's name resolves as soon as the pod has an address.
    const Json service_spec = {
        {"clusterIP", "None"},
        {"selector", Json{{"batch.kubernetes.io/job-name", name}}},  // unique in the namespace, unlike rsub ids
        {"publishNotReadyAddresses", true}};
    out.push_back(Json{{"apiVersion", "v1"},
                       {"kind", "Service"},
                       {"metadata", Json{{"name", name}, {"namespace", ns}, {"labels", labels}}},
                       {"spec", service_spec}});
  }
  out.push_back(
      Json{{"apiVersion", "batch/v1"},
           {"kind", "Job"},
           {"metadata", Json{{"name", name}, {"namespace", ns}, {"labels", job_labels}, {"annotations", annotations}}},
           {"spec", job_spec}});
  return out;
}

std::string to_yaml(const Json& value) {
  if (!is_block(value)) return inline_value(value) + "\n";
  std::string out;
  emit_block(value, 0, out);
  return out;
}

std::string to_yaml_documents(const Json& documents) {
  if (!documents.is_array()) throw Error(Exit::Software, "to_yaml_documents: expected an array of documents");
  std::string out;
  for (const Json& document : documents) {
    if (!out.empty()) out += "---\n";
    out += to_yaml(document);
  }
  return out;
}

}  // namespace rkit::rsub
