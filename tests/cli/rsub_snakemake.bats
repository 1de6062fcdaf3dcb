#!/usr/bin/env bats
# rsub as Snakemake's cluster (rsub(1), SNAKEMAKE): the real Snakemake 7 (Debian's),
# through rkit's profile (rsub workflow). Each test has its own rsub (rsub_sandbox) and
# stops it, and any snakemake it started, by pid in teardown.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  command -v snakemake >/dev/null || { echo "snakemake is not installed (packaging/install-deps.sh tests)" >&2; return 1; }
  mkdir -p "$BATS_TEST_TMPDIR/wf"
  cd "$BATS_TEST_TMPDIR/wf"
  rsub_sandbox
  export TMPDIR=$BATS_TEST_TMPDIR
  unset RSUB_WORKFLOW
}

teardown() {
  if [[ -n ${SMK_PID:-} ]]; then
    kill -TERM "$SMK_PID" 2>/dev/null
    wait_exit "$SMK_PID" 5 || kill -KILL "$SMK_PID" 2>/dev/null
  fi
  [[ -n ${OTHER_PIDS:-} ]] && kill $OTHER_PIDS 2>/dev/null
  [[ -n ${EVIL:-} ]] && rm -rf "$EVIL"
  stop_rsub
}

# fan_out N SHELL: a Snakefile whose rule "step" makes out/0.txt .. out/N-1.txt with SHELL.
fan_out() {
  printf 'rule all:\n    input: expand("out/{i}.txt", i=range(%s))\nrule step:\n    output: "out/{i}.txt"\n    shell: "%s"\n' \
    "$1" "$2" >Snakefile
}

# wait_exit PID SECONDS: waits for the background job PID to end, at most SECONDS; its
# exit status, or 124 (and the job left running) when it has not ended by then.
wait_exit() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || { echo "process $1 still runs after $2 s" >&2; return 124; }
    sleep 0.1
  done
  wait "$1"
}

# wait_jobs WORKFLOW STATE N [RULE]: waits (at most 20 s) until N of the workflow's jobs
# (of RULE, when given) are in STATE.
wait_jobs() {
  local n=0
  for _ in $(seq 200); do
    n=$(rsub ls --all --workflow "$1" --json |
      jq -s --arg s "$2" --arg r "${4:-}" 'map(select(.state == $s and ($r == "" or .rule == $r))) | length')
    ((n >= $3)) && return 0
    sleep 0.1
  done
  echo "$n of workflow $1's ${4:-} jobs are $2, not $3" >&2
  rsub ls --all >&2
  return 1
}

# ended_within WORKFLOW RULE T0 SECONDS: every job of RULE in WORKFLOW ended (its record's
# end, as rsub stored it when it cancelled the job) at most SECONDS after T0.
ended_within() {
  rsub ls --all --workflow "$1" --json |
    jq -e -s --arg r "$2" --argjson t0 "$3" --argjson s "$4" \
      'map(select(.rule == $r)) | length > 0 and all(.end_unix_s != null and .end_unix_s - $t0 <= $s)'
}

@test "rsub workflow runs each rule as an rsub job that carries its workflow and rule" {
  cat >Snakefile <<'EOF'
rule all:
    input: "report.txt"
rule gen:
    output: "data/{i}.txt"
    shell: "echo {wildcards.i} > {output}"
rule report:
    input: expand("data/{i}.txt", i=range(3))
    output: "report.txt"
    shell: "cat {input} | paste -sd+ | bc > {output}"
EOF
  run --separate-stderr rsub workflow --cores 2
  assert_success
  [[ $(cat report.txt) == 3 ]]
  run rsub ls --all --workflow wf --json
  assert_success
  echo "$output" | jq -e -s 'length == 4 and all(.workflow == "wf" and .state == "COMPLETED")
                             and (map(.rule) | sort) == ["gen", "gen", "gen", "report"]'
  run rsub ls --all --workflow other --json
  assert_output ""
  # Cost per stage: each rule's row sums its jobs.
  run rsub ls --all --json
  records=$output
  run --separate-stderr rcost report --by workflow,rule --json - <<<"$records"
  assert_success
  echo "$output" | jq -e -s 'map(select(.schema == "rkit.cost.v1" and .workflow == "wf")) | map({(.rule): .jobs})
                             | add == {"gen": 3, "report": 1}'
  # Nothing to do: no job.
  run rsub workflow --cores 2
  assert_success
  [[ $(rsub ls --all --workflow wf --json | jq -s length) == 4 ]]
}

