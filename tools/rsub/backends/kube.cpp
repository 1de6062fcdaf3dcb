// File: rsub/backends/kube.cpp — Kubernetes manifests for a job spec (kube.hpp).
#include "backends/kube.hpp"

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
  Json labels = {{"rkit.io/job-id", id_label},
                 {"rkit.io/tenant", label_value(spec.tenant)},
                 {"rkit.io/user", label_value(user)},
                 {"rkit.io/backend", label_value(target.backend)}};
  // A workflow's jobs: `kubectl get jobs -l rkit.io/workflow=W,rkit.io/rule=R`.
  if (!spec.workflow.empty()) labels["rkit.io/workflow"] = label_value(spec.workflow);
  if (!spec.rule.empty()) labels["rkit.io/rule"] = label_value(spec.rule);
  Json job_labels = Json::object();
  if (!queue.empty()) job_labels["kueue.x-k8s.io/queue-name"] = label_value(queue);
  if (!target.priority_class.empty()) job_labels["kueue.x-k8s.io/priority-class"] = label_value(target.priority_class);
  job_labels.update(labels);
  Json annotations = {{"rkit.io/tenant", spec.tenant},
                      {"rkit.io/user", user},
                      {"rkit.io/project", spec.project},
                      {"rkit.io/priority", std::to_string(spec.priority)}};
  if (!spec.workflow.empty()) annotations["rkit.io/workflow"] = spec.workflow;
  if (!spec.rule.empty()) annotations["rkit.io/rule"] = spec.rule;

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

}  // namespace rkit::rsub
