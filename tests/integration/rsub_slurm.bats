#!/usr/bin/env bats
# rsub's Slurm backend against a real Slurm 22.05 with accounting (slurmctld, slurmd, munged,
# slurmdbd over a private MariaDB), which this file starts once (slurm.sh start --accounting,
# in a folder of its own) and stops by pid at the end. The node has two fake GPUs (gres.conf
# File= links to /dev/null). Needs root and the packages of install-deps.sh tests.
bats_require_minimum_version 1.5.0

setup_file() {
  load slurm/bats_slurm
  slurm_start --accounting
}

teardown_file() {
  load slurm/bats_slurm
  slurm_stop
}

setup() {
  load ../cli/helpers
  load slurm/bats_slurm
  cd "$BATS_TEST_TMPDIR"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state
  export RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  rsub_slurm_config "$RKIT_CONFIG"
}

teardown() {  # a local daemon, when a test started one
  local pid_file=$RKIT_STATE_DIR/rsub/daemon.pid pid
  [[ -s $pid_file ]] || return 0
  pid=$(cat "$pid_file")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}


@test "a job runs on Slurm: id slurm:N, its output, its exit code through rsub wait" {
  run -0 rsub --backend slurm -- sh -c 'echo "hello from $RSUB_JOB_ID"'
  id=$output
  [[ $id =~ ^slurm:[0-9]+$ ]]
  run -0 rsub wait "$id"
  run -0 rsub logs "$id"
  assert_output "hello from $id"
  run -0 rsub show "$id" --json
  [[ $(jq -r .state <<<"$output") == COMPLETED && $(jq -r .backend <<<"$output") == slurm ]]
}

@test "the same job spec runs locally and on Slurm" {
  cat >job.toml <<'EOF'
name = "sim"
command = ["sh", "-c", "echo seed=$SEED task=$RSUB_TASK_ID/$RSUB_NTASKS"]
env = { SEED = "7" }
[resources]
tasks = 2
cpus_per_task = 1
EOF
  run -0 rsub submit job.toml
  local_id=$output
  run -0 rsub submit job.toml --backend slurm
  slurm_id=$output
  run -0 rsub wait "$local_id" "$slurm_id"
  for id in "$local_id" "$slurm_id"; do
    run -0 rsub logs "$id" --task 1
    assert_output "seed=7 task=1/2"
  done
}

@test "a 2-task gang starts together, each task with its own RSUB_TASK_ID" {
  run -0 rsub --backend slurm --tasks 2 -- sh -c 'echo "$RSUB_TASK_ID $(date +%s)"; sleep 1'
  id=$output
  run -0 rsub wait "$id"
  run -0 rsub logs "$id" --task 0
  read -r t0 s0 <<<"$output"
  run -0 rsub logs "$id" --task 1
  read -r t1 s1 <<<"$output"
  [[ $t0 == 0 && $t1 == 1 ]]
  ((s1 - s0 <= 1 && s0 - s1 <= 1))  # started together
  run -0 rsub show "$id" --json
  [[ $(jq .tasks <<<"$output") == 2 ]]
}

@test "a GPU job waits while the two fake GPUs are taken; rsub why shows Slurm's reason" {
  run -0 rsub --backend slurm --gpus-per-task 2 --time 2m -- sh -c 'echo "$CUDA_VISIBLE_DEVICES"; sleep 60'
  first=$output
  wait_state "$first" RUNNING 30
  run -0 rsub --backend slurm --gpus-per-task 1 -- sh -c 'echo "$CUDA_VISIBLE_DEVICES"'
  second=$output
  # Slurm's scheduler looks at the new job within a few seconds; until then its reason is None.
  for _ in $(seq 60); do
    run -0 rsub why "$second" --json
    [[ $(jq -r .reason <<<"$output") == Resources ]] && break
    sleep 0.5
  done
  [[ $(jq -r .state <<<"$output") == PENDING && $(jq -r .reason <<<"$output") == Resources ]]
  run -0 rsub why "$second"
  assert_output --partial "Slurm's reason: Resources (the cores, memory or GPUs it asks for are in use)"
  run -0 rsub cancel "$first"
  run -0 rsub wait "$second"
  run -0 rsub logs "$second"
  [[ $output =~ ^[01]$ ]]  # one of the two GPUs
  run -0 rsub logs "$first"
  assert_output "0,1"
  run rsub wait "$first"
  assert_equal "$status" 143  # CANCELLED
}

