#!/usr/bin/env bash
# rcost against pandas (Debian's python3-pandas) on the issue's report: cost by tenant and
# UTC day over 10 million rkit.job.v1 records (bench/rcost_gen.py: as rsub writes them,
# November 2026, 50 tenants, many runs across midnight), no samples:
#   rcost report --prices examples/prices.toml --by tenant,day --since 2026-11-01
#                --until 2026-12-04 --share-idle none --json FILE
# against bench/rcost_pandas.py computing the same table (json.loads into a DataFrame per
# chunk, day pieces with numpy, groupby, priced from the same sheet with tomllib).
# Rows (JSON lines for bench/run.sh):
#   - rcost's median wall time with the file in the page cache (goal ≤ 10 s; the cold
#     time, the file evicted first, is recorded as rcost_cold_s);
#   - pandas' median over rcost's, PAIRS back-to-back pairs (goal ≥ 5);
#   - rcost's peak memory (max RSS, /usr/bin/time) over pandas' (goal ≤ 1: rcost sums as
#     it streams, so its memory is bounded by the groups, not the records);
#   - the check: every (tenant, day) row of both tables, jobs equal and hours and cost
#     within 0.005; the value is the number of differences (goal 0). A disagreement is
#     printed on stderr and fails the run.
# RCOST_BENCH_JOBS (default 10000000) sizes the input (1000000 for a quick look; the
# rows' names follow it); RCOST_BENCH_PAIRS (default 3); RCOST_BENCH_DIR (default
# /var/tmp, a real disk) holds the ~8 GB file (generating it takes ~3 minutes here),
# removed at exit. RCOST_BENCH_INPUT=FILE uses FILE instead (kept; N is its line count),
# e.g. one written once with `bench/rcost_gen.py 10000000 1 > FILE`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prices=$(dirname "$here")/examples/prices.toml
rcost=$RKIT_BUILD_DIR/tools/rcost/rcost
[[ -x $rcost ]] || { echo "rcost.sh: error: no rcost at $rcost (build it first)" >&2; exit 1; }
/usr/bin/python3 -c 'import pandas, numpy' 2>/dev/null ||
  { echo "rcost.sh: error: /usr/bin/python3 lacks pandas or numpy (apt-get install python3-pandas)" >&2; exit 1; }
source "$here/lib/stats.sh"
input=${RCOST_BENCH_INPUT:-}
if [[ -n $input ]]; then
  [[ -f $input ]] || { echo "rcost.sh: error: RCOST_BENCH_INPUT: no file $input" >&2; exit 1; }
  N=$(wc -l <"$input")
else
  N=${RCOST_BENCH_JOBS:-10000000}
fi
PAIRS=${RCOST_BENCH_PAIRS:-3}
SEED=1
SINCE=2026-11-01 UNTIL=2026-12-04
if ((N % 1000000 == 0)); then label=$((N / 1000000))m
elif ((N % 1000 == 0)); then label=$((N / 1000))k
else label=$N; fi
name=rcost_report_tenant_day_$label

dir=${RCOST_BENCH_DIR:-/var/tmp}
need=$((N * 900))  # ~800 bytes a record
[[ -n $input ]] && need=$((64 << 20))
avail=$(df -B1 --output=avail "$dir" | tail -1 | tr -d ' ')
((avail > need)) || { echo "rcost.sh: error: $dir has $avail bytes free, the input needs about $need" >&2; exit 1; }
tmp=$(mktemp -d -p "$dir" rcost-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
loadavg() { cut -d' ' -f1-3 /proc/loadavg | jq -R -c 'split(" ") | map(tonumber)'; }
load_start=$(loadavg)

if [[ -n $input ]]; then
  jobs=$(realpath "$input")
  gen_s=null
else
  jobs=$tmp/jobs.jsonl
  start=$EPOCHREALTIME
  /usr/bin/python3 "$here/rcost_gen.py" "$N" "$SEED" >"$jobs"
  gen_s=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}')
