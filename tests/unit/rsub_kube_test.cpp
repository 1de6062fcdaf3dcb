#include "backends/kube.hpp"

#include <gtest/gtest.h>
#include <stdio.h>

#include <algorithm>
#include <regex>
#include <string>

#include "rkit/error.hpp"
#include "rkit/jsonl.hpp"
#include "test_support.hpp"

namespace rkit::rsub {
namespace {

using testing::error_of;

const Json& at(const Json& j, const std::string& pointer) { return j.at(Json::json_pointer(pointer)); }
bool has(const Json& j, const std::string& pointer) { return j.contains(Json::json_pointer(pointer)); }

const std::regex kDnsLabel("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
const std::regex kLabelValue("([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?");

// 4 tasks of 8 cores, 2 H100s and 64 GiB each; 3 attempts, retried on exit 75 or SIGKILL.
JobSpec gang_spec() {
  JobSpec s;
  s.name = "train";
  s.tenant = "desk-a";
  s.project = "alpha";
  s.command = {"python3", "train.py", "--epochs", "3"};
  s.workdir = "/data/train";
  s.env = {{"SEED", "42"}, {"NCCL_DEBUG", "INFO"}};
  s.resources = {
      .tasks = 4, .cpus_per_task = 8, .gpus_per_task = 2, .gpu_type = "H100", .memory_bytes = 64ull << 30, .nodes = 2};
  s.time_limit_s = 3600.25;
  s.retry = {.max_attempts = 3, .on_exit_codes = {75}, .on_signals = {9}, .backoff_s = 10};
  s.priority = 7;
  s.backend = "gke";
  return s;
}

KubeTarget gke() {
  return {.backend = "gke",
          .namespace_name = "ml",
          .image = "ghcr.io/acme/train:1.2",
          .queue = "desk-a-queue",
          .priority_class = "high"};
}

Json one_task_spec_manifests(const JobSpec& spec, const KubeTarget& target = gke()) {
  Json m = kube_manifests(spec, target, 7, "alice", std::nullopt);
  EXPECT_EQ(m.size(), 1u);
  return m[0];
}

TEST(RsubKube, GangJobHasEveryField) {
  const Json m = kube_manifests(gang_spec(), gke(), 12, "alice", std::nullopt);
  ASSERT_TRUE(m.is_array());
  ASSERT_EQ(m.size(), 2u);
  const Json& svc = m[0];
  const Json& job = m[1];
  const std::string name = "rsub-12-train";
  const Json rkit_labels = {
      {"rkit.io/job-id", "12"}, {"rkit.io/tenant", "desk-a"}, {"rkit.io/user", "alice"}, {"rkit.io/backend", "gke"}};

  // The headless Service comes first, so that the pods' names resolve.
  EXPECT_EQ(svc["apiVersion"], "v1");
  EXPECT_EQ(svc["kind"], "Service");
  EXPECT_EQ(at(svc, "/metadata/name"), name);
  EXPECT_EQ(at(svc, "/metadata/namespace"), "ml");
  EXPECT_EQ(at(svc, "/metadata/labels"), rkit_labels);
  EXPECT_EQ(at(svc, "/spec/clusterIP"), "None");
  EXPECT_EQ(at(svc, "/spec/selector"), (Json{{"batch.kubernetes.io/job-name", name}}));

  EXPECT_EQ(job["apiVersion"], "batch/v1");
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(at(job, "/metadata/name"), name);
  EXPECT_EQ(at(job, "/metadata/namespace"), "ml");
  Json job_labels = {{"kueue.x-k8s.io/queue-name", "desk-a-queue"}, {"kueue.x-k8s.io/priority-class", "high"}};
  job_labels.update(rkit_labels);
  EXPECT_EQ(at(job, "/metadata/labels"), job_labels);
  EXPECT_EQ(at(job, "/metadata/annotations"), (Json{{"rkit.io/tenant", "desk-a"},
                                                    {"rkit.io/user", "alice"},
                                                    {"rkit.io/project", "alpha"},
                                                    {"rkit.io/priority", "7"}}));

  EXPECT_EQ(at(job, "/spec/completionMode"), "Indexed");
  EXPECT_EQ(at(job, "/spec/completions"), 4);
  EXPECT_EQ(at(job, "/spec/parallelism"), 4);
  EXPECT_EQ(at(job, "/spec/suspend"), true);
  EXPECT_EQ(at(job, "/spec/backoffLimit"), 2);
  EXPECT_EQ(at(job, "/spec/activeDeadlineSeconds"), 3601);  // rounded up
  const Json rules = at(job, "/spec/podFailurePolicy/rules");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0],
            (Json{{"action", "Ignore"},
                  {"onPodConditions", Json::array({Json{{"type", "DisruptionTarget"}, {"status", "True"}}})}}));
  EXPECT_EQ(rules[1],
            (Json{{"action", "FailJob"},
                  {"onExitCodes",
                   Json{{"containerName", "task"}, {"operator", "NotIn"}, {"values", Json::array({75, 137})}}}}));

