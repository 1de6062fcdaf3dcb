#!/usr/bin/env bash
# Runs every test layer against the build in $1 (default build/) and prints one
# closing line "total: N passed, N failed". Exit status 0 only when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
export RKIT_BUILD_DIR=$build
passed=0 failed=0

echo "== unit tests (GoogleTest via ctest)"
ctest_out=$(ctest --test-dir "$build" --output-on-failure -j "$(nproc)" 2>&1)
echo "$ctest_out" | grep -E 'tests passed|Failed|\*\*\*' || true
read -r ok total < <(echo "$ctest_out" | sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1 \2/p' \
  | awk '{print $2-$1, $2}')
if [[ -z "${total:-}" ]]; then
  echo "$ctest_out" | tail -20
  echo "unit tests did not run" >&2
  failed=$((failed + 1))
else
  passed=$((passed + ok)); failed=$((failed + total - ok))
fi

echo "== command-line tests (Bats)"
tap=$(bats --tap tests/cli 2>&1)
echo "$tap" | grep -E '^not ok|^#' | head -100 || true
ok=$(echo "$tap" | grep -c '^ok ' || true)
bad=$(echo "$tap" | grep -c '^not ok ' || true)
echo "bats: $ok passed, $bad failed"
if [[ $((ok + bad)) -eq 0 ]]; then
  echo "$tap" | tail -20
  failed=$((failed + 1))
fi
passed=$((passed + ok)); failed=$((failed + bad))

echo "total: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