fi
bytes=$(stat -c %s "$jobs")
mem_avail=$(awk '/^MemAvailable:/ {print $2 * 1024}' /proc/meminfo)
((mem_avail > bytes + (4 << 30))) ||
  echo "rcost.sh: warning: $mem_avail bytes of memory available for a $bytes-byte input: the page cache may not hold it" >&2
[[ -n $input ]] || echo "rcost.sh: generated $N records, $bytes bytes, in $gen_s s" >&2

rcost_cmd=("$rcost" report --prices "$prices" --by tenant,day --since "$SINCE" --until "$UNTIL" --share-idle none --json "$jobs")
pandas_cmd=(/usr/bin/python3 "$here/rcost_pandas.py" "$jobs" --since "$SINCE" --until "$UNTIL" --prices "$prices" --out "$tmp/pandas.csv")
# timed OUT_PREFIX CMD...: appends the wall seconds to OUT_PREFIX.times, the processor
# seconds (user + system, all threads) to OUT_PREFIX.cpu and the peak RSS bytes to
# OUT_PREFIX.rss (/usr/bin/time); the command's stdout goes to OUT_PREFIX.out.
timed() {
  local prefix=$1 secs kib user sys
  shift
  /usr/bin/time -f '%e %M %U %S' -o "$prefix.time" "$@" >"$prefix.out"
  read -r secs kib user sys <"$prefix.time"
  echo "$secs" >>"$prefix.times"
  echo "$user $sys" | awk '{print $1 + $2}' >>"$prefix.cpu"
  echo $((kib * 1024)) >>"$prefix.rss"
}

# Cold: the file written out and dropped from the page cache (this file only), then read.
/usr/bin/python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$jobs"
timed "$tmp/cold" "${rcost_cmd[@]}"
# Warm: pairs back to back, so that both sides of a pair share the machine's load.
for ((i = 0; i < PAIRS; i++)); do
  timed "$tmp/rcost" "${rcost_cmd[@]}"
  timed "$tmp/pandas" "${pandas_cmd[@]}"
done
load_end=$(loadavg)

# The check: the last run of each side (both are deterministic).
/usr/bin/python3 - "$tmp/rcost.out" "$tmp/pandas.csv" "$N" >"$tmp/check.json" <<'EOF'
import csv, json, sys
rcost_out, pandas_csv, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
FIGURES = ("gpu_hours", "core_hours", "memory_gib_hours", "cost")
rows, summary, problems = {}, None, []
for line in open(rcost_out):
    d = json.loads(line)
    if d["schema"] == "rkit.cost.v1":
        if d["idle"]:
            problems.append(f"rcost has an idle row for {d['day']}")
        rows[(d["tenant"], d["day"])] = d
    elif d["schema"] == "rkit.cost.summary.v1":
        summary = d
if summary is None:
    problems.append("rcost printed no summary")
elif summary["jobs_read"] != n or summary["bad_records"] != 0:
    problems.append(f"rcost read {summary['jobs_read']} jobs of {n}, {summary['bad_records']} bad records")
theirs = {(r["tenant"], r["day"]): r for r in csv.DictReader(open(pandas_csv))}
for k in sorted(rows.keys() - theirs.keys()):
    problems.append(f"{k[0]} {k[1]}: only in rcost's table")
for k in sorted(theirs.keys() - rows.keys()):
    problems.append(f"{k[0]} {k[1]}: only in pandas' table")
worst = dict.fromkeys(FIGURES, 0.0)
for k in sorted(rows.keys() & theirs.keys()):
    a, b = rows[k], theirs[k]
    if a["jobs"] != int(b["jobs"]):
        problems.append(f"{k[0]} {k[1]}: jobs {a['jobs']} (rcost) vs {b['jobs']} (pandas)")
    for f in FIGURES:
        diff = abs(a[f] - float(b[f]))
        worst[f] = max(worst[f], diff)
        if not diff < 0.005:
            problems.append(f"{k[0]} {k[1]}: {f} {a[f]!r} (rcost) vs {b[f]} (pandas)")