  EXPECT_EQ(at(job, "/spec/template/metadata/labels"), (Json{{"rkit.io/job-id", "12"}}));
  const Json& pod = at(job, "/spec/template/spec");
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_EQ(pod["subdomain"], name);
  EXPECT_EQ(at(pod, "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"),
            Json::parse(R"([{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                   "values": ["H100"]}]}])"));
  ASSERT_EQ(pod["containers"].size(), 1u);
  const Json& c = pod["containers"][0];
  EXPECT_EQ(c["name"], "task");
  EXPECT_EQ(c["image"], "ghcr.io/acme/train:1.2");
  EXPECT_EQ(c["command"], Json::array({"python3", "train.py", "--epochs", "3"}));
  EXPECT_EQ(c["workingDir"], "/data/train");
  const Json index = {
      {"fieldRef", {{"fieldPath", "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}};
  const Json env = Json::array({
      Json{{"name", "NCCL_DEBUG"}, {"value", "INFO"}},
      Json{{"name", "SEED"}, {"value", "42"}},
      Json{{"name", "RSUB_JOB_ID"}, {"value", "12"}},
      Json{{"name", "RSUB_NTASKS"}, {"value", "4"}},
      Json{{"name", "RSUB_TASK_ID"}, {"valueFrom", index}},
      Json{{"name", "RANK"}, {"valueFrom", index}},
      Json{{"name", "WORLD_SIZE"}, {"value", "4"}},
      Json{{"name", "MASTER_ADDR"}, {"value", "rsub-12-train-0.rsub-12-train"}},
      Json{{"name", "MASTER_PORT"}, {"value", "29500"}},
  });
  EXPECT_EQ(c["env"], env);
  const Json quantities = {{"cpu", "8"}, {"memory", "68719476736"}, {"nvidia.com/gpu", "2"}};
  EXPECT_EQ(c["resources"], (Json{{"requests", quantities}, {"limits", quantities}}));
}

TEST(RsubKube, OneTaskJobHasNoServiceAndNoRendezvous) {
  JobSpec s = gang_spec();
  s.resources = Resources{};
  s.resources.cpus_per_task = 2;
  s.time_limit_s.reset();
  s.retry = RetryPolicy{};
  s.retry.max_attempts = 2;
  s.workdir.clear();
  s.kube = {.image = "busybox:1", .queue = "own-queue"};  // the spec's hints win over the target's
  const Json job = one_task_spec_manifests(s);
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(at(job, "/metadata/labels/kueue.x-k8s.io~1queue-name"), "own-queue");
  EXPECT_EQ(at(job, "/spec/completions"), 1);
  EXPECT_EQ(at(job, "/spec/backoffLimit"), 0);  // as locally, only listed exit codes and signals retry
  EXPECT_FALSE(has(job, "/spec/activeDeadlineSeconds"));
  EXPECT_FALSE(has(job, "/spec/podFailurePolicy"));
  const Json& pod = at(job, "/spec/template/spec");
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_FALSE(pod.contains("subdomain"));
  EXPECT_FALSE(pod.contains("affinity"));
  const Json& c = pod["containers"][0];
  EXPECT_EQ(c["image"], "busybox:1");
  EXPECT_FALSE(c.contains("workingDir"));
  for (const Json& var : c["env"]) {
    EXPECT_NE(var["name"], "MASTER_ADDR");
    EXPECT_NE(var["name"], "RANK");
    EXPECT_NE(var["name"], "RSUB_ARRAY_INDEX");
  }
  EXPECT_EQ(c["resources"]["limits"], (Json{{"cpu", "2"}}));
}

TEST(RsubKube, DefaultsOfTheTarget) {
  JobSpec s = gang_spec();
  s.resources.tasks = 1;
  s.resources.gpu_type.clear();  // any GPU: no affinity
  KubeTarget t;
  t.backend = "gke";
  t.image = "img";
  t.gpu_resource = "amd.com/gpu";
  const Json job = one_task_spec_manifests(s, t);
  EXPECT_EQ(at(job, "/metadata/namespace"), "default");
  EXPECT_FALSE(at(job, "/metadata/labels").contains("kueue.x-k8s.io/queue-name"));
  EXPECT_FALSE(at(job, "/metadata/labels").contains("kueue.x-k8s.io/priority-class"));
  EXPECT_FALSE(has(job, "/spec/template/spec/affinity"));
  EXPECT_EQ(at(job, "/spec/template/spec/containers/0/resources/limits/amd.com~1gpu"), "2");
}

TEST(RsubKube, ArrayElement) {
  const Json m = kube_manifests(gang_spec(), gke(), 12, "alice", 3);
  const Json& job = m[1];
  EXPECT_EQ(at(job, "/metadata/name"), "rsub-12-3-train");
  EXPECT_EQ(at(job, "/metadata/labels/rkit.io~1job-id"), "12_3");
  EXPECT_EQ(at(m[0], "/spec/selector/batch.kubernetes.io~1job-name"), "rsub-12-3-train");
  const Json& env = at(job, "/spec/template/spec/containers/0/env");
  EXPECT_NE(std::find(env.begin(), env.end(), Json{{"name", "RSUB_JOB_ID"}, {"value", "12_3"}}), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), Json{{"name", "RSUB_ARRAY_INDEX"}, {"value", "3"}}), env.end());
  EXPECT_NE(
      std::find(env.begin(), env.end(), Json{{"name", "MASTER_ADDR"}, {"value", "rsub-12-3-train-0.rsub-12-3-train"}}),
      env.end());
}

TEST(RsubKube, RetryCodesAreSortedAndUnique) {
  JobSpec s = gang_spec();
  s.retry = {.max_attempts = 5, .on_exit_codes = {200, 137, 75}, .on_signals = {15, 9}};
  const Json job = kube_manifests(s, gke(), 1, "alice", std::nullopt)[1];
  EXPECT_EQ(at(job, "/spec/podFailurePolicy/rules/1/onExitCodes/values"), Json::array({75, 137, 143, 200}));
  EXPECT_EQ(at(job, "/spec/backoffLimit"), 4);
}

TEST(RsubKube, JobNamesAreDnsLabels) {
  JobSpec s = gang_spec();
  s.name = "Train_ResNet.50";
  EXPECT_EQ(kube_job_name(s, 7, std::nullopt), "rsub-7-train-resnet-50");
  s.name = "";
  EXPECT_EQ(kube_job_name(s, 7, std::nullopt), "rsub-7");
  s.name = "!!! ";
  EXPECT_EQ(kube_job_name(s, 7, 2), "rsub-7-2");

  s.name = "--My  Very__Long/Experiment: ünïcode — \"quoted\" ";
  while (s.name.size() < 300) s.name += "Run #42 (retry) ";
  for (int tasks : {1, 4, 1000}) {
    s.resources.tasks = tasks;
    const std::string name = kube_job_name(s, 123456789, 99);
    EXPECT_TRUE(std::regex_match(name, kDnsLabel)) << name;
    EXPECT_TRUE(name.starts_with("rsub-123456789-99-my-very-long-experiment-n-code-quoted-")) << name;
    // The last pod's hostname, <job>-<tasks-1>, must be a DNS label too.
    EXPECT_LE(name.size() + 1 + std::to_string(tasks - 1).size(), 63u) << name;
    EXPECT_EQ(at(kube_manifests(s, gke(), 123456789, "u", 99).back(), "/metadata/name"), name);
  }
}

TEST(RsubKube, LabelValuesAreSanitised) {
  JobSpec s = gang_spec();
  s.resources.tasks = 1;
  s.tenant = "-Desk A/ñ-";
  const std::string user = "alice@corp.example";
  KubeTarget t = gke();
  t.backend = std::string(100, 'b') + "!";
  t.queue = "queue with spaces";
  const Json job = kube_manifests(s, t, 5, user, std::nullopt)[0];
  const Json& labels = at(job, "/metadata/labels");
  for (const auto& [key, value] : labels.items()) {
    const std::string v = value.get<std::string>();
    EXPECT_LE(v.size(), 63u) << key;
    EXPECT_TRUE(std::regex_match(v, kLabelValue)) << key << ": " << v;
  }
  EXPECT_EQ(labels["rkit.io/tenant"], "Desk_A");
  EXPECT_EQ(labels["rkit.io/user"], "alice_corp.example");
  EXPECT_EQ(labels["rkit.io/backend"], std::string(63, 'b'));
  EXPECT_EQ(labels["kueue.x-k8s.io/queue-name"], "queue_with_spaces");
  // The annotations keep the text as typed.
  EXPECT_EQ(at(job, "/metadata/annotations/rkit.io~1tenant"), "-Desk A/ñ-");
  EXPECT_EQ(at(job, "/metadata/annotations/rkit.io~1user"), user);
}

TEST(RsubKube, MissingImageIsAnError) {
  JobSpec s = gang_spec();
  KubeTarget t = gke();
  t.image.clear();
  const Error e = error_of([&] { kube_manifests(s, t, 1, "alice", std::nullopt); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("needs a container image"), std::string::npos) << e.what();
  s.kube.image = "img";
  EXPECT_NO_THROW(kube_manifests(s, t, 1, "alice", std::nullopt));
}

}  // namespace
}  // namespace rkit::rsub
