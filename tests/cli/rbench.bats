#!/usr/bin/env bats
# rbench end to end: listing, running suites, records, comparing runs, bad input.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
}

# A comm.gloo test that failed half-way may leave its background rbench running, and a
# rank stopped: kill the ranks (each leads its own process group; SIGKILL also ends a
# stopped one), then rbench. Only while $pid is still this shell's child, so that a pid
# already waited for (and perhaps reused) is left alone.
teardown() {
  [[ -n ${pid-} && $(ps -o ppid= -p "$pid" 2>/dev/null) -eq $BASHPID ]] || return 0
  local rank
  for rank in $(pgrep -P "$pid"); do kill -KILL -- "-$rank" 2>/dev/null || kill -KILL "$rank" 2>/dev/null || true; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

@test "list names every suite and whether it can run here" {
  run rbench list
  assert_success
  assert_line --regexp '^cpu\.stream +yes'
  run rbench list --json
  assert_success
  echo "$output" | jq -e -s 'all(.schema == "rkit.bench.suite.v1") and (map(.suite) | index("cpu.stream") != null)'
}

@test "run cpu.stream --quick: four checked rkit.bench.v1 records" {
  run --separate-stderr rbench run cpu.stream --quick --reps 2 --json
  assert_success
  [[ $(echo "$output" | jq -s 'length') -eq 4 ]]
  echo "$output" | jq -e -s 'map(.metric) == ["copy", "scale", "add", "triad"]'
  echo "$output" | jq -e -s 'all(.schema == "rkit.bench.v1" and .correct and .reps == 2 and (.samples | length) == 2
                                and .median > 0 and .min <= .median and .median <= .max and .unit == "GB/s"
                                and .params.array_bytes >= 4 * .params.llc_bytes and .host.cores >= 1)'
  [[ "$stderr" == *"cpu.stream"* ]]
}

@test "train.mlp --quick: rtrain run's samples/s, checked, and no record left in the run store" {
  run --separate-stderr rbench run train.mlp --quick --reps 1 --warmup 0 --json
  assert_success
  jq -e -s 'length == 1 and .[0].suite == "train.mlp" and .[0].correct == true and .[0].median > 0' <<<"$output"
  assert [ ! -e "$RKIT_STATE_DIR/runs/runs.db" ]
}

@test "-o writes the records to a file as well" {
  run rbench run cpu.stream --quick --reps 1 -o out.jsonl -q
  assert_success
  [[ $(wc -l < out.jsonl) -eq 4 ]]
  jq -e -s 'all(.suite == "cpu.stream")' out.jsonl
}

@test "compare: the same machine twice is no regression; a metric 20% worse exits 1 and is named" {
  for pair in "base again" "again base"; do
    set -- $pair
    run rbench compare "$FIXTURES/bench/$1.jsonl" "$FIXTURES/bench/$2.jsonl"
    assert_success
    refute_output --partial regression
  done
  run rbench compare "$FIXTURES/bench/base.jsonl" "$FIXTURES/bench/worse.jsonl" --json
  assert_failure 1
  echo "$output" | jq -e -s 'map(select(.verdict == "regression")) | length == 1 and .[0].suite == "cpu.stream" and .[0].metric == "triad"'
}

@test "compare: a faster result that failed its check is wrong, not better" {
  jq -c 'if .metric == "triad" then .correct = false | .samples |= map(. * 1.5) | .median *= 1.5 else . end' \
    "$FIXTURES/bench/base.jsonl" > wrongfast.jsonl
  run rbench compare "$FIXTURES/bench/base.jsonl" wrongfast.jsonl --json
  assert_failure 1
  echo "$output" | jq -e -s 'map(select(.metric == "triad"))[0].verdict == "wrong"'
}

