#!/usr/bin/env bash
# Runs every bench/<tool>.sh (or those named after $1: `bench/run.sh build rsub rckpt`)
# against the build in $1 and writes one JSON document to
# bench/results/bench-<UTC time>.json (and bench/results/latest.json), then prints a
# table. Each bench/<tool>.sh prints JSON lines, one per row, of two kinds:
#   timing (kind absent or "timing"): name, command, anchor, runs, median_s, stddev_s,
#     anchor_median_s, anchor_stddev_s, goal_ratio (tool time / anchor time must stay at
#     or under it), optionally goal_max_s (the tool's median must also stay at or under it)
#   value (kind "value"): name, command, anchor, value, unit ("ratio", "bytes", "s", "ms", or
#     "rows", a count: bench/rcost.sh's rows that differ between rcost's table and pandas'),
#     goal_max (value must stay at or under it) and/or goal_min (at or over it),
#     optionally rkit_bytes and anchor_bytes, or rkit_value and anchor_value
# A row with informational: true is reported but never fails the run.
# Exits nonzero when any other row misses its goal or any script fails (the rows of the
# others, and those the failed one printed, are kept).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
shift || true
only=("$@")
for name in "${only[@]}"; do
  [[ -f bench/$name.sh && $name != run ]] || { echo "bench/run.sh: error: no benchmark bench/$name.sh" >&2; exit 64; }
done
export RKIT_BUILD_DIR=$build
mkdir -p bench/results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=bench/results/bench-$stamp.json
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
loadavg() { cut -d' ' -f1-3 /proc/loadavg | jq -R -c 'split(" ") | map(tonumber)'; }
load_start=$(loadavg)  # other work on the machine skews the timings: recorded with them
failed=()  # a script that fails loses only its own unfinished rows, never the others'
for script in bench/*.sh; do
  [[ $(basename "$script") == run.sh ]] && continue
  [[ ${#only[@]} -eq 0 || " ${only[*]} " == *" $(basename "$script" .sh) "* ]] || continue
  bash "$script" >> "$lines" || failed+=("$(basename "$script")")
done
jq -s --arg git "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
      --arg host "$(hostname)" --arg cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
      --arg time "$stamp" --argjson cores "$(nproc)" --argjson l0 "$load_start" --argjson l1 "$(loadavg)" '
  { schema: "rkit.benchrun.v1", time: $time, git: $git, host: $host, cpu_model: $cpu, cpus: $cores,
    loadavg_start: $l0, loadavg_end: $l1,
    results: map(if .kind == "value"
                 then . + { pass: ((.goal_max == null or .value <= .goal_max) and (.goal_min == null or .value >= .goal_min)) }
                 else (.median_s / .anchor_median_s) as $r
                   | . + { kind: "timing", ratio: $r,
                           pass: ($r <= .goal_ratio and (.goal_max_s == null or .median_s <= .goal_max_s)) }
                 end) }' "$lines" > "$out"
cp "$out" bench/results/latest.json
echo "results: $out (load average at start $load_start, at end $(jq -c .loadavg_end "$out"))"
jq -r '
  def r(n): . * pow(10; n) | round / pow(10; n);
  def secs: if . >= 1 then "\(r(2)) s" else "\(. * 1000 | r(2)) ms" end;
  def bytes: if . >= 1073741824 then "\(. / 1073741824 | r(2)) GiB"
             elif . >= 1048576 then "\(. / 1048576 | r(1)) MiB"
             elif . >= 1024 then "\(. / 1024 | r(1)) KiB" else "\(.) B" end;
  def num($u): if $u == "bytes" then bytes elif $u == "s" then secs elif $u == "ms" then "\(r(2)) ms"
               else r(3) | tostring end;
  def goal_text($u): if .goal_min != null and .goal_max != null then "\(.goal_min | num($u))–\(.goal_max | num($u))"
                 elif .goal_min != null then "≥ \(.goal_min | num($u))" else "≤ \(.goal_max | num($u))" end;
  def opt(f): if . == null then "-" else f end;
  ["BENCH", "RKIT", "ANCHOR", "RATIO/VALUE", "GOAL", "VERDICT"],
  (.results[] |
    (if .pass then "ok" elif .kind == "value" then "OUTSIDE GOAL" else "SLOWER THAN GOAL" end) as $v
    | (if .informational == true then "info: \($v)" else $v end) as $verdict
    | if .kind == "value" then
        .unit as $u
        | [.name, (if .rkit_bytes != null then .rkit_bytes | bytes else .rkit_value | opt(r(4) | tostring) end),
           (if .anchor_bytes != null then .anchor_bytes | bytes else .anchor_value | opt(r(4) | tostring) end),
           (.value | num($u)), goal_text($u), $verdict]
      else
        [.name, (.median_s | secs), (.anchor_median_s | secs), (.ratio | r(3) | tostring),
         ("≤ \(.goal_ratio)" + (if .goal_max_s != null then ", ≤ \(.goal_max_s | secs)" else "" end)), $verdict]
      end) | @tsv' "$out" | column -t -s $'\t'
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "bench/run.sh: error: ${failed[*]} failed; their finished rows are above" >&2
  exit 1
fi
jq -e 'all(.results[]; .pass or .informational == true)' "$out" >/dev/null
