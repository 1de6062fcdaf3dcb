#!/usr/bin/env bats
# rsub end to end: each test has its own state directory, configuration ([local]: 2 cores,
# 2 GPUs that are only indices) and daemon, started by the first submit and stopped by
# pid in teardown, with every job it left running.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state
  export RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  printf '[local]\ncpus = 2\ngpus = 2\nmemory = "4G"\n' > "$RKIT_CONFIG"
}

teardown() {
  stop_rsub
}

# The daemon's pid, once it has written it (at most 5 s after the first submit).
daemon_pid() {
  local file=$RKIT_STATE_DIR/rsub/daemon.pid
  for _ in $(seq 50); do [[ -s $file ]] && break; sleep 0.1; done
  cat "$file"
}

# The scheduling passes the daemon has completed since it started (rsub status --json).
daemon_passes() {
  rsub status --json | jq -e -s 'map(select(.backend == "*"))[0].daemon_passes | numbers'
}

# Waits (at most 10 s) for a whole scheduling pass that starts after this call: two more
# passes completed than now, since the one under way now may have started before.
wait_daemon_pass() {
  local n want
  n=$(daemon_passes) || { echo "rsub status --json: no daemon_passes" >&2; return 1; }
  want=$((n + 2))
  for _ in $(seq 100); do
    n=$(daemon_passes) && ((n >= want)) && return 0
    sleep 0.1
  done
  echo "the daemon completed $n passes, not $want, within 10 s" >&2
  return 1
}

# The pid of the daemon's launcher of supervisors (started with the first job): the
# daemon's child of that command line (its supervisors, forked, have it too).
launcher_pid() {
  local pid
  for _ in $(seq 50); do
    pid=$(pgrep -P "$(daemon_pid)" -f -x "/proc/self/exe _launcher $RKIT_STATE_DIR/rsub [0-9]+")
    [[ -n $pid ]] && break
    sleep 0.1
  done
  [[ -n $pid ]] || { echo "no launcher runs for $RKIT_STATE_DIR" >&2; return 1; }
  echo "$pid"
}

@test "rsub -- CMD runs it: id on stdout, wait gives its exit code, logs its output" {
  run rsub -- sh -c 'echo hello from $RSUB_JOB_ID'
  assert_success
  [[ $output =~ ^[0-9]+$ ]]
  id=$output
  run rsub wait "$id"
  assert_success
  run rsub logs "$id"
  assert_output "hello from $id"
  run rsub ls --all --json
  echo "$output" | jq -e --arg id "$id" 'select(.id == $id) | .schema == "rkit.job.v1" and .state == "COMPLETED"
                                         and .exit_code == 0 and .attempts == 1 and .start_unix_s >= .submit_unix_s'
  run rsub -- sh -c 'echo oops >&2; exit 3'
  id=$output
  run rsub wait "$id"
  assert_failure 3
  run rsub logs --err "$id"
  assert_output "oops"
  run rsub show "$id" --json
  echo "$output" | jq -e '.state == "FAILED" and .reason == "NonZeroExitCode 3"'
  # -f follows a running job to its end, the last line included.
  id=$(rsub -- sh -c 'echo first; sleep 1; echo last')
  run rsub logs -f "$id"
  assert_success
  assert_output $'first\nlast'
}

@test "rsub submit [options] -- CMD: the words after -- are the command, with or without a spec" {
  id=$(rsub submit -n greet -- sh -c 'echo hi from $RSUB_JOB_ID' extra)
  run rsub wait "$id"
  assert_success
  run rsub logs "$id"
  assert_output "hi from $id"
  run rsub show "$id" --json
  echo "$output" | jq -e '.name == "greet" and .command == ["sh", "-c", "echo hi from $RSUB_JOB_ID", "extra"]'
  printf 'name = "spec"\ncommand = ["false"]\n' > job.toml
  id=$(rsub submit job.toml -- echo from the flag)
  rsub wait "$id"
  run rsub logs "$id"
  assert_output "from the flag"
  run -64 rsub submit --
  assert_output --partial "submit needs a job spec file or -- COMMAND"
  # Other subcommands take no command: ids after -- are refused, not dropped.
  held=$(rsub --hold -- true)
  run -64 rsub cancel "$id" -- "$held"
  assert_output "rsub: error: a command after -- is a job's: only rsub [options] -- COMMAND and rsub submit take one"
  run -0 rsub show "$held" --json
  echo "$output" | jq -e '.state == "PENDING"'
}

