#!/usr/bin/env bats
# `make demo` (examples/demo.sh) end to end: every step runs, its files stay in the one
# directory it names, and it leaves no process behind.
bats_require_minimum_version 1.5.0
load helpers

# The processes whose working directory is DIR or below it, one "pid command" per line.
procs_in() {
  local p cwd
  for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    [[ $cwd == "$1" || $cwd == "$1"/* ]] && echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
  done
  return 0
}

@test "the demo runs every tool end to end and leaves its files in the directory it names" {
  mkdir "$BATS_TEST_TMPDIR/demo"
  export RKIT_DEMO_DIR=$(realpath "$BATS_TEST_TMPDIR/demo")
  run "$RKIT_ROOT/examples/demo.sh" "$RKIT_BUILD_DIR"
  assert_success
  assert_line --index 0 "demo: files in $RKIT_DEMO_DIR"
  assert_line "demo: ok; files in $RKIT_DEMO_DIR"
  # The steps the issue lists, each with real output.
  for cmd in 'rtop' 'rbench -q run --quick' 'job=\$\(rsub submit' 'rsub wait' 'rckpt verify' 'rckpt ls' \
    'rsub ls --all --json \| rcost --prices prices.toml report' '\(cd pipeline && rsub workflow -s' \
    'rsub ls --all --json --workflow pipeline \| rcost --prices prices.toml report --by workflow,rule'; do
    assert_line --regexp "^\\\$ $cmd"
  done
  assert_line --regexp '^cpu\.stream +triad .* ok$'
  assert_line --regexp '^\[0\]: 300 steps on cpu .*2 ranks'
  assert_line --regexp '^1 +train +.* COMPLETED '
  assert_line --regexp '^ok: [0-9]+ frames, .*ckpt/step-300\.rkpt$'
  assert_line --regexp '^model\.safetensors +file '
  # The pipeline: its report, and its cost per stage (18 market jobs of 29).
  assert_line --regexp '^model: 200 steps on 2 ranks, eval loss [0-9.]+, 2 checkpoints$'
  assert_line --regexp '^2026-01-09 +3 +379 '
  assert_line --regexp '^pipeline +market +18 '
  assert_line --regexp '^TOTAL +29 '
  assert_line --regexp '^TOTAL +30 '  # the session: the training job and the pipeline's
  assert_line --regexp ': 30 jobs ran, 30 read$'

  cd "$RKIT_DEMO_DIR"
  # rbench's records, the samples and the checkpoints are real files a user can reuse.
  jq -e -s 'length > 0 and all(.schema == "rkit.bench.v1" and .correct)' bench.jsonl
  jq -e -s 'length >= 2 and all(.schema == "rkit.sample.v1")' samples.jsonl
  for step in 100 200 300; do rckpt verify "ckpt/step-$step.rkpt"; done
  # The scheduler's daemon ended (it removes its pid file, and its lock is free), and no
  # process is left working in the demo's directory (the sampler, the job, the trainers).
  assert_file_not_exists state/rsub/daemon.pid
  flock -n state/rsub/daemon.lock true
  cd "$BATS_TEST_TMPDIR"  # this test's own shell must not count
  assert_equal "$(procs_in "$RKIT_DEMO_DIR")" ""
  # The job's record, from a daemon started for the question and stopped after it.
  run env RKIT_STATE_DIR="$RKIT_DEMO_DIR/state" RKIT_CONFIG="$RKIT_DEMO_DIR/rkit.toml" rsub ls --all --json
  RKIT_STATE_DIR=$RKIT_DEMO_DIR/state stop_rsub
  echo "$output" | jq -e -s 'length == 30 and all(.state == "COMPLETED")
                             and (map(select(.workflow == "pipeline")) | length) == 29
                             and (map(select(.name == "train" and .workflow == null)) | .[0].project) == "demo"'
}

@test "an interrupted demo cancels its job and leaves no process behind" {
  mkdir "$BATS_TEST_TMPDIR/demo"
  export RKIT_DEMO_DIR=$(realpath "$BATS_TEST_TMPDIR/demo")
  "$RKIT_ROOT/examples/demo.sh" "$RKIT_BUILD_DIR" >"$BATS_TEST_TMPDIR/demo.out" 2>&1 &
  pid=$!
  # SIGTERM once the training job runs: the demo's EXIT trap cancels it.
  for _ in $(seq 600); do [[ -e $RKIT_DEMO_DIR/ckpt ]] && break; sleep 0.1; done
  [[ -e $RKIT_DEMO_DIR/ckpt ]]
  kill -TERM "$pid"
  run wait "$pid"
  assert_failure
  for _ in $(seq 100); do [[ -z $(procs_in "$RKIT_DEMO_DIR") ]] && break; sleep 0.1; done
  assert_equal "$(procs_in "$RKIT_DEMO_DIR")" ""
  run env RKIT_STATE_DIR="$RKIT_DEMO_DIR/state" RKIT_CONFIG="$RKIT_DEMO_DIR/rkit.toml" rsub ls --all --json
  RKIT_STATE_DIR=$RKIT_DEMO_DIR/state stop_rsub
  echo "$output" | jq -e -s 'length == 1 and .[0].state == "CANCELLED"'
}

@test "the demo refuses a directory that is not empty, a build without the tools, a directory it cannot make" {
  mkdir -p "$BATS_TEST_TMPDIR/used" && touch "$BATS_TEST_TMPDIR/used/file"
  used=$(realpath "$BATS_TEST_TMPDIR/used")
  RKIT_DEMO_DIR=$used run -64 "$RKIT_ROOT/examples/demo.sh" "$RKIT_BUILD_DIR"
  assert_output "demo: error: $used is not empty (set RKIT_DEMO_DIR to a new directory)"
  run -66 "$RKIT_ROOT/examples/demo.sh" "$BATS_TEST_TMPDIR/no-build"
  assert_output "demo: error: no rtop in $BATS_TEST_TMPDIR/no-build/tools/rtop (build first: make)"
  RKIT_DEMO_DIR=$used/file/demo run -74 "$RKIT_ROOT/examples/demo.sh" "$RKIT_BUILD_DIR"
  assert_output "demo: error: cannot create the directory $used/file/demo"
}
