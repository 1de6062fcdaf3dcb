#!/usr/bin/env bash
# `make fuzz`: runs each libFuzzer target in the build $1 for $2 seconds (default 60),
# starting from the committed corpus. New inputs go to $1/fuzz-corpus/<target>/ (copy
# the interesting ones into tests/fuzz/corpus/ to keep them as regressions). A crash
# leaves its input in $1/fuzz-crashes/ and makes the run fail.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "$1")
seconds=${2:-60}
status=0
for target in fuzz_units fuzz_config fuzz_jsonl fuzz_gpu_fixture fuzz_safetensors fuzz_manifest fuzz_archive; do
  work=$build/fuzz-corpus/$target
  crashes=$build/fuzz-crashes/$target/
  mkdir -p "$work" "$crashes"
  if "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
       -artifact_prefix="$crashes" "$work" "tests/fuzz/corpus/$target" > "$build/fuzz-$target.log" 2>&1; then
    echo "$target: ok, $(grep -oE '#[0-9]+' "$build/fuzz-$target.log" | tail -1 | tr -d '#') runs in ${seconds}s"
  else
    echo "$target: FAILED: $(ls "$crashes" | head -1) (log: $build/fuzz-$target.log)"
    status=1
  fi
done
exit $status
