#!/usr/bin/env bash
# Runs every test layer against the build in $1 (default build/) and prints one
# closing line "total: N passed, N failed, N skipped". Exit status 0 only when
# nothing failed. Skipped tests are counted apart, never as passes.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
export RKIT_BUILD_DIR=$build
passed=0 failed=0 skipped=0

echo "== unit tests (GoogleTest via ctest)"
ctest_out=$(ctest --test-dir "$build" --output-on-failure -j "$(nproc)" 2>&1)
echo "$ctest_out" | grep -E 'tests passed|\*\*\*|Not Run|Skipped' || true
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' <<<"$ctest_out")
if [[ -z "$total" ]]; then
  echo "$ctest_out" | tail -20
  echo "unit tests did not run" >&2
  failed=$((failed + 1))
else
  bad=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' <<<"$ctest_out")
  skip=$(grep -cE '\*\*\*Skipped' <<<"$ctest_out" || true)
  passed=$((passed + total - bad - skip)); failed=$((failed + bad)); skipped=$((skipped + skip))
fi

# bats_layer TITLE DIR: runs the Bats files in DIR and adds their counts.
bats_layer() {
  local title=$1 dir=$2 tap skip ok bad
  echo "== $title"
  tap=$(bats --tap "$dir" 2>&1)
  echo "$tap" | grep -E '^not ok|^#|# skip' | head -100 || true
  skip=$(grep -cE '^ok .* # skip' <<<"$tap" || true)
  ok=$(($(grep -c '^ok ' <<<"$tap" || true) - skip))
  bad=$(grep -c '^not ok ' <<<"$tap" || true)
  echo "$(basename "$dir"): $ok passed, $bad failed, $skip skipped"
  if [[ $((ok + bad + skip)) -eq 0 ]]; then
    echo "$tap" | tail -20
    failed=$((failed + 1))
  fi
  passed=$((passed + ok)); failed=$((failed + bad)); skipped=$((skipped + skip))
}
bats_layer "command-line tests (Bats)" tests/cli
bats_layer "integration tests (Bats; a real Slurm with accounting, started as root)" tests/integration

echo "total: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