@test "a gang's tasks start together on disjoint cores and GPUs, with the rank environment" {
  id=$(rsub --tasks 2 -c 1 -g 1 -- sh -c 'echo "$RSUB_TASK_ID/$RSUB_NTASKS gpu=$CUDA_VISIBLE_DEVICES cpus=$(taskset -cp $$ | sed "s/.*: //")"')
  run rsub wait "$id"
  assert_success
  t0=$(rsub logs "$id" --task 0)
  t1=$(rsub logs "$id" --task 1)
  [[ $t0 =~ ^0/2\ gpu=([01])\ cpus=([01])$ ]]
  g0=${BASH_REMATCH[1]} c0=${BASH_REMATCH[2]}
  [[ $t1 =~ ^1/2\ gpu=([01])\ cpus=([01])$ ]]
  [[ ${BASH_REMATCH[1]} != "$g0" && ${BASH_REMATCH[2]} != "$c0" ]]
  run rsub show "$id" --json
  echo "$output" | jq -e '(.alloc | length) == 2 and .alloc[0].gpus != .alloc[1].gpus'
}

@test "submit JOB.toml: flags override the spec; a bad spec is 65 with file:line" {
  printf 'name = "from-file"\ncommand = ["sh", "-c", "echo $GREETING"]\nenv = { GREETING = "hi" }\n' > job.toml
  id=$(rsub submit job.toml -e GREETING=override -n flagged)
  rsub wait "$id"
  run rsub logs "$id"
  assert_output "override"
  run rsub show "$id" --json
  echo "$output" | jq -e '.name == "flagged"'
  # Flags before the file, and before `submit`, count as well.
  id=$(rsub -t desk-b submit -e GREETING=first job.toml)
  rsub wait "$id"
  run rsub logs "$id"
  assert_output "first"
  rsub show "$id" --json | jq -e '.tenant == "desk-b"'
  printf 'command = ["true"]\n[resources]\ntasks = 0\n' > bad.toml
  run --separate-stderr rsub submit bad.toml
  assert_failure 65
  assert_one_line_stderr
  [[ $stderr == *"bad.toml:3"*"tasks"* ]]
  run --separate-stderr rsub submit missing.toml
  assert_failure 66
  run --separate-stderr rsub --tasks 0 -- true
  assert_failure 64
  [[ $stderr == *"--tasks"* ]]
  run --separate-stderr rsub -- true --no-such
  assert_success  # after --, everything is the command's
  run --separate-stderr rsub --no-such-flag -- true
  assert_failure 64
  run --separate-stderr rsub -c 4 -- true
  assert_failure 65  # more cores than the machine has
  [[ $stderr == *"cores"* ]]
}

@test "time limit: SIGTERM to the job, state TIMEOUT, wait exits 124" {
  id=$(rsub --time 1s -- sleep 30)
  run rsub wait "$id"
  assert_failure 124
  run rsub show "$id" --json
  echo "$output" | jq -e '.state == "TIMEOUT" and .elapsed_s < 10'
}

@test "retries: an exit code in --retry-on runs it again, up to the limit" {
  id=$(rsub --retries 2 --retry-on 75 -- sh -c 'n=$(cat count 2>/dev/null || echo 0); echo $((n + 1)) > count; [ $n -ge 1 ] || exit 75')
  run rsub wait "$id"
  assert_success
  [[ $(cat count) == 2 ]]
  run rsub show "$id" --json
  echo "$output" | jq -e '.state == "COMPLETED" and .attempts == 2'
  id=$(rsub --retries 1 --retry-on 75 -- sh -c 'exit 75')
  run rsub wait "$id"
  assert_failure 75
  rsub show "$id" --json | jq -e '.attempts == 2 and .state == "FAILED"'
  id=$(rsub --retries 3 --retry-on 75 -- sh -c 'exit 4')  # not a retry code
  run rsub wait "$id"
  assert_failure 4
  rsub show "$id" --json | jq -e '.attempts == 1'
}

