#!/usr/bin/env bash
# rtrain launch against torchrun (Debian's python3-torch):
#   - launch overhead: the wall time from launch until 4 workers running `true` have all
#     finished, rtrain over `torchrun --standalone --no_python` (7 runs each, alternating,
#     medians). torchrun needs its per-rank --redirects/--tee maps on Python 3.11 (DESIGN.md).
#   - restart latency: a worker of generation 0 kills itself; the time from its exit to the
#     next generation's start, from rtrain's own events (the workers' startup not counted).
#     Median of 7.
set -euo pipefail
rtrain=$RKIT_BUILD_DIR/tools/rtrain/rtrain
[[ -x $rtrain ]] || { echo "rtrain.sh: error: no rtrain at $rtrain (build it first)" >&2; exit 1; }
command -v torchrun >/dev/null || { echo "rtrain.sh: error: torchrun not found (packaging/install-deps.sh bench)" >&2; exit 1; }
source "$(dirname "$0")/lib/stats.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export RKIT_STATE_DIR=$tmp/state  # rtrain run's records: kept here, not in the user's state

wall() {  # wall seconds of one run of the command
  local start=$EPOCHREALTIME
  "$@" >/dev/null 2>&1
  awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}'
}
for ((i = 0; i < 7; i++)); do
  wall "$rtrain" launch --nproc-per-node 4 --master-port 0 -- true >>rtrain.times
  wall torchrun --standalone --nproc_per_node 4 --no_python --redirects 0:1,1:1,2:1,3:1 --tee 0:1,1:1,2:1,3:1 true >>torchrun.times
done
jq -n -c --argjson r "$(median <rtrain.times)" --argjson a "$(median <torchrun.times)" '
  { kind: "value", name: "rtrain_launch_4_true_vs_torchrun", command: "rtrain launch --nproc-per-node 4 -- true",
    anchor: "torchrun --standalone --nproc_per_node 4 --no_python true", unit: "ratio", runs: 7,
    rkit_value: $r, anchor_value: $a, value: ($r / $a), goal_max: 0.05, values_unit: "s" }'

for ((i = 0; i < 7; i++)); do
  rm -f events.jsonl
  "$rtrain" launch --nproc-per-node 4 --max-restarts 1 --kill-grace 5 --events events.jsonl -- sh -c \
    'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then if [ "$RANK" = 1 ]; then sleep 0.3; kill -9 $$; fi; sleep 30; fi' \
    >/dev/null 2>&1
  jq -s 'map(select(.event == "worker_exit" and .generation == 0 and .rank == 1))[0].time_unix_s as $dead
         | map(select(.event == "start" and .generation == 1))[0].time_unix_s - $dead' events.jsonl >>restart.times
done
jq -n -c --argjson v "$(median <restart.times)" '
  { kind: "value", name: "rtrain_restart_after_killed_worker", command: "rtrain launch --nproc-per-node 4 --max-restarts 1 (rank 1 kill -9s itself)",
    anchor: "the issue'"'"'s limit", unit: "s", runs: 7, value: $v, goal_max: 1 }'