@test "the example pipeline: every rule an rsub job, Snakemake's own results, and each stage's cost the sum of its jobs'" {
  pipeline=$RKIT_ROOT/examples/pipeline
  mkdir own
  (cd own && snakemake -s "$pipeline/Snakefile" --cores 2 -q >/dev/null 2>&1)  # the local executor, no rsub
  run --separate-stderr rsub workflow -s "$pipeline/Snakefile" -q
  assert_success
  [[ $(head -n 1 report.txt) =~ ^model:\ 200\ steps\ on\ 2\ ranks,\ eval\ loss\ [0-9.]+,\ 2\ checkpoints$ ]]
  diff -r own/backtest backtest
  cmp own/report.txt report.txt
  [[ $(wc -l <report.txt) == 5 ]]  # the header, two held-out days, the total
  jq -e -s 'length == 2 and all(.bars == 379 and .symbols == 3 and (.sharpe | type) == "number")' backtest/*.json
  [[ $(cd model/ckpt && echo *.rkpt) == "step-100.rkpt step-200.rkpt" ]]
  rckpt verify model/ckpt/step-200.rkpt >/dev/null
  rsub ls --all --workflow wf --json >records.jsonl
  records=$(<records.jsonl)
  # 18 market (6 dates x 3 symbols), 6 features, dataset, train, 2 backtests, report.
  jq -e -s 'length == 29 and all(.state == "COMPLETED")
            and (group_by(.rule) | map({(.[0].rule): length}) | add)
                == {"market": 18, "features": 6, "dataset": 1, "train": 1, "backtest": 2, "report": 1}
            and (map(select(.rule == "train"))[0].cpus == 2)' <<<"$records"
  since=$(jq -s 'map(.submit_unix_s) | min | floor' <<<"$records")
  until=$(jq -s 'map(.end_unix_s) | max | floor + 1' <<<"$records")
  prices=$FIXTURES/rcost/prices.toml
  check=$RKIT_ROOT/tests/cli/rcost_check.py
  rcost --prices "$prices" report --by workflow,rule --since "@$since" --until "@$until" --json records.jsonl >stages.jsonl
  python3 "$check" totals --by workflow,rule --prices "$prices" --since "$since" --until "$until" records.jsonl >stages.expected
  run python3 "$check" compare --by workflow,rule --expect stages.expected --rcost stages.jsonl
  echo "$output"
  assert_success
  [[ $(jq -s 'map(select(.workflow == "wf")) | length' stages.expected) == 6 ]]
}

@test "rule resources become the job's: threads, mem_mb, gpus, runtime, tenant, project" {
  cat >Snakefile <<'EOF'
rule big:
    output: "big.txt"
    threads: 2
    resources: mem_mb=300, runtime=2, project="alpha"
    shell: "touch {output}"
EOF
  RSUB_WORKFLOW=sized run --separate-stderr rsub workflow --cores 2
  assert_success
  run rsub ls --all --workflow sized --json
  echo "$output" | jq -e '.rule == "big" and .cpus_per_task == 2 and .memory_per_task_bytes == 300000000
                          and .time_limit_s == 120 and .project == "alpha" and .gpus == 0'
  cat >Snakefile <<'EOF'
rule gpu:
    output: "gpu.txt"
    resources: gpus=1
    shell: "touch {output}"
EOF
  # This sandbox's machine has no GPU: rsub refuses the job, and Snakemake says so.
  RSUB_WORKFLOW=gpu run --separate-stderr rsub workflow --cores 2
  assert_failure
  [[ $stderr == *"Error submitting jobscript"* ]]
}

@test "on Kubernetes (the FAKE kubectl): one Job per rule's job, labelled with workflow and rule; Ctrl-C deletes them" {
  export FAKE_KUBE_DIR=$BATS_TEST_TMPDIR/kube
  mkdir -p "$FAKE_KUBE_DIR"
  touch "$FAKE_KUBE_DIR/running"  # the fake's cluster admits and runs what is created
  cat >>"$RKIT_CONFIG" <<EOF
[rsub.backends.gke]
kind = "kubernetes"
kubectl = "$RKIT_ROOT/tests/fakes/fake_kubectl"
namespace = "research"
image = "registry.example/ml:1"
queues = { desk-a = "desk-a-queue" }
refresh = "0s"
EOF
  cat >Snakefile <<'EOF'
rule all:
    input: "report.txt"
rule gen:
    output: "data/{i}.txt"
    threads: 2
    resources: mem_mb=500, runtime=30
    shell: "echo {wildcards.i} > {output}"
rule report:
    input: expand("data/{i}.txt", i=range(3))
    output: "report.txt"
    shell: "cat {input} > {output}"
EOF
  set -m
  rsub workflow --default-resources "backend='gke'" "tenant='desk-a'" >smk.log 2>&1 &
  SMK_PID=$!
  set +m
  wait_jobs wf RUNNING 3 gen
  jq -c '.items[] | select(.kind == "Job")' "$FAKE_KUBE_DIR/applied.json" >jobs.jsonl
  [[ $(wc -l <jobs.jsonl) == 3 ]]  # the first stage only: report waits for its inputs
  jq -e -s 'all(.metadata.labels["rkit.io/workflow"] == "wf" and .metadata.labels["rkit.io/rule"] == "gen"
                and .metadata.labels["kueue.x-k8s.io/queue-name"] == "desk-a-queue"
                and .metadata.annotations["rkit.io/workflow"] == "wf"
                and .spec.activeDeadlineSeconds == 1800
                and (.spec.template.spec.containers[0] | .image == "registry.example/ml:1"
                     and .resources.requests.cpu == "2" and .resources.limits.memory == "500000000"
                     and .command[0:2] == ["/bin/sh", "-c"] and (.command[2] | contains("--target-jobs"))
                     and (.command[2] | contains("rsub-smk-job.py"))))' jobs.jsonl
  start=$EPOCHREALTIME
  kill -INT "$SMK_PID"
  wait_jobs wf CANCELLED 3 gen
  ended_within wf gen "$start" 2
  for name in $(jq -r .metadata.name jobs.jsonl); do
    grep -q -- "delete --ignore-not-found --wait=false.* job/$name" "$FAKE_KUBE_DIR/calls" || { cat "$FAKE_KUBE_DIR/calls"; false; }
  done
  rc=0
  wait_exit "$SMK_PID" 10 || rc=$?
  ((rc != 124))
  SMK_PID=
}

@test "rkit's quick in-job start changes nothing a rule sees: run: blocks, params, s3:// paths, a group job" {
  cat >Snakefile <<'EOF'
rule all:
    input: "run.json", "b.txt"
rule inspect:
    output: "run.json"
    params: p=lambda wildcards: "x"
    run:
        import json, os, sys, pandas, requests, smart_open
        from snakemake.common import is_local_file
        with open(output[0], "w") as f:
            json.dump({"pandas": pandas.__version__, "requests": requests.__version__,
                       "s3": smart_open.parse_uri("s3://bucket/key").scheme,
                       "local": is_local_file("s3://bucket/key"),
                       "path0": sys.path[0] == os.getcwd(), "param": params.p}, f)  # path0: as plain
rule a:
    output: "a.txt"
    group: "g"
    shell: "echo a > {output}"
rule b:
    input: "a.txt"
    output: "b.txt"
    group: "g"
    shell: "cat {input} > {output}; echo b >> {output}"
EOF
  mkdir quick plain
  (cd quick && rsub workflow -s ../Snakefile --cores 2 --quiet all)
  (cd plain && RSUB_SNAKEMAKE_QUICK=0 rsub workflow -s ../Snakefile --cores 2 --quiet all)
  cmp quick/run.json plain/run.json
  cmp quick/b.txt plain/b.txt
  jq -e '.s3 == "s3" and .local == false and .param == "x"' quick/run.json
  # The quick run's jobs went through the profile's rsub-smk-job.py, the plain run's did not.
  for w in quick plain; do
    rsub ls --all --workflow $w --json >$w.jsonl
    jq -e -s 'length == 2 and (map(.rule) | sort) == ["g", "inspect"] and all(.state == "COMPLETED")' $w.jsonl
  done
  jq -e -s 'all(.command[2] | contains("rsub-smk-job.py"))' quick.jsonl
  jq -e -s 'all(.command[2] | contains("rsub-smk-job.py") | not)' plain.jsonl
}

@test "a killed job runs again on Snakemake's retry, with its attempt's larger resources" {
  cat >Snakefile <<'EOF'
rule flaky:
    output: "out.txt"
    resources: mem_mb=lambda wildcards, attempt: 100 * attempt
    shell: "if [ ! -e tried ]; then touch tried; kill -9 $$; fi; echo ok > {output}"
EOF
  run --separate-stderr rsub workflow --cores 2 --restart-times 1
  assert_success
  [[ $(cat out.txt) == ok ]]
  run rsub ls --all --workflow wf --json
  echo "$output" | jq -e -s 'length == 2 and .[0].state == "FAILED"
                             and .[0].memory_per_task_bytes == 100000000
                             and .[1].state == "COMPLETED" and .[1].memory_per_task_bytes == 200000000'
}

@test "Ctrl-C on snakemake cancels the workflow's running jobs within 2 s; a rerun runs only what is incomplete" {
  cat >Snakefile <<'EOF'
rule all:
    input: expand("slow/{i}.txt", i=range(2))
rule fast:
    output: "fast/{i}.txt"
    shell: "echo {wildcards.i} > {output}"
rule slow:
    input: "fast/{i}.txt"
    output: "slow/{i}.txt"
    shell: "sleep ${{SLOW:-0}}; cp {input} {output}"
EOF
  set -m  # job control: a background job of a script otherwise ignores SIGINT
  SLOW=60 rsub workflow --cores 2 >smk.log 2>&1 &
  SMK_PID=$!
  set +m
  wait_jobs wf RUNNING 2 slow
  start=$EPOCHREALTIME
  kill -INT "$SMK_PID"
  wait_jobs wf CANCELLED 2 slow
  ended_within wf slow "$start" 2
  rc=0
  wait_exit "$SMK_PID" 10 || rc=$?
  ((rc != 124))
  SMK_PID=
  [[ ! -e slow/0.txt && ! -e slow/1.txt ]]
  run --separate-stderr rsub workflow --cores 2
  assert_success
  [[ -e slow/0.txt && -e slow/1.txt ]]
  run rsub ls --all --workflow wf --json
  echo "$output" | jq -e -s '(map(select(.rule == "fast")) | length) == 2
                             and (map(select(.rule == "slow" and .state == "COMPLETED")) | length) == 2'
}

@test "snakemake killed with SIGKILL: its sidecar cancels the run's jobs" {
  fan_out 2 "sleep 60; touch {output}"
  rsub workflow --cores 2 >smk.log 2>&1 &
  SMK_PID=$!
  wait_jobs wf RUNNING 2
  kill -KILL "$SMK_PID"
  wait_jobs wf CANCELLED 2
  SMK_PID=
}

@test "the rsub daemon killed mid-workflow: the workflow still finishes and no rule runs twice" {
  fan_out 4 "echo run >> ran.{wildcards.i}; sleep 1; touch {output}"
  rsub workflow --cores 2 >smk.log 2>&1 &
  SMK_PID=$!
  wait_jobs wf RUNNING 1
  kill -KILL "$(cat "$RKIT_STATE_DIR/rsub/daemon.pid")"
  wait_exit "$SMK_PID" 60
  SMK_PID=
  for i in 0 1 2 3; do [[ $(wc -l <"ran.$i") == 1 ]]; done
  [[ $(rsub ls --all --workflow wf --json | jq -s 'map(select(.state == "COMPLETED")) | length') == 4 ]]
}

@test "the cluster commands keep Snakemake's contract" {
  printf '#!/bin/sh\n# properties = {"type": "single", "rule": "r", "threads": 1, "resources": {}}\necho hi\n' >job.sh
  run --separate-stderr rsub snakemake submit job.sh
  assert_success
  [[ $output =~ ^[0-9]+$ ]]  # the job id alone
  id=$output
  rsub wait "$id"
  run --separate-stderr rsub snakemake status "$id"
  assert_success
  assert_output success
  run --separate-stderr rsub snakemake status 999999
  assert_success
  assert_output failed
  # Cancel takes many ids at once.
  a=$(rsub snakemake submit job.sh) b=$(rsub --hold -- sleep 60)
  run --separate-stderr rsub snakemake cancel "$a" "$b"
  assert_success
  wait_state "$b" CANCELLED
  run --separate-stderr rsub snakemake status "$b"
  assert_output failed
  # A workflow's queue, and what its next rule waits for.
  rsub --hold --workflow wf --rule later -- true
  run rsub status --workflow wf --json
  echo "$output" | jq -e -s 'all(.workflow == "wf") and (map(select(.backend == "*"))[0] | .pending == 1)'
  run rsub why --workflow wf
  assert_success
  assert_line --index 0 "workflow wf: 1 job waits; the first is rule later"
  assert_line --index 1 --regexp '^job [0-9]+: PENDING \(JobHeldUser\)$'
  run rsub why --workflow nothing
  assert_output "workflow nothing: no job waits (0 running)"
  run --separate-stderr rsub why 1 --workflow wf
  assert_failure 64
  # Not a job script of Snakemake's: one line, exit 65.
  printf '#!/bin/sh\necho hi\n' >plain.sh
  run --separate-stderr rsub snakemake submit plain.sh
  assert_failure 65
  assert_one_line_stderr
  run --separate-stderr rsub snakemake submit missing.sh
  assert_failure 66
  assert_one_line_stderr
}

@test "the sidecar answers its own user only; a listener of another user is not believed" {
  done_id=$(rsub --workflow wf -- true) id=$(rsub --hold -- true)
  rsub wait "$done_id"
  rsub snakemake sidecar >vars &
  OTHER_PIDS=$!
  for _ in $(seq 50); do [[ -s vars ]] && break; sleep 0.1; done
  socket=$(jq -r .socket vars)
  [[ $(stat -c %a "$(dirname "$socket")") == 700 ]]
  SNAKEMAKE_CLUSTER_SIDECAR_VARS=$(cat vars) run --separate-stderr rsub snakemake status "$done_id"
  assert_output success
  [[ -z $stderr ]]  # the sidecar answered
  # Another user cannot reach it.
  run setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 -c \
    'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$socket"
  assert_failure
  [[ $output == *PermissionError* ]]
  # Another user's listener, named where a sidecar's socket should be, answering
  # "success" for every job: refused (its uid, from the kernel), and the daemon asked.
  EVIL=$(mktemp -d /tmp/rsub-evil.XXXXXX)
  chmod 0777 "$EVIL"
  setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 -c '
import socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b"o" + struct.pack("<I", 7) + b"success")
    c.close()' "$EVIL/socket" &
  OTHER_PIDS="$OTHER_PIDS $!"
  for _ in $(seq 50); do [[ -S $EVIL/socket ]] && break; sleep 0.1; done
  [[ -S $EVIL/socket ]]
  SNAKEMAKE_CLUSTER_SIDECAR_VARS="{\"socket\": \"$EVIL/socket\", \"workflow\": \"wf\"}" \
    run --separate-stderr rsub snakemake status "$id"
  assert_success
  assert_output running
  [[ $stderr == *"the sidecar did not answer"* ]]
}