@test "hold and release; cancel of pending and running jobs; wait after cancel exits 143" {
  id=$(rsub --hold -- echo held)
  run rsub show "$id" --json
  echo "$output" | jq -e '.state == "PENDING" and .held and .reason == "JobHeldUser"'
  wait_daemon_pass  # still held after a pass
  wait_state "$id" PENDING
  rsub release "$id"
  run rsub wait "$id"
  assert_success
  run --separate-stderr rsub hold "$id"
  assert_success
  [[ $stderr == *"not pending"* ]]
  long=$(rsub -- sleep 30)
  wait_state "$long" RUNNING
  rsub cancel "$long"
  run rsub wait "$long"
  assert_failure 143
  run rsub show "$long" --json
  echo "$output" | jq -e '.state == "CANCELLED" and (.reason | startswith("cancelled by"))'
  pending=$(rsub --hold -- true)
  rsub cancel "$pending"
  rsub show "$pending" --json | jq -e '.state == "CANCELLED" and .start_unix_s == null'
}

@test "dependencies: afterok waits for success; a failed dependency fails the job; afterany runs" {
  first=$(rsub -- sleep 1)
  ok=$(rsub -d "afterok:$first" -- echo after)
  for _ in $(seq 50); do [[ $(rsub show "$ok" --json | jq -r .reason) == Dependency ]] && break; sleep 0.1; done
  rsub show "$ok" --json | jq -e '.state == "PENDING" and .reason == "Dependency"'
  run rsub wait "$ok"
  assert_success
  run rsub show "$first" --json
  first_end=$(echo "$output" | jq .end_unix_s)
  rsub show "$ok" --json | jq -e --argjson e "$first_end" '.start_unix_s >= $e'
  bad=$(rsub -- false)
  never=$(rsub -d "afterok:$bad" -- echo never)
  any=$(rsub -d "afterany:$bad" -- echo any)
  run rsub wait "$never"
  assert_failure 1
  rsub show "$never" --json | jq -e '.state == "FAILED" and (.reason | startswith("DependencyNeverSatisfied")) and .start_unix_s == null'
  run rsub wait "$any"
  assert_success
  # On an array: after all of its elements (Slurm's rule), not just the first.
  arr=$(rsub --array 0-2 -- sh -c 'sleep 0.$((3 * RSUB_ARRAY_INDEX))')
  after=$(rsub -d "afterok:$arr" -- true)
  run rsub wait "$after"
  assert_success
  last_end=$(rsub ls --all --json | jq -s --arg p "$arr" 'map(select(.array_parent == ($p | tonumber)) | .end_unix_s) | max')
  rsub show "$after" --json | jq -e --argjson e "$last_end" '.start_unix_s >= $e'
}

@test "arrays: one job per index, at most N at once, each with its index" {
  id=$(rsub --array 0-5%2 -- sh -c 'echo $RSUB_ARRAY_INDEX; sleep 0.3')
  run rsub ls --all --json
  [[ $(echo "$output" | jq -s 'length') -eq 6 ]]
  run rsub wait "$id"
  assert_success
  for i in 0 1 2 3 4 5; do
    run rsub logs "${id}_$i"
    assert_output "$i"
  done
  # Never more than 2 running at once: at each element's start, at most 2 are running.
  rsub ls --all --json | jq -e -s '[.[] | {s: .start_unix_s, e: .end_unix_s}] as $j
      | all($j[]; . as $a | [$j[] | select(.s <= $a.s and .e > $a.s)] | length <= 2)'
}

