#!/usr/bin/env bats
# rsub's Kubernetes backend. No API server can run on these machines: the manifests rsub
# renders (a v1 List, in JSON) are parsed and checked field by field, and submit, ls, wait and
# cancel talk to tests/fakes/fake_kubectl, a FAKE kubectl that records what it is given
# and answers `get jobs` with what the test writes.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  export FAKE_KUBE_DIR=$BATS_TEST_TMPDIR/kube
  mkdir -p "$FAKE_KUBE_DIR"
  cat >"$RKIT_CONFIG" <<CONFIG
[local]
cpus = 2
gpus = 0
[rsub.backends.gke]
kind = "kubernetes"
kubectl = "$RKIT_ROOT/tests/fakes/fake_kubectl"
context = "gke-prod"
namespace = "research"
image = "registry.example/ml:1"
queues = { desk-a = "desk-a-queue" }
refresh = "0s"
submit_retry = "1s"
CONFIG
  cat >train.toml <<'SPEC'
name = "train"
tenant = "desk-a"
command = ["python3", "train.py", "--epochs", "3"]
time_limit = "2h"
[resources]
tasks = 4
cpus_per_task = 8
gpus_per_task = 2
gpu_type = "NVIDIA-H100-80GB-HBM3"
memory = "64G"
[retry]
max_attempts = 3
on_exit_codes = [75]
SPEC
}

teardown() {
  stop_rsub
}

# The items of the v1 Lists on stdin (one, or several one after the other), one per line.
documents() {
  python3 -c '
import json, sys
text, at, decoder = sys.stdin.read(), 0, json.JSONDecoder()
while text[at:].strip():
    doc, at = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List", doc
    for item in doc["items"]:
        print(json.dumps(item))'
}

# Sets what the fake's `get jobs` lists for Job $1 (of backend gke): spec $2, status $3.
kube_job() {
  local jobs=$FAKE_KUBE_DIR/jobs.json
  [[ -e $jobs ]] || echo '{"items": []}' >"$jobs"
  jq --arg n "$1" --argjson spec "$2" --argjson status "$3" \
    '.items |= (map(select(.metadata.name != $n)) + [{"metadata": {"name": $n, "labels": {"rkit.io/backend": "gke"}},
                                                     "spec": $spec, "status": $status}])' "$jobs" >"$jobs.new"
  mv "$jobs.new" "$jobs"
}

