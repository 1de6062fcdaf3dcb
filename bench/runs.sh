#!/usr/bin/env bash
# The run store (rtrain runs, rtrain run's records). No tool people use today keeps these
# records offline (MLflow, W&B and DVC are not in Debian), so the rows are the issue's
# limits, with the raw SQLite read beside them for scale:
#   - recording: what keeping a run's record costs rtrain run, per step: the summary's
#     tracking_s over the steps' time, a metric record every step (--log-every 1), the
#     default model at 2 threads (goal ≤ 0.01)
#   - rtrain runs ls over 100,000 runs, the table and --json, to /dev/null (goal ≤ 0.5 s);
#     anchor: sqlite3 printing the same rows' columns
#   - rtrain runs compare of 10 runs of 1,000 steps × 10 metrics, with --html (goal ≤ 1 s)
set -euo pipefail
rtrain=$RKIT_BUILD_DIR/tools/rtrain/rtrain
[[ -x $rtrain ]] || { echo "runs.sh: error: no rtrain in $RKIT_BUILD_DIR (build first)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "runs.sh: error: sqlite3 missing (packaging/install-deps.sh bench)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/stats.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export RKIT_STATE_DIR=$tmp/state
RUNS=${RKIT_BENCH_RUNS:-10}

# Recording's cost per step: 3 runs, the median.
for ((i = 0; i < 3; i++)); do
  "$rtrain" run --steps 300 --log-every 1 --warmup-steps 5 --rows 60000 --threads 2 -q --json >/dev/null
  "$rtrain" runs ls --last 1 --json |
    jq '.summary | .tracking_s / (.step_time_s * (.steps - .start_step))' >>cost
done
jq -n -c --argjson v "$(median <cost)" '
  { kind: "value", name: "rtrain_run_recording_cost_per_step",
    command: "rtrain run --steps 300 --log-every 1 --threads 2 (its run record: tracking_s / training time)",
    anchor: "the issue: at most 1% of the step time", unit: "ratio", runs: 3, value: $v, goal_max: 0.01 }'

# A store of 100,000 runs, copies of a real one.
mkdir big
"$rtrain" run --steps 20 --rows 2000 --layers 8,16,1 --threads 1 -q --project big
/usr/bin/python3 "$here/runs_gen.py" big/runs.db 100000
# The anchors: sqlite3 printing what each form reads, the table's few columns (each
# metric's last value by its index) and every column of the whole records.
table_sql="SELECT r.run_id, r.experiment, r.name, r.status, r.start_s, r.end_s,
  (SELECT last FROM latest WHERE run = r.id AND key = 'loss'),
  (SELECT last FROM latest WHERE run = r.id AND key = 'eval_loss') FROM runs r ORDER BY r.id"
json_sql="SELECT r.*, t.* FROM runs r JOIN run_texts t ON t.run = r.id ORDER BY r.id"
bench_ls() {  # NAME SQL FLAGS...: one row, each side's output to /dev/null
  local name=$1 sql=$2; shift 2
  hyperfine -w 1 -r "$RUNS" --export-json "$name.json" \
    "$rtrain runs --project big ls $* >/dev/null" "sqlite3 big/runs.db \"$sql\" >/dev/null" >/dev/null
  jq -c --arg n "$name" --arg f "$*" '.results as $r | { kind: "value", name: $n,
    command: "rtrain runs ls \($f) over 100,000 runs", anchor: "sqlite3 printing the rows it reads",
    unit: "s", runs: ($r[0].times | length), rkit_value: $r[0].median, anchor_value: $r[1].median,
    value: $r[0].median, goal_max: 0.5 }' "$name.json"
}
bench_ls rtrain_runs_ls_100k_table "$table_sql"
bench_ls rtrain_runs_ls_100k_json "$json_sql" --json

# compare: 10 runs of 1,000 steps of 10 metrics each.
mkdir ten
"$rtrain" run --steps 20 --rows 2000 --layers 8,16,1 --threads 1 -q --project ten
/usr/bin/python3 "$here/runs_gen.py" ten/runs.db 11 1000
ids=$("$rtrain" runs --project ten ls --json | jq -r .id | tail -10 | tr '\n' ' ')
hyperfine -N -w 1 -r "$RUNS" --export-json cmp.json "$rtrain runs --project ten compare $ids --html page.html" >/dev/null
jq -c '.results[0] as $r | { kind: "value", name: "rtrain_runs_compare_10_html",
  command: "rtrain runs compare (10 runs, 1,000 steps x 10 metrics each) --html",
  anchor: "the issue: at most 1 s", unit: "s", runs: ($r.times | length), value: $r.median, goal_max: 1.0 }' cmp.json