@test "an array with %N runs every element, each with RSUB_ARRAY_INDEX" {
  run -0 rsub --backend slurm --array 0-3%2 -- sh -c 'echo "index $RSUB_ARRAY_INDEX"'
  id=$output
  run -0 rsub wait "$id"
  for index in 0 1 2 3; do  # not $i: bats' run sets it
    run -0 rsub logs "${id}_$index"
    assert_output "index $index"
  done
  run -0 rsub ls --all --json
  [[ $(jq -r "select(.id | startswith(\"${id}_\")) | .state" <<<"$output" | sort -u) == COMPLETED ]]
}

@test "an afterok chain: the second job runs after the first, and not at all when it fails" {
  run -0 rsub --backend slurm -- sh -c 'sleep 2; echo first >"$PWD/order"'
  first=$output
  run -0 rsub --backend slurm --depends "afterok:$first" -- sh -c 'echo second >>"$PWD/order"'
  second=$output
  run -0 rsub wait "$second"
  run -0 cat order
  assert_output $'first\nsecond'
  # A failing first job: its dependant never runs.
  run -0 rsub --backend slurm -- false
  bad=$output
  run -0 rsub --backend slurm --depends "afterok:$bad" -- touch never
  after_bad=$output
  run rsub wait "$bad" "$after_bad"
  [[ $status -ne 0 ]]
  [[ ! -e never ]]
  run -0 rsub show "$after_bad" --json
  [[ $(jq -r .state <<<"$output") != COMPLETED ]]
  # On a job that has ended, rsub decides (Slurm takes a job it forgot as a met dependency).
  run --separate-stderr rsub --backend slurm --depends "afterok:$bad" -- true
  assert_equal "$status" 65
  [[ $stderr == *"can never be satisfied: job $bad has ended FAILED"* ]]
  run -0 rsub --backend slurm --depends "afterok:$first" -- true
  run -0 rsub show "$output" --json
  jq -e '.depends == []' <<<"$output"  # met already: not passed on
}

@test "a failing job's exit code and a signal reach rsub wait" {
  run -0 rsub --backend slurm -- sh -c 'exit 3'
  id=$output
  run rsub wait "$id"
  assert_equal "$status" 3
  run -0 rsub show "$id" --json
  [[ $(jq -r .reason <<<"$output") == "NonZeroExitCode 3" ]]
  run -0 rsub --backend slurm -- sh -c 'kill -9 $$'
  id=$output
  run rsub wait "$id"
  assert_equal "$status" 137
  run -0 rsub show "$id" --json
  [[ $(jq -r .signal <<<"$output") == SIGKILL ]]
}

@test "cancel ends a running job; hold and release a pending one" {
  run -0 rsub --backend slurm --time 5m -- sleep 300
  id=$output
  wait_state "$id" RUNNING 30
  run -0 rsub cancel "$id"
  wait_state "$id" CANCELLED 30
  run -0 rsub --backend slurm --hold -- echo held
  held=$output
  run -0 rsub show "$held" --json
  [[ $(jq -r .state <<<"$output") == PENDING && $(jq -r .held <<<"$output") == true ]]
  run -0 rsub release "$held"
  run -0 rsub wait "$held"
  run -0 rsub logs "$held"
  assert_output held
}

@test "a job that fails with a listed exit code is retried by Slurm until max attempts" {
  run -0 rsub --backend slurm --retries 1 --retry-on 75 -- sh -c 'echo attempt; exit 75'
  id=$output
  run rsub wait "$id"
  assert_equal "$status" 75
  run -0 rsub show "$id" --json
  [[ $(jq .attempts <<<"$output") == 2 ]]
  run -0 rsub logs "$id"
  assert_output $'attempt\nattempt'
}

