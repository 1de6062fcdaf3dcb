#!/usr/bin/env bash
# rbench comm.gloo against PyTorch's Gloo (Debian python3-torch 1.13, CPU): the bus
# bandwidth of a 64 MiB float32 allreduce between 2 local processes. Both sides call the
# same libgloo (gloo::allreduce, ring, gloo::sum<float>) and time it the same way
# (tests/peers/torch_gloo_allreduce.py follows comm.gloo's rule: fresh inputs, barrier,
# time per rank, mean over ranks, median over samples), so the row checks that rbench's
# harness costs nothing: rbench's busbw / PyTorch's must be at least 0.95.
# Loopback bandwidth on this VM flips between regimes (about 1.0 and 1.5 GB/s here, as
# other work comes and goes) for tens of seconds at a time, so the sides run in PAIRS
# back-to-back pairs (default 10; which goes first alternates): a pair shares its regime,
# where medians taken per side need not. The value is, as pair_ratio_orders (bench/lib/stats.sh) explains,
# the geometric mean of the two orders' median ratios, so that going first favours neither.
# rkit_value and anchor_value are the sides' medians. Both sides run under the same
# environment (OPENBLAS_CORETYPE & co.).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rbench=$RKIT_BUILD_DIR/tools/rbench/rbench
peer=$root/tests/peers/torch_gloo_allreduce.py
pairs=${PAIRS:-10}
((pairs >= 2)) || { echo "rbench_comm.sh: error: PAIRS must be 2 or more (one pair of each order)" >&2; exit 64; }
reps=9
[[ -x $rbench ]] || { echo "rbench_comm.sh: $rbench is not built" >&2; exit 1; }
/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
  { echo "rbench_comm.sh: needs /usr/bin/python3 with torch and Gloo (python3-torch)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$root/bench/lib/stats.sh"

rkit_cmd="RKIT_BENCH_GLOO_SIZES=64M rbench run comm.gloo --ranks 2 --reps $reps --warmup 1 --json"
torch_cmd="/usr/bin/python3 tests/peers/torch_gloo_allreduce.py --bytes 64M --ranks 2 --reps $reps --warmup 1"
rkit_side() {  # one rbench run: its allreduce busbw median (GB/s), only when its check passed
  RKIT_BENCH_GLOO_SIZES=64M "$rbench" -q run comm.gloo --ranks 2 --reps "$reps" --warmup 1 --json |
    jq -r 'select(.metric == "allreduce" and .params.bytes == 67108864 and .correct) | .median' >> "$tmp/rkit" || true
}
torch_side() {
  /usr/bin/python3 "$peer" --bytes 64M --ranks 2 --reps "$reps" --warmup 1 |
    jq -r 'select(.wrong == 0) | .busbw_GBps_median' >> "$tmp/torch" || true
}
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then rkit_side; torch_side; else torch_side; rkit_side; fi
done
for side in rkit torch; do
  n=$(wc -l < "$tmp/$side")
  ((n == pairs)) || { echo "rbench_comm.sh: $side gave $n checked results of $pairs" >&2; exit 1; }
done

m_r=$(median < "$tmp/rkit")
m_t=$(median < "$tmp/torch")
orders=$(pair_ratio_orders "$tmp/rkit" "$tmp/torch")
jq -n -c --arg cmd "$rkit_cmd" --arg anchor "$torch_cmd" --argjson r "$m_r" --argjson a "$m_t" \
  --argjson o1 "${orders% *}" --argjson o2 "${orders#* }" --argjson n "$pairs" --slurpfile rs <(jq -s . "$tmp/rkit") \
  --slurpfile ts <(jq -s . "$tmp/torch") '
  { kind: "value", name: "comm.gloo_allreduce_64m_vs_torch", command: $cmd, anchor: $anchor,
    unit: "ratio", runs: $n, rkit_value: $r, anchor_value: $a, value: ($o1 * $o2 | sqrt), goal_min: 0.95,
    ratio_rkit_first: $o1, ratio_anchor_first: $o2,
    rkit_busbw_GBps: $rs[0], anchor_busbw_GBps: $ts[0] }'