@test "why names the short resource, the job that must finish first, the priority" {
  printf '[local]\ncpus = 2\ngpus = 1\n' > "$RKIT_CONFIG"
  first=$(rsub -g 1 --time 1m -- sleep 30)
  wait_state "$first" RUNNING
  second=$(rsub -g 1 -- true)
  wait_daemon_pass
  run rsub why "$second"
  assert_success
  assert_line --index 0 "job $second: PENDING (Resources)"
  assert_output --partial "GPU"
  assert_output --partial "must finish first: $first"
  assert_output --partial "priority"
  run rsub why "$second" --json
  echo "$output" | jq -e --arg f "$first" '.schema == "rkit.job.why.v1" and .reason == "Resources"
                                          and (.waits_for | map(tostring) | index($f)) != null and .position == 1'
  run rsub status --json
  echo "$output" | jq -e -s 'map(select(.tenant == "*"))[0] | .running == 1 and .pending == 1 and .gpus_in_use == 1 and .gpus_total == 1'
  # The daemon's passes: on the total row alone, and they go on.
  echo "$output" | jq -e -s 'map(select(.tenant == "*"))[0].daemon_passes >= 1 and
                             all(.[] | select(.tenant != "*"); .daemon_passes == null)'
  wait_daemon_pass
  run -0 rsub status
  assert_line --regexp '^machine: 2 cores, 1 GPUs$'
  rsub cancel "$first"
  run rsub wait "$second"
  assert_success
}

@test "quotas: a tenant at its GPU limit waits with TenantGpuLimit" {
  printf '[local]\ncpus = 2\ngpus = 2\n[rsub.tenants.desk]\nmax_gpus = 1\n' > "$RKIT_CONFIG"
  a=$(rsub -t desk -g 1 -- sleep 30)
  b=$(rsub -t desk -g 1 -- true)
  c=$(rsub -t other -g 1 -- true)
  run rsub wait "$c"
  assert_success
  wait_state "$a" RUNNING
  rsub show "$b" --json | jq -e '.state == "PENDING" and .reason == "TenantGpuLimit"'
  rsub cancel "$a"
  run rsub wait "$b"
  assert_success
}

@test "backfill: a short job runs ahead of a blocked wider one; a job without a limit does not" {
  printf '[local]\ncpus = 2\ngpus = 0\n' > "$RKIT_CONFIG"
  running=$(rsub -c 1 --time 1m -- sleep 30)
  wait_state "$running" RUNNING
  wide=$(rsub -c 2 -- true)         # the top job: waits for both cores
  short=$(rsub -c 1 --time 10s -- true)  # ends before the wide job could start: backfilled
  endless=$(rsub -c 1 -- true)      # no limit: would delay the wide job
  run rsub wait --timeout 20s "$short"  # 75 if it were not backfilled
  assert_success
  wait_daemon_pass
  rsub show "$wide" --json | jq -e '.state == "PENDING" and .reason == "Resources"'
  rsub show "$endless" --json | jq -e '.state == "PENDING" and .reason == "Priority"'
  rsub cancel "$running"
  run rsub wait "$wide" "$endless"
  assert_success
  # Once the cores are free, the wide job goes first.
  rsub ls --all --json | jq -e -s --arg w "$wide" --arg e "$endless" \
    '(map(select(.id == $w))[0].start_unix_s) <= (map(select(.id == $e))[0].start_unix_s)'
}

@test "fair share: tenants with shares 3:1 on one GPU get about 3:1 of it" {
  printf '[local]\ncpus = 2\ngpus = 1\n[rsub.tenants.a]\nshares = 3\n[rsub.tenants.b]\nshares = 1\n' > "$RKIT_CONFIG"
  ids=()
  for i in $(seq 12); do
    ids+=("$(rsub --hold -t a -g 1 -- sleep 0.25)" "$(rsub --hold -t b -g 1 -- sleep 0.25)")
  done
  rsub release "${ids[@]}"
  # The first 16 to finish: about 12 of a and 4 of b.
  for _ in $(seq 200); do
    [[ $(rsub ls --all --state COMPLETED --json | jq -s length) -ge 16 ]] && break
    sleep 0.1
  done
  a=$(rsub ls --all --state COMPLETED --json | jq -s 'sort_by(.end_unix_s) | .[:16] | map(select(.tenant == "a")) | length')
  echo "tenant a got $a of the first 16" >&3
  ((a >= 10 && a <= 14))
  rsub cancel "${ids[@]}" 2> /dev/null
}