@test "rsub ls --all --json: Slurm jobs as rkit.job.v1 records, with what rcost needs" {
  run -0 rsub --backend slurm --tenant desk-a --tasks 2 -- true
  id=$output
  run -0 rsub wait "$id"
  run -0 rsub ls --all --json
  rec=$(jq -c "select(.id == \"$id\")" <<<"$output")
  [[ $(jq -r .schema <<<"$rec") == rkit.job.v1 ]]
  [[ $(jq -r .tenant <<<"$rec") == desk-a && $(jq -r .user <<<"$rec") == "$(id -un)" ]]
  [[ $(jq .cpus <<<"$rec") == 2 && $(jq -r .state <<<"$rec") == COMPLETED ]]
  # Times from sacct: submitted, started, ended, in order.
  jq -e '.submit_unix_s > 0 and .start_unix_s >= (.submit_unix_s | floor) - 1 and .end_unix_s >= .start_unix_s' <<<"$rec"
}

@test "rsub status: queue pressure per backend, and which Slurm version answers" {
  run -0 rsub --backend slurm --hold -t desk-a -- true
  held=$output
  run -0 rsub status --json
  jq -e -s 'map(select(.backend == "slurm" and .tenant == "desk-a"))[0] | .pending == 1 and .cpus_total == null' <<<"$output"
  run -0 rsub status
  assert_line --regexp '^backend slurm: Slurm 22\.05\.[0-9]+; states from sacct and squeue$'
  run -0 rsub cancel "$held"
}

@test "Slurm down: one line, exit 69, the submission refused and nothing stored" {
  # A controller that refuses connections: this cluster's config with its port moved.
  port=$(grep -oP '^SlurmctldPort=\K[0-9]+' "$SLURM_DIR/etc/slurm.conf")
  sed "s/^SlurmctldPort=.*/SlurmctldPort=$((port + 1000))/" "$SLURM_DIR/etc/slurm.conf" >down.conf
  sed -i "s|^slurm_conf = .*|slurm_conf = \"$PWD/down.conf\"|" "$RKIT_CONFIG"
  run --separate-stderr rsub --backend slurm -- touch ran
  assert_equal "$status" 69
  assert_one_line_stderr
  [[ $stderr == *'cannot reach Slurm'*'nothing was changed there'* ]]
  assert_equal "$(rsub ls --all --json | wc -l)" 0
}

@test "Slurm not answering: exit 69, the job kept, then found in Slurm's queue and followed; never twice" {
  kill -STOP "$(cat "$SLURM_DIR/run/slurmctld.pid")"
  run --separate-stderr rsub --backend slurm -- sh -c 'echo ran once >>"$PWD/ran"'
  kill -CONT "$(cat "$SLURM_DIR/run/slurmctld.pid")"
  assert_equal "$status" 69
  assert_one_line_stderr
  [[ $stderr == *'cannot reach Slurm'*'it may still reach Slurm'*'kept as job 1'* ]]
  # slurmctld, running again, took the request sbatch gave up on: rsub finds the job by
  # its comment, follows it to its end, and never submits it again.
  run -0 rsub wait 1 --timeout 60
  run -0 rsub show 1 --json
  id=$(jq -r .id <<<"$output")
  [[ $id =~ ^slurm:[0-9]+$ ]]
  [[ $(jq -r .state <<<"$output") == COMPLETED ]]
  assert_equal "$(cat ran)" "ran once"
  tag=$(sqlite3 "$RKIT_STATE_DIR/rsub/jobs.db" "select value from meta where key = 'tag'")
  assert_equal "$(SLURM_CONF=$SLURM_DIR/etc/slurm.conf squeue -h -t all -o '%k' | grep -c "^rsub:$tag:1\$")" 1
}

