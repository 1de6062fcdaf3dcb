#!/usr/bin/env bash
# Runs every bench/<tool>.sh against the build in $1 and writes one JSON document to
# bench/results/bench-<UTC time>.json (and bench/results/latest.json), then prints a
# ratio table. Each bench/<tool>.sh prints JSON lines, one per comparison, with
#   name, command, anchor, median_s, anchor_median_s, stddev_s, anchor_stddev_s,
#   runs, goal_ratio (tool time / anchor time must stay at or under it)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
export RKIT_BUILD_DIR=$build
mkdir -p bench/results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=bench/results/bench-$stamp.json
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for script in bench/*.sh; do
  [[ $(basename "$script") == run.sh ]] && continue
  bash "$script" >> "$lines"
done
jq -s --arg git "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
      --arg host "$(hostname)" --arg cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
      --arg time "$stamp" --argjson cores "$(nproc)" '
  { schema: "rkit.benchrun.v1", time: $time, git: $git, host: $host, cpu_model: $cpu, cpus: $cores,
    results: map(. + { ratio: (.median_s / .anchor_median_s),
                       pass: ((.median_s / .anchor_median_s) <= .goal_ratio) }) }' "$lines" > "$out"
cp "$out" bench/results/latest.json
echo "results: $out"
jq -r '["BENCH", "RKIT_MEDIAN", "ANCHOR_MEDIAN", "RATIO", "GOAL", "VERDICT"],
       (.results[] | [.name, "\(.median_s * 1000 | . * 100 | round / 100) ms",
                      "\(.anchor_median_s * 1000 | . * 100 | round / 100) ms",
                      (.ratio | . * 100 | round / 100 | tostring), "≤ \(.goal_ratio)",
                      (if .pass then "ok" else "SLOWER THAN GOAL" end)]) | @tsv' "$out" | column -t -s $'\t'
jq -e 'all(.results[]; .pass)' "$out" >/dev/null