@test "a personal daemon serves its own user only: another user's commands are refused with 77" {
  # A state directory that user nobody could reach, were it not private (the daemon makes it so).
  shared=$(mktemp -d /tmp/rsub-personal.XXXXXX)
  chmod 755 "$shared"
  export RKIT_STATE_DIR=$shared/state RKIT_CONFIG=$shared/rkit.toml
  cp "$BATS_TEST_TMPDIR/rkit.toml" "$RKIT_CONFIG"
  chmod 644 "$RKIT_CONFIG"
  id=$(rsub --hold -- true)
  [[ $(stat -c %a "$RKIT_STATE_DIR/rsub") == 700 ]]
  chmod 755 "$RKIT_STATE_DIR" "$RKIT_STATE_DIR/rsub"  # as a careless user might
  for verb in cancel hold release; do
    run --separate-stderr setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/ rsub "$verb" "$id"
    assert_failure 77
    assert_one_line_stderr
  done
  # Its socket is its user's alone; and nobody's own rsub did not start a daemon for it.
  [[ $(stat -c %a "$RKIT_STATE_DIR/rsub/rsub.sock") == 600 ]]
  assert_equal "$(pgrep -c -u nobody -f 'rsub daemon' || true)" 0
  rsub show "$id" --json | jq -e '.state == "PENDING" and .held'
  teardown
  rm -rf "$shared"
}

@test "kill -9 of the daemon: no job lost, none run twice, running ones end in their true state" {
  printf '[local]\ncpus = 2\ngpus = 0\n' > "$RKIT_CONFIG"
  ids=()
  for i in 1 2 3 4; do ids+=("$(rsub -- sh -c "echo run >> ran.$i; sleep 1.5; exit $i")"); done
  wait_state "${ids[0]}" RUNNING
  launcher=$(launcher_pid) || false
  kill -KILL "$(daemon_pid)"
  # Its launcher ends with it (the supervisors it started go on).
  for _ in $(seq 50); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  refute_alive "$launcher"
  # While it is down: more submissions are stored, and the running jobs finish.
  ids+=("$(rsub --hold -- true)")
  rsub daemon  # the next one
  rsub release "${ids[4]}"
  for i in 0 1 2 3; do
    run rsub wait "${ids[$i]}"
    assert_failure $((i + 1))
  done
  run rsub wait "${ids[4]}"
  assert_success
  for i in 1 2 3 4; do [[ $(cat "ran.$i") == run ]]; done  # each ran exactly once
}

@test "the daemon's launcher killed: running jobs go on, the next job starts through a new one" {
  id=$(rsub -- sh -c 'sleep 1; echo first')
  wait_state "$id" RUNNING
  first=$(launcher_pid) || false
  kill -KILL "$first"
  run rsub wait "$id"
  assert_success
  run rsub logs "$id"
  assert_output "first"
  id=$(rsub -- echo second)
  run rsub wait --timeout 30s "$id"
  assert_success
  run rsub logs "$id"
  assert_output "second"
  second=$(launcher_pid) || false  # one runs (an empty answer must not pass as "another")
  [[ $second != "$first" ]]
}

@test "a daemon killed between marking a job RUNNING and starting it: the job runs, once" {
  id=$(rsub --hold -- sh -c 'echo ran >> ran')
  dir=$RKIT_STATE_DIR/rsub
  kill -KILL "$(daemon_pid)"
  # What the store and the run directory hold at that moment: the attempt marked, its lock
  # file created, no supervisor (so no pid in the file).
  sqlite3 "$dir/jobs.db" "UPDATE jobs SET state = 'RUNNING', held = 0, attempts = 1 WHERE id = $id"
  mkdir -p "$dir/run"
  : > "$dir/run/$id.1.lock"
  rsub daemon
  run rsub wait "$id"
  assert_success
  [[ $(cat ran) == ran ]]
  rsub show "$id" --json | jq -e '.attempts == 1 and .state == "COMPLETED"'
}