for p in problems[:20]:
    print("rcost.sh: error: tables disagree:", p, file=sys.stderr)
if len(problems) > 20:
    print(f"rcost.sh: error: ... {len(problems)} differences in all", file=sys.stderr)
json.dump({"differences": len(problems), "rcost_rows": len(rows), "pandas_rows": len(theirs),
           "max_abs_diff": worst, "jobs_run": summary and summary["jobs_run"]}, sys.stdout)
EOF

rcost_s=$(median <"$tmp/rcost.times")
pandas_s=$(median <"$tmp/pandas.times")
speedup=$(pair_ratio_median "$tmp/pandas.times" "$tmp/rcost.times")
jq -n -c --arg name "$name" --arg cmd "rcost report --prices examples/prices.toml --by tenant,day --since $SINCE --until $UNTIL --share-idle none --json JOBS ($N records)" \
  --arg anchor "bench/rcost_pandas.py JOBS --since $SINCE --until $UNTIL --prices examples/prices.toml" \
  --argjson n "$N" --argjson bytes "$bytes" --argjson pairs "$PAIRS" --argjson gen "$gen_s" \
  --argjson r "$rcost_s" --argjson p "$pandas_s" --argjson v "$speedup" --argjson cold "$(cat "$tmp/cold.times")" \
  --argjson rrss "$(sort -g "$tmp/rcost.rss" | tail -1)" --argjson prss "$(sort -g "$tmp/pandas.rss" | tail -1)" \
  --argjson rcpu "$(median <"$tmp/rcost.cpu")" --argjson pcpu "$(median <"$tmp/pandas.cpu")" \
  --argjson rall "$(jq -s -c . "$tmp/rcost.times")" --argjson pall "$(jq -s -c . "$tmp/pandas.times")" \
  --argjson l0 "$load_start" --argjson l1 "$load_end" --slurpfile check "$tmp/check.json" '
  { records: $n, file_bytes: $bytes, generate_s: $gen, rcost_s: $r, rcost_cold_s: $cold, pandas_s: $p,
    speedup: $v, rcost_runs_s: $rall, pandas_runs_s: $pall, rcost_cpu_s: $rcpu, pandas_cpu_s: $pcpu,
    rcost_max_rss_bytes: $rrss, pandas_max_rss_bytes: $prss,
    goals: { rcost_max_s: 10, speedup_min: 5, peak_memory_ratio_max: 1, differences_max: 0 },
    goal_pass: { rcost_max_s: ($r <= 10), speedup_min: ($v >= 5), peak_memory_ratio_max: ($rrss <= $prss),
                 differences_max: ($check[0].differences == 0) },
    check: $check[0], loadavg_start: $l0, loadavg_end: $l1, runs: $pairs,
    command: $cmd, anchor: $anchor } as $common
  | ($common + { kind: "value", name: "\($name)_s", anchor: "the issue'"'"'s limit (warm page cache; rcost_cold_s: the file evicted first)",
                 unit: "s", value: $r, rkit_value: $r, values_unit: "s", goal_max: 10 }),
    ($common + { kind: "value", name: "\($name)_vs_pandas", unit: "ratio", rkit_value: $r, anchor_value: $p,
                 values_unit: "s", value: $v, goal_min: 5 }),
    ($common + { kind: "value", name: "\($name)_peak_memory_vs_pandas", unit: "ratio", rkit_bytes: $rrss,
                 anchor_bytes: $prss, value: ($rrss / $prss), goal_max: 1 }),
    ($common + { kind: "value", name: "\($name)_table_vs_pandas", unit: "rows", rkit_value: $check[0].rcost_rows,
                 anchor_value: $check[0].pandas_rows, value: $check[0].differences, goal_max: 0 })'
