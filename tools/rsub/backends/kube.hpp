// File: rsub/backends/kube.hpp
//
// The Kubernetes form of a job: the objects `kubectl apply -f -` gets, for clusters that
// gang-schedule with Kueue. A job becomes an Indexed Job of `tasks` pods, created
// suspended so that Kueue admits all of them at once (by unsuspending it) or none; a job
// of several tasks also gets a headless Service, so that its pods find each other by name
// (task 0 is <job>-0.<job>) and torch.distributed can rendezvous there.
//
//   KubeTarget target{.backend = "gke", .namespace_name = "ml", .image = image,
//                     .queue = queue_of_tenant};
//   Json objects = kube_manifests(spec, target, id, user, std::nullopt);
//   pipe_to("kubectl create -f -", Json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", objects}}.dump());
//
// What a pod sees: the command as argv in the container "task", spec.env, then RSUB_JOB_ID,
// RSUB_NTASKS, RSUB_TASK_ID (the completion index), RSUB_ARRAY_INDEX (array elements
// only), and with several tasks RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (29500).
//
// Mapping of the spec: resources are per pod (requests = limits); resources.nodes is not
// used, since Kubernetes places the pods; gpu_type must be the value of the node label
// `gpu_label` (exact, as Kubernetes matches labels). Retries are pod restarts, and as
// locally only the exit codes and signals of on_exit_codes/on_signals retry: a pod failure
// policy fails the job on any other exit (without those lists backoffLimit is 0); the
// Job's backoffLimit is max_attempts - 1 counted over all pods, its own backoff (10 s
// doubling, capped at 6 min) replaces retry.backoff_s; a preempted pod never counts.
// depends, hold and array bookkeeping stay with the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/spec.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rsub {

// Where and how a job runs: filled by the caller from the backend's configuration.
struct KubeTarget {
  std::string backend;         // the backend's name in rsub's config ("gke"), a label
  std::string namespace_name;  // empty: "default"
  std::string image;           // used when spec.kube.image is empty
  std::string queue;           // Kueue LocalQueue for the tenant; spec.kube.queue wins; empty: no label
  std::string priority_class;  // Kueue WorkloadPriorityClass; empty: none
  std::string gpu_resource = "nvidia.com/gpu";
  std::string gpu_label = "nvidia.com/gpu.product";  // node label matched against gpu_type
  std::string store_tag{};  // the rsub store's tag (Store::tag), in Job names: unique across stores
};

// The objects for job `id` of `user`, as a JSON array of objects: the headless Service
// first when resources.tasks > 1 (it must exist before the pods resolve names), then the
// batch/v1 Job. For an array element, `id` is the array's id and `array_index` the
// element's index; the job is then known as "id_index", as rsub shows it. Label values
// are sanitised to Kubernetes' syntax; annotations keep tenant, user, project and
// priority as they are. Throws Error(DataErr) when neither the spec nor the target names
// a container image. Pure: no I/O.
Json kube_manifests(const JobSpec& spec, const KubeTarget& target, std::int64_t id, const std::string& user,
                    std::optional<int> array_index);

// The name of the Job and of its Service: "rsub[-<store tag>]-<id>[-<index>]-<name>", the spec's name
// lowercased with every run of other characters than [a-z0-9] made one '-', truncated so
// that the last pod's hostname "<job>-<tasks-1>" is still a DNS-1123 label (<= 63
// characters; the Job controller would fail to create the pod otherwise).
std::string kube_job_name(const JobSpec& spec, std::int64_t id, std::optional<int> array_index,
                          const std::string& store_tag = {});

}  // namespace rkit::rsub
