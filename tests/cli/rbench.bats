#!/usr/bin/env bats
# rbench end to end: listing, running suites, records, comparing runs, bad input.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
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