@test "a 4-task GPU job renders as a headless Service and a suspended Indexed Job for Kueue" {
  run -0 rsub submit train.toml --backend gke --dry-run
  run -0 documents <<<"$output"
  [[ ${#lines[@]} == 2 ]]
  service=${lines[0]} job=${lines[1]}
  jq -e '.kind == "Service" and .spec.clusterIP == "None" and .metadata.namespace == "research"' <<<"$service"
  jq -e '.apiVersion == "batch/v1" and .kind == "Job" and .metadata.namespace == "research"' <<<"$job"
  jq -e '.metadata.labels["kueue.x-k8s.io/queue-name"] == "desk-a-queue" and .metadata.labels["rkit.io/tenant"] == "desk-a"' <<<"$job"
  jq -e '.spec.completionMode == "Indexed" and .spec.completions == 4 and .spec.parallelism == 4 and .spec.suspend == true' <<<"$job"
  jq -e '.spec.backoffLimit == 2 and .spec.activeDeadlineSeconds == 7200' <<<"$job"
  jq -e '.spec.podFailurePolicy.rules[1] == {"action": "FailJob", "onExitCodes": {"containerName": "task", "operator": "NotIn", "values": [75]}}' <<<"$job"
  pod=$(jq -c .spec.template.spec <<<"$job")
  c=$(jq -c '.containers[0]' <<<"$pod")
  jq -e '.image == "registry.example/ml:1" and .command == ["python3", "train.py", "--epochs", "3"]' <<<"$c"
  jq -e '.resources.limits["nvidia.com/gpu"] == "2" and .resources.limits.cpu == "8" and .resources.requests.cpu == "8"' <<<"$c"
  jq -e '.resources.limits.memory == "68719476736"' <<<"$c"
  jq -e '[.env[] | select(.name == "WORLD_SIZE" or .name == "RSUB_NTASKS") | .value] == ["4", "4"]' <<<"$c"
  jq -e '.env[] | select(.name == "RANK") | .valueFrom.fieldRef.fieldPath | contains("job-completion-index")' <<<"$c"
  jq -e '.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0] ==
         {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}' <<<"$pod"
  # Task 0's address is <job>-0.<service>: the pods' subdomain is the Service, which selects them.
  name=$(jq -r .metadata.name <<<"$job")
  jq -e --arg n "$name" '.restartPolicy == "Never" and .subdomain == $n' <<<"$pod"
  jq -e --arg n "$name" '.metadata.name == $n and .spec.selector["batch.kubernetes.io/job-name"] == $n' <<<"$service"
  jq -e --arg a "$name-0.$name" '.env[] | select(.name == "MASTER_ADDR") | .value == $a' <<<"$c"
}

@test "submit creates the manifests with kubectl; ls, wait and cancel follow the Job" {
  run -0 rsub submit train.toml --backend gke
  id=$output
  name=${id#gke:}
  # rsub-<the store's tag>-<job id>-<name>: unique across rsub stores sharing a namespace.
  [[ $name =~ ^rsub-[0-9a-f]{8}-1-train$ ]]
  grep -qx -- '--context gke-prod -n research create -f -' "$FAKE_KUBE_DIR/calls"
  run -0 documents <"$FAKE_KUBE_DIR/applied.json"
  [[ ${#lines[@]} == 2 ]]
  [[ $(jq -r .metadata.name <<<"${lines[1]}") == "$name" ]]
  kube_job "$name" '{"suspend": true}' '{}'  # not admitted by Kueue yet
  run -0 rsub ls --json
  jq -e '.state == "PENDING" and .backend == "gke" and (.reason | startswith("Suspended"))' <<<"$output"
  kube_job "$name" '{"suspend": false}' '{"active": 4, "startTime": "2026-11-30T10:00:00Z"}'
  run -0 rsub show "$id" --json
  jq -e '.state == "RUNNING" and .start_unix_s == 1796032800' <<<"$output"
  kube_job "$name" '{"suspend": false}' '{"succeeded": 4, "startTime": "2026-11-30T10:00:00Z",
    "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-30T11:00:00Z"}]}'
  run -0 rsub wait "$id"
  run -0 rsub show "$id" --json
  jq -e '.state == "COMPLETED" and .end_unix_s - .start_unix_s == 3600' <<<"$output"
  # Cancel: kubectl deletes the Job and its Service, and rsub records the cancellation.
  run -0 rsub submit train.toml --backend gke
  second=$output
  kube_job "${second#gke:}" '{"suspend": false}' '{"active": 4, "startTime": "2026-11-30T12:00:00Z"}'
  run -0 rsub show "$second" --json
  jq -e '.state == "RUNNING"' <<<"$output"
  run -0 rsub cancel "$second"
  grep -qx -- "--context gke-prod -n research delete --ignore-not-found --wait=false job/${second#gke:} service/${second#gke:}" \
    "$FAKE_KUBE_DIR/calls"
  run rsub wait "$second"
  assert_equal "$status" 143
  run -0 rsub show "$second" --json
  jq -e '.state == "CANCELLED" and (.reason | startswith("cancelled by"))' <<<"$output"
}

@test "a Job deleted behind rsub's back is LOST, not left RUNNING; other backends' Jobs are not read" {
  run -0 rsub --backend gke -t desk-a -- sleep 99
  id=$output
  kube_job "${id#gke:}" '{}' '{"active": 1, "startTime": "2026-11-30T10:00:00Z"}'
  # Another rsub backend's Job of the same name, in the same namespace: not this one.
  jq '.items += [{"metadata": {"name": "other", "labels": {"rkit.io/backend": "aws"}}, "spec": {}, "status": {}}]' \
    "$FAKE_KUBE_DIR/jobs.json" >j && mv j "$FAKE_KUBE_DIR/jobs.json"
  run -0 rsub show "$id" --json
  jq -e '.state == "RUNNING"' <<<"$output"
  echo '{"items": []}' >"$FAKE_KUBE_DIR/jobs.json"
  run rsub wait "$id"
  assert_equal "$status" 1
  run -0 rsub show "$id" --json
  jq -e '.state == "LOST" and .reason == "no longer listed by Kubernetes"' <<<"$output"
}

@test "--hold, hold, dependencies and a tenant without a queue are refused for Kubernetes (65)" {
  run --separate-stderr rsub --backend gke --hold -- true
  assert_equal "$status" 65
  [[ $stderr == *'jobs cannot be submitted held there'* ]]
  run --separate-stderr rsub --backend gke -t desk-b -- true
  assert_equal "$status" 65
  [[ $stderr == *'no Kueue queue for tenant "desk-b"'* ]]
  run -0 rsub --backend gke -t desk-a -- true
  first=$output
  run --separate-stderr rsub --backend gke --depends "afterok:$first" -- true
  assert_equal "$status" 65
  [[ $stderr == *'jobs cannot depend on other jobs there'* ]]
  run --separate-stderr rsub hold "$first"
  assert_equal "$status" 65
  [[ $stderr == *'jobs cannot be held or released there'* ]]
}

@test "a failed Job reaches rsub wait as 1; one past its deadline as TIMEOUT (124)" {
  run -0 rsub --backend gke -t desk-a -- false
  id=$output
  kube_job "${id#gke:}" '{}' '{"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}'
  run rsub wait "$id"
  assert_equal "$status" 1
  run -0 rsub --backend gke -t desk-a -- sleep 99
  id=$output
  kube_job "${id#gke:}" '{}' '{"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}'
  run rsub wait "$id"
  assert_equal "$status" 124
}

@test "no API server: one line, exit 69, nothing stored; a job without an image: 65" {
  touch "$FAKE_KUBE_DIR/down"
  run --separate-stderr rsub submit train.toml --backend gke
  assert_equal "$status" 69
  assert_one_line_stderr
  [[ $stderr == *'cannot reach the API server'* ]]
  rm "$FAKE_KUBE_DIR/down"
  assert_equal "$(rsub ls --all --json | wc -l)" 0
  # Bytes that are not UTF-8 (fine locally and on Slurm): a Kubernetes object cannot carry them.
  for args in "-- printf $'\\xff'" "-e $'V=\\xfe' -- true" "-C $'/tmp/\\xff' -- true"; do
    run --separate-stderr eval rsub --backend gke -t desk-a "$args"
    assert_equal "$status" 65
    assert_one_line_stderr
    [[ $stderr == *'is not UTF-8 text, which a Kubernetes object cannot carry'* ]]
  done
  sed -i '/^image/d' "$RKIT_CONFIG"
  run --separate-stderr rsub --backend gke -t desk-a -- true
  assert_equal "$status" 65
  [[ $stderr == *'needs a container image'* ]]
  assert_equal "$(rsub ls --all --json | wc -l)" 0
}

@test "an API server that times out on create: exit 69, the job kept under its Job's name, then followed" {
  # A timeout, unlike a refused connection, may have created the Jobs: rsub keeps the job
  # (its Job names are rsub's own), says so, and a later refresh finds it or marks it LOST.
  touch "$FAKE_KUBE_DIR/slow"
  run --separate-stderr rsub submit train.toml --backend gke
  assert_equal "$status" 69
  assert_one_line_stderr
  [[ $stderr == *'cannot reach the API server'*'the Jobs may still have been created'*'kept as job 1'* ]]
  rm "$FAKE_KUBE_DIR/slow"
  run -0 rsub ls --all --json --cached
  name=$(jq -r 'select(.id == "gke:" + .remote_id) | .remote_id' <<<"$output")
  [[ $name =~ ^rsub-[0-9a-f]{8}-1-train$ ]]
  # The API server had created it after all: the next refresh follows it.
  kube_job "$name" '{"suspend": false}' '{"active": 4, "startTime": "2026-11-30T10:00:00Z"}'
  run -0 rsub show "gke:$name" --json
  jq -e '.state == "RUNNING"' <<<"$output"
}

@test "an unknown backend is a usage error naming the configured ones" {
  run --separate-stderr rsub --backend nosuch -- true
  assert_equal "$status" 64
  assert_one_line_stderr
  [[ $stderr == *'backend "nosuch" is not configured (configured: local, gke, and auto)'* ]]
}

@test "--backend auto: a job that fits locally stays; one that does not goes to Kubernetes, with the reason" {
  printf 'assumed_wait = "10m"\n' >>"$RKIT_CONFIG"
  run --separate-stderr rsub --backend auto --dry-run -t desk-a -- true
  assert_success
  assert_equal "${stderr_lines[0]}" "rsub: --backend auto chose local: fits now (2 of 2 cores and 0 of 0 GPUs free)"
  run --separate-stderr rsub --backend auto --dry-run -t desk-a -g 1 -- true
  assert_success
  assert_equal "${stderr_lines[0]}" "rsub: --backend auto chose gke: local too big: needs 1 core and 1 GPU, the machine has 2 and 0; expected wait 10m"
  run -0 documents <<<"$output"
  jq -e '.kind == "Job"' <<<"${lines[0]}"
  # Held: Kubernetes cannot take it, and nothing else can.
  run --separate-stderr rsub --backend auto --dry-run -t desk-a -g 1 --hold -- true
  assert_equal "$status" 69
  [[ $stderr == *"gke: not eligible: kubernetes backend \"gke\": jobs cannot be submitted held there"* ]]
}