@test "bad input: unknown suite 64, malformed results 65, missing file 66, unwritable output 77 or 74" {
  run --separate-stderr rbench run no.such.suite
  assert_failure 64
  assert_one_line_stderr
  [[ "$stderr" == *"unknown suite 'no.such.suite'"* ]]
  printf 'not json\n' > bad.jsonl
  run --separate-stderr rbench compare bad.jsonl bad.jsonl
  assert_failure 65
  assert_one_line_stderr
  run --separate-stderr rbench compare missing.jsonl missing.jsonl
  assert_failure 66
  assert_one_line_stderr
  run --separate-stderr rbench run cpu.stream --quick --reps 1 -o /nonexistent/dir/out.jsonl
  assert_failure 66
  assert_one_line_stderr
  mkdir adir
  run --separate-stderr rbench run cpu.stream --quick --reps 1 -o adir
  assert_failure 74
  assert_one_line_stderr
  run --separate-stderr rbench run cpu.stream io.seq --quick --reps 1 --dir /nonexistent
  assert_failure 66
  [[ -z "$output" ]]   # found before cpu.stream ran
  run --separate-stderr rbench run cpu.stream --threads 1000
  assert_failure 64
  jq -c '.suite = "other.suite"' "$FIXTURES/bench/base.jsonl" > other.jsonl
  run --separate-stderr rbench compare "$FIXTURES/bench/base.jsonl" other.jsonl
  assert_failure 65
  [[ "$stderr" == *"no measurement in common"* ]]
  run --separate-stderr rbench compare "$FIXTURES/bench/base.jsonl" "$FIXTURES/bench/base.jsonl" --fail-below 2
  assert_failure 64
  run --separate-stderr rbench
  assert_failure 64
}

@test "run comm.gloo --quick: four collectives up to 64 MiB, each checked, busbw by nccl-tests' factors" {
  run --separate-stderr rbench run comm.gloo --quick --reps 1 --warmup 0 --json
  assert_success
  echo "$output" | jq -e -s 'length == 16 and (map(.metric) | unique) == ["allgather", "allreduce", "broadcast", "reduce_scatter"]'
  echo "$output" | jq -e -s 'all(.schema == "rkit.bench.v1" and .suite == "comm.gloo" and .correct
                                and (.check | startswith("0 wrong of ")) and .unit == "GB/s" and .median > 0
                                and .params.ranks == 2 and .params.dtype == "float32" and .peak == null
                                and (.peak_source | length) > 0)'
  echo "$output" | jq -e -s 'map(select(.params.bytes == 67108864)) | length == 4'
  echo "$output" | jq -e -s 'map({(.metric): .params.busbw_factor}) | add == {allreduce: 1, allgather: 0.5, reduce_scatter: 0.5, broadcast: 1}'
  [[ "$stderr" == *"comm.gloo allreduce 64 MiB x 2 ranks"* ]]
}

@test "comm.gloo on 3 ranks: nccl-tests' sizes (16-byte blocks per rank) and factors, all right" {
  run --separate-stderr env RKIT_BENCH_GLOO_SIZES=1K,40 rbench run comm.gloo --ranks 3 --reps 1 --warmup 0 --json
  assert_success
  # 40 B is 3 floats per rank for allgather and reduce_scatter: below one 16-byte block, not run.
  echo "$output" | jq -e -s 'map("\(.metric) \(.params.bytes)") == ["allreduce 1024", "allreduce 40", "allgather 1008",
                              "reduce_scatter 1008", "broadcast 1024", "broadcast 40"]'
  echo "$output" | jq -e -s 'all(.correct and .params.ranks == 3)
                             and (map(select(.metric == "allreduce"))[0].params.busbw_factor | . * 3 | round) == 4'
}

@test "comm.gloo bad input: --ranks 0, 1 or 65 and a malformed size list exit 64 before anything runs" {
  for n in 0 1 65; do
    run --separate-stderr rbench run comm.gloo --ranks "$n"
    assert_failure 64
    assert_one_line_stderr
    [[ "$stderr" == *"ranks"* ]]
  done
  run --separate-stderr env RKIT_BENCH_GLOO_SIZES=64Q rbench run comm.gloo
  assert_failure 64
  assert_one_line_stderr
  [[ "$stderr" == *RKIT_BENCH_GLOO_SIZES* ]]
}

@test "a later suite's bad option or variable exits 64 before the first suite runs, and writes no -o" {
  for bad in "--ranks 1" "--ranks 65"; do
    run --separate-stderr rbench run cpu.stream comm.gloo $bad --quick -o r.jsonl
    assert_failure 64
    assert_one_line_stderr
    [[ "$stderr" == *"--ranks"*"2 to 64"* ]]
  done
  for var in RKIT_BENCH_GLOO_SIZES=64Q RKIT_BENCH_GLOO_TIMEOUT=1ms; do
    run --separate-stderr env "$var" rbench run cpu.stream comm.gloo --quick -o r.jsonl
    assert_failure 64
    assert_one_line_stderr   # no progress line: cpu.stream did not start
    [[ "$stderr" == "rbench: error: ${var%%=*}: "* ]]
  done
  run --separate-stderr env RKIT_BENCH_IO_BYTES=1K rbench run cpu.stream io.seq --quick -o r.jsonl
  assert_failure 64
  assert_one_line_stderr
  [[ "$stderr" == "rbench: error: RKIT_BENCH_IO_BYTES: "* ]]
  [[ -z "$output" ]]
  assert_file_not_exist r.jsonl
}