@test "a job Slurm refuses: its message, exit 65, nothing stored" {
  run --separate-stderr rsub --backend slurm --partition nosuch -- true
  assert_equal "$status" 65
  assert_one_line_stderr
  [[ $stderr == *'sbatch failed: invalid partition specified: nosuch'* ]]
  assert_equal "$(rsub ls --all --json | wc -l)" 0
}

@test "dependencies across backends are refused (64): Slurm on local, local on Slurm" {
  run -0 rsub --hold -- true
  run --separate-stderr rsub --backend slurm --depends "afterok:$output" -- true
  assert_equal "$status" 64
  [[ $stderr == *'a job on slurm can wait only for jobs there'* ]]
  run -0 rsub --backend slurm --hold -- true
  slurm_id=$output
  run --separate-stderr rsub --depends "afterok:$slurm_id" -- true
  assert_equal "$status" 64
  [[ $stderr == *"depends: job $slurm_id runs on slurm; a local job can wait only for local jobs"* ]]
  run -0 rsub cancel "$slurm_id"
}

@test "one batched query per refresh, however many jobs: no polling storm" {
  count_slurm_calls
  run -0 rsub --backend slurm --hold --array 0-19 -- true
  array=$output
  run -0 rsub --backend slurm --hold -- true
  single=$output
  : >calls
  run -0 rsub ls --json
  [[ $(wc -l <<<"$output") == 21 ]]
  assert_equal "$(sort calls | uniq -c | awk '{print $2 "=" $1}' | xargs)" "sacct=1 squeue=1"  # sacct, then squeue for the pending reasons
  jq -e -s 'all(.[]; .state == "PENDING" and .held)' <<<"$output"
  # With refresh = 60s, clients share one read a minute: these make no call at all.
  sed -i 's/^refresh = .*/refresh = "60s"/' "$RKIT_CONFIG"
  : >calls
  rsub ls >/dev/null
  rsub status >/dev/null
  rsub show "$single" >/dev/null
  assert_equal "$(grep -c 'sacct\|squeue' calls)" 0
  run -0 rsub cancel "$array" "$single"
  assert_equal "$(grep -c scancel calls)" 1  # one scancel for all 21
}

@test "--backend auto --dry-run explains its choice: local when it fits now, else the shortest wait within the cost limit" {
  printf '[rsub.auto]\nprices = "%s"\n[rsub.tenants.desk-a]\nmax_job_cost = 10\n' "$RKIT_ROOT/examples/prices.toml" >>"$RKIT_CONFIG"
  run --separate-stderr rsub --backend auto --dry-run -t desk-a -- true
  assert_success
  assert_equal "${stderr_lines[0]}" "rsub: --backend auto chose local: fits now (2 of 2 cores and 0 of 0 GPUs free)"
  [[ $(jq -r .backend <<<"$output") == local ]]
  # Two GPUs: not on this machine. Slurm (two fake GPUs) starts it now, for 1 h × (1 core ×
  # 0.03 + 2 GPUs × 1.50) of the price sheet: within desk-a's 10 USD.
  run --separate-stderr rsub --backend auto --dry-run -t desk-a -g 2 --time 1h -- true
  assert_success
  assert_equal "${stderr_lines[0]}" "rsub: --backend auto chose slurm: local too big: needs 1 core and 2 GPUs, the machine has 2 and 0; expected wait 0s and costs 3.03 USD for 1h"
  assert_equal "${stderr_lines[2]}" "  slurm: expected wait 0s, costs 3.03 USD for 1h"
  assert_line '#SBATCH --gres=gpu:2'
  # Ten hours of it cost 30.30 USD: over the limit, and nothing else can take it.
  run --separate-stderr rsub --backend auto --dry-run -t desk-a -g 2 --time 10h -- true
  assert_equal "$status" 69
  assert_one_line_stderr
  [[ $stderr == *"no backend can take the job"*"slurm: over tenant desk-a's limit of 10.00 USD (30.30 USD for 10h)"* ]]
}
