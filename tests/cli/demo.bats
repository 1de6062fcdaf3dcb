#!/usr/bin/env bats
# `make demo` (examples/demo.sh) end to end: every step runs, its files stay in the one
# directory it names, and it leaves no process behind.
bats_require_minimum_version 1.5.0
load helpers

@test "the demo runs every tool end to end and leaves its files in the directory it names" {
  export RKIT_DEMO_DIR=$BATS_TEST_TMPDIR/demo
  run "$RKIT_ROOT/examples/demo.sh" "$RKIT_BUILD_DIR"
  assert_success
  assert_line --index 0 "demo: files in $RKIT_DEMO_DIR"
  assert_line "demo: ok; files in $RKIT_DEMO_DIR"
  # The steps the issue lists, each with real output.
  for cmd in 'rtop' 'rbench -q run --quick' 'job=\$\(rsub submit' 'rsub wait' 'rckpt verify' 'rckpt ls' \
    'rsub ls --all --json \| rcost --prices prices.toml report'; do
    assert_line --regexp "^\\\$ $cmd"
  done
  assert_line --regexp '^cpu\.stream +triad .* ok$'
  assert_line --regexp '^\[0\]: 300 steps on cpu .*2 ranks'
  assert_line --regexp '^1 +train +.* COMPLETED '
  assert_line --regexp '^ok: [0-9]+ frames, .*ckpt/step-300\.rkpt$'
  assert_line --regexp '^model\.safetensors +file '
  assert_line --regexp '^TOTAL +1 '

  cd "$RKIT_DEMO_DIR"
  # rbench's records, the samples and the checkpoints are real files a user can reuse.
  jq -e -s 'length > 0 and all(.schema == "rkit.bench.v1" and .correct)' bench.jsonl
  jq -e -s 'length >= 2 and all(.schema == "rkit.sample.v1")' samples.jsonl
  for step in 100 200 300; do rckpt verify "ckpt/step-$step.rkpt"; done
  run env RKIT_STATE_DIR="$RKIT_DEMO_DIR/state" RKIT_CONFIG="$RKIT_DEMO_DIR/rkit.toml" rsub ls --all --json
  echo "$output" | jq -e -s 'length == 1 and .[0].state == "COMPLETED" and .[0].project == "demo"'
  # The scheduler's daemon was stopped; no sampler or trainer is left.
  refute_alive "$(cat state/rsub/daemon.pid)"
  run pgrep -f "$RKIT_DEMO_DIR|rtop sample --interval 1s"
  assert_failure
}

@test "the demo refuses a directory that is not empty" {
  mkdir -p "$BATS_TEST_TMPDIR/used" && touch "$BATS_TEST_TMPDIR/used/file"
  RKIT_DEMO_DIR=$BATS_TEST_TMPDIR/used run -64 "$RKIT_ROOT/examples/demo.sh" "$RKIT_BUILD_DIR"
  assert_output "demo: error: $BATS_TEST_TMPDIR/used is not empty (set RKIT_DEMO_DIR to a new directory)"
}
