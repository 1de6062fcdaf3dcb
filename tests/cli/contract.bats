#!/usr/bin/env bats
# What every tool does alike, whichever it is (rkit(7)): one rule for output that a
# reader no longer takes, for conflicting format flags, and for bytes that are not UTF-8.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  printf '[local]\ncpus = 2\ngpus = 0\n' >"$RKIT_CONFIG"
}

teardown() {
  stop_rsub
}

# closed_pipe CMD...: runs CMD with stdout a pipe whose reader has gone, and SIGPIPE at
# its default (Python's subprocess restores it), as under any shell.
closed_pipe() {
  python3 -c '
import os, subprocess, sys
r, w = os.pipe()
os.close(r)
p = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE)
sys.stderr.buffer.write(p.stderr)
sys.exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)' "$@"
}

@test "a reader that went away: every tool exits 74 with one line, none dies of SIGPIPE (141)" {
  for t in $(tools); do
    run --separate-stderr closed_pipe "$t" --help
    assert_failure 74
    assert_one_line_stderr
    assert_equal "$stderr" "$t: error: write stdout: Broken pipe"
  done
  run --separate-stderr closed_pipe rtop --synthetic "pack:1 core:2 pu:1" --json
  assert_failure 74
  assert_equal "$stderr" "rtop: error: write stdout: Broken pipe"
  run --separate-stderr closed_pipe rbench list --json
  assert_failure 74
  assert_equal "$stderr" "rbench: error: write stdout: Broken pipe"
}

@test "format flags that disagree are a usage error (64), not one of them silently" {
  run --separate-stderr rcost report --json --format csv /dev/null
  assert_failure 64
  assert_one_line_stderr
  [[ $stderr == *"--json and --format csv exclude each other"* ]]
  run --separate-stderr rcost --prices "$FIXTURES/rcost/prices.toml" report --csv --format html /dev/null
  assert_failure 64
  [[ $stderr == *"--csv and --format html exclude each other"* ]]
  run --separate-stderr rsub ls --json --csv
  assert_failure 64
}

@test "rsub show and why print CSV for --csv: a header and a row per job" {
  id=$(rsub --hold -n csvjob -- true)
  run -0 rsub show "$id" --csv
  [[ ${#lines[@]} -eq 2 ]]
  python3 -c 'import csv, sys; rows = list(csv.DictReader(sys.stdin)); assert rows[0]["name"] == "csvjob" and rows[0]["state"] == "PENDING", rows' <<<"$output"
  run -0 rsub why "$id" --csv
  [[ ${#lines[@]} -eq 2 ]]
  python3 -c 'import csv, sys; r = list(csv.DictReader(sys.stdin))[0]; assert r["id"] == sys.argv[1] and r["reason"] == "JobHeldUser", r' "$id" <<<"$output"
  rsub cancel "$id"
}

@test "bytes that are not UTF-8 reach the job and come back in its records, each one" {
  id=$(rsub -e $'BAD=v\xfe' -- sh -c 'printf "%s|%s" "$1" "$BAD" | od -An -tx1 | tr -d " \n"' sh $'a\xffb')
  wait_state "$id" COMPLETED
  run -0 rsub logs "$id"
  assert_output "61ff627c76fe"  # a, 0xff, b, |, v, 0xfe
  rsub show "$id" --json | jq -e '.command[4] == {"hex": "61ff62"} and .env.BAD == {"hex": "76fe"} and .command[0] == "sh"'
  rsub ls --all --json | jq -e --arg id "$id" 'select(.id == $id) | .command[4].hex == "61ff62"'
  run -0 rsub submit --dry-run --json -- printf $'\xff'
  jq -e '.command == ["printf", {"hex": "ff"}] and .name == "printf"' <<<"$output"
  # A name is text: refused on the command line (64), with what is wrong.
  run --separate-stderr rsub -n $'n\xff' -- true
  assert_failure 64
  assert_one_line_stderr
  [[ $stderr == *"UTF-8"* ]]
}