@test "a supervisor killed: its job is LOST, its processes are gone, it never runs again" {
  id=$(rsub -- sh -c 'echo $$ >> ran; sleep 300 & echo $! >> ran; wait')
  wait_state "$id" RUNNING
  for _ in $(seq 50); do [[ $(wc -l < ran 2>/dev/null) -eq 2 ]] && break; sleep 0.1; done
  lock=$RKIT_STATE_DIR/rsub/run/$id.1.lock
  kill -KILL "$(cat "$lock")"
  wait_state "$id" LOST
  run rsub wait "$id"
  assert_failure 1
  wait_daemon_pass
  [[ $(wc -l < ran) -eq 2 ]]  # started once
  for pid in $(cat ran); do  # the task and its child are gone
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    refute_alive "$pid"
  done
}

@test "tasks: a missing program or directory fails with 127; SIGKILL after the grace; default signals" {
  printf '[local]\ncpus = 2\n[rsub]\nkill_grace = "1s"\n' > "$RKIT_CONFIG"
  # Started from a shell that ignores SIGPIPE, as under systemd: the job must not inherit it.
  id=$(trap '' PIPE; rsub -- bash -c 'yes | head -1 > /dev/null; echo ${PIPESTATUS[0]}')
  run rsub wait "$id"
  assert_success
  run rsub logs "$id"
  assert_output 141
  id=$(rsub -- no-such-program-here)
  run -127 rsub wait "$id"
  run rsub logs --err "$id"
  assert_output --partial "no-such-program-here"
  id=$(rsub -C "$BATS_TEST_TMPDIR/gone" -- true)
  run -127 rsub wait "$id"
  start=$SECONDS
  id=$(rsub --time 1s -- bash -c 'trap "" TERM; sleep 30')
  run rsub wait "$id"
  assert_failure 124
  ((SECONDS - start < 10))
}

@test "8 processes submitting 250 jobs each: 2000 jobs, unique ids, none lost" {
  for p in $(seq 8); do
    (for i in $(seq 250); do rsub -q --hold -n "p$p" -- true; done > "ids.$p") &
  done
  wait
  cat ids.* | sort -n > all
  [[ $(wc -l < all) -eq 2000 ]]
  [[ $(sort -u all | wc -l) -eq 2000 ]]
  [[ $(rsub ls --json | jq -s 'map(select(.held)) | length') -eq 2000 ]]
}

@test "bad input: unknown ids, bad states and durations are one-line errors with their codes" {
  run --separate-stderr rsub show 999
  assert_failure 66
  assert_one_line_stderr
  run --separate-stderr rsub cancel x12
  assert_failure 64
  run --separate-stderr rsub ls --state BORED
  assert_failure 64
  id=$(rsub --hold -- true)
  run --separate-stderr rsub wait "$id" --timeout 0.2s
  assert_failure 75
  run --separate-stderr rsub wait "$id" --timeout soon
  assert_failure 64
  run --separate-stderr rsub logs "$id"
  assert_failure 66
  run -0 env RKIT_STATE_DIR="$BATS_TEST_TMPDIR/fresh" rsub status
  assert_line 'machine: 2 cores, 2 GPUs'
  RKIT_STATE_DIR=$BATS_TEST_TMPDIR/fresh stop_rsub
  run --separate-stderr rsub
  assert_failure 64
  printf '[local]\ncpus = "many"\n' > "$RKIT_CONFIG"
  run --separate-stderr rsub ls
  assert_failure 78
  assert_one_line_stderr
  # Values of the wrong kind are refused too, not ignored.
  for bad in 'rsub.admins = "alice"' 'rsub.users = "x"' 'rsub.tenants = 1' $'[rsub.tenants.a]\nmax_gpus = 2.5' \
    $'[local]\ncpus = 1.5' $'[rsub.priority]\nmax_age = "0.5s"'; do
    printf '%s\n' "$bad" > "$RKIT_CONFIG"
    run --separate-stderr rsub ls
    assert_failure 78
    assert_one_line_stderr
    [[ $stderr == "rsub: error: $RKIT_CONFIG:"* ]]
  done
}