@test "run cpu.stream does not load the GPU plug-in; run gpu, list and an unknown suite do" {
  fake="$RKIT_BUILD_DIR/tests/fakes/libfake_gpu_plugin.so"
  [[ -f "$fake" ]] || fail "$fake is missing: build the fake_gpu_plugin target (tests on)"
  export RKIT_BENCH_GPU_PLUGIN=$fake  # found or not, the loader names it when asked to open it
  for args in "run cpu.stream --quick --reps 1" "run cpu --quick --reps 1" "run comm.gloo cpu.stream --quick --reps 1"; do
    run --separate-stderr env LD_DEBUG=files RKIT_BENCH_GLOO_SIZES=1K rbench $args -q
    assert_success
    [[ "$stderr" != *"$fake"* ]] || fail "rbench $args loaded the plug-in"
  done
  for args in "run gpu" "run gpu.gemm cpu.stream" "run no.such" "list"; do
    run --separate-stderr env LD_DEBUG=files rbench $args -q
    [[ "$stderr" == *"file=$fake"* ]] || fail "rbench $args did not try the plug-in"
  done
}

# rbench run comm.gloo in the background on big sizes; sets $pid, waits until both ranks run.
start_gloo_run() {
  mkdir -p "$BATS_TEST_TMPDIR/tmp"
  TMPDIR=$BATS_TEST_TMPDIR/tmp RKIT_BENCH_GLOO_SIZES=64M rbench run comm.gloo --reps 1000 --json "$@" \
    > out.jsonl 2> err.txt &
  pid=$!
  for _ in $(seq 100); do
    [[ $(pgrep -P "$pid" | wc -l) -eq 2 ]] && grep -q "allreduce" err.txt && return 0
    sleep 0.1
  done
  echo "the ranks did not start: $(cat err.txt)" >&2
  return 1
}

# Nothing of the run is left: no rank (the parent's children, or anything using its
# directory) and no temporary directory.
assert_nothing_left() {
  run pgrep -f "$BATS_TEST_TMPDIR/tmp/rbench-gloo"
  assert_failure 1
  [[ -z $(ls -A "$BATS_TEST_TMPDIR/tmp") ]]
}

@test "comm.gloo: a rank that dies ends the run with one line naming it, and leaves nothing behind" {
  start_gloo_run
  kill -KILL "$(pgrep -P "$pid" -f ' rank=1 ')"
  rc=0
  wait "$pid" || rc=$?
  [[ $rc -eq 75 ]]   # killed from outside (the OOM killer would): a temporary failure
  stderr=$(grep -v '^rbench: comm.gloo allreduce' err.txt)
  assert_one_line_stderr
  [[ "$stderr" == *"rank 1 (pid "*") was killed by signal 9 (SIGKILL)"* ]]
  assert_nothing_left
}

@test "comm.gloo: Ctrl-C and a stalled rank (gloo's timeout) stop every rank and clean up" {
  start_gloo_run
  kill -INT "$pid"
  rc=0
  wait "$pid" || rc=$?
  [[ $rc -eq 130 ]]
  grep -q "interrupted by SIGINT" err.txt
  assert_nothing_left

  export RKIT_BENCH_GLOO_TIMEOUT=1s
  start_gloo_run
  stopped=$(pgrep -P "$pid" -f ' rank=1 ')
  kill -STOP "$stopped"
  rc=0
  wait "$pid" || rc=$?
  [[ $rc -eq 75 ]]   # a timeout: a temporary failure, as the parent's own stall check
  stderr=$(grep -v '^rbench: comm.gloo allreduce' err.txt)
  assert_one_line_stderr
  [[ "$stderr" == *"rank 0 failed"*"Timed out"* ]]
  run kill -0 "$stopped"   # killed (SIGKILL reaches a stopped process) and reaped
  assert_failure
  assert_nothing_left
}
