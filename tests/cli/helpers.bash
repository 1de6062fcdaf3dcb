# Shared setup for the Bats tests: the built tools on PATH, bats-assert loaded.
bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

RKIT_BUILD_DIR=${RKIT_BUILD_DIR:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)/build}
RKIT_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
FIXTURES=$RKIT_ROOT/tests/fixtures
for dir in "$RKIT_BUILD_DIR"/tools/*/; do PATH="$dir:$PATH"; done
export PATH RKIT_ROOT FIXTURES RKIT_BUILD_DIR
# The tools must not read the configuration of whoever runs the tests.
export RKIT_CONFIG=$FIXTURES/empty.toml XDG_CONFIG_HOME=$FIXTURES/no-such-dir

# Asserts that stderr (captured by `run --separate-stderr`) is exactly one line.
assert_one_line_stderr() {
  local n
  n=$(printf '%s' "$stderr" | grep -c '' || true)
  [[ "$n" -eq 1 ]] || { echo "expected one line on stderr, got $n: $stderr" >&2; return 1; }
}

# wait_state ID STATE [SECONDS]: waits until rsub job ID is in STATE (at most SECONDS, 10
# by default); prints the job and fails when it is not.
wait_state() {
  local deadline=$((SECONDS + ${3:-10}))
  while ((SECONDS < deadline)); do
    [[ $(rsub show "$1" --json | jq -r .state) == "$2" ]] && return 0
    sleep 0.1
  done
  rsub show "$1" >&2
  return 1
}

# refute_alive PID...: fails, naming it, when any of the processes still exists.
refute_alive() {
  local pid
  for pid in "$@"; do
    if kill -0 "$pid" 2>/dev/null; then echo "process $pid still runs" >&2; return 1; fi
  done
}
