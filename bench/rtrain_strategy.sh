#!/usr/bin/env bash
# rtrain run's strategies on 2 ranks (rtrain launch, 1 thread each, Gloo over loopback):
# each strategy's samples/s beside data parallel's on the reference workload (the
# 256→1024→1024→1 GELU MLP, batch 512 a rank), in rounds that alternate the strategies
# (5 rounds; medians, and the median of each round's ratio; goals: ZeRO-1 and 2, which
# send what dp sends, ≥ 0.9 of dp; ZeRO-3, which sends half again, ≥ 0.7; tp, whose
# all-reduce of activations nothing hides, ≥ 0.85; pp ≥ 0.55: the model cuts into
# stages of 14% and 86% of the work, and the 8 micro-batches' bubble). Each row also
# carries the step's exposed communication and the bytes a rank sent, from the summary.
# Then rtrain plan's error: its predicted step (from rbench run cpu.gemm cpu.stream
# comm.gloo on this machine) over each strategy's measured median step less data
# loading (goal within ±15%). Then the pipeline's bubble: pp on 2 ranks of a model cut in
# two equal stages (768→512→512→512→512, batch 1024 a rank), 2 and 4 micro-batches, the
# median step's bubble_fraction of the two stages less (p-1)/(m+p-1) (goal within ±0.05).
# Then the cost of --trace: data parallel's, ZeRO-3's, tensor and pipeline parallel's
# samples/s with a trace over without, in alternating pairs of 300-step runs, 7 pairs
# (goal ≥ 0.98: a trace costs at most 2% of a step).
set -euo pipefail
rtrain=$RKIT_BUILD_DIR/tools/rtrain/rtrain
[[ -x $rtrain ]] || { echo "rtrain_strategy.sh: error: no rtrain at $rtrain (build it first)" >&2; exit 1; }
source "$(dirname "$0")/lib/stats.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export RKIT_STATE_DIR=$tmp/state
ROUNDS=${ROUNDS:-5}
strategies=(dp zero1 zero2 zero3 tp pp)
workload=(--steps 60 --warmup-steps 5 --rows 60000 --threads 1 --no-track -q)

run2() {  # run2 NAME ARGS...: one 2-rank run, its summary and rate kept under NAME
  local name=$1
  shift
  rm -rf run.jsonl tr
  "$rtrain" launch --nproc-per-node 2 --master-port 0 -- "$rtrain" run "${workload[@]}" "$@" --events run.jsonl >/dev/null
  jq -c 'select(.event == "summary")' run.jsonl >>"$name.summaries"
  jq 'select(.event == "summary") | .samples_per_s' run.jsonl >>"$name.rate"
}
for ((i = 0; i < ROUNDS; i++)); do
  for s in "${strategies[@]}"; do run2 "$s" --strategy "$s"; done
done
for s in zero1 zero2 zero3 tp pp; do
  jq -n -c --arg s "$s" --argjson r "$(median <"$s.rate")" --argjson a "$(median <dp.rate)" \
    --argjson v "$(pair_ratio_median "$s.rate" dp.rate)" --argjson n "$ROUNDS" \
    --slurpfile z "$s.summaries" --slurpfile d dp.summaries '
    { kind: "value", name: "rtrain_\($s)_2_ranks_samples_per_s_vs_dp",
      command: "rtrain launch --nproc-per-node 2 -- rtrain run --strategy \($s) --threads 1 (256-1024-1024-1 MLP, batch 512 a rank)",
      anchor: "the same with --strategy dp", unit: "ratio", runs: $n,
      rkit_value: $r, anchor_value: $a, value: $v,
      goal_min: ({zero1: 0.9, zero2: 0.9, zero3: 0.7, tp: 0.85, pp: 0.55}[$s]),
      values_unit: "samples/s",
      exposed_s: ($z | map(.exposed_s) | sort | .[length / 2 | floor]),
      anchor_exposed_s: ($d | map(.exposed_s) | sort | .[length / 2 | floor]),
      bytes_sent: $z[0].bytes_sent, anchor_bytes_sent: $d[0].bytes_sent, memory_bytes: $z[0].memory_bytes,
      anchor_memory_bytes: $d[0].memory_bytes }'
done

"$RKIT_BUILD_DIR/tools/rbench/rbench" run cpu.gemm cpu.stream comm.gloo --json -q >machine.jsonl
"$rtrain" plan --ranks 2 --threads 1 --bench machine.jsonl --json >plans.jsonl
for s in "${strategies[@]}"; do
  jq -s -c --arg s "$s" --argjson n "$ROUNDS" --slurpfile z "$s.summaries" '
    (map(select(.strategy == $s))[0].step_time_s) as $p
    | ($z | map(.step_time_s - .data_s) | sort | .[length / 2 | floor]) as $m
    | { kind: "value", name: "rtrain_plan_\($s)_2_ranks_step_vs_measured",
        command: "rtrain plan --ranks 2 --bench (rbench run cpu.gemm cpu.stream comm.gloo --json) --strategy \($s)",
        anchor: "rtrain run --strategy \($s) on 2 ranks: the median step less data_s", unit: "ratio", runs: $n,
        rkit_value: $p, anchor_value: $m, value: ($p / $m), goal_min: 0.85, goal_max: 1.15, values_unit: "s" }' plans.jsonl
done

pipeline=(--layers 768,512,512,512,512 --batch-size 1024 --rows 100000 --steps 30 --warmup-steps 5 --threads 1
  --no-track -q --strategy pp --log-every 1)
for m in 2 4; do
  rm -f pp.jsonl
  "$rtrain" launch --nproc-per-node 2 --master-port 0 -- "$rtrain" run "${pipeline[@]}" --micro-batches "$m" \
    --events pp.jsonl >/dev/null
  jq -s -c --argjson m "$m" '
    [.[] | select(.event == "step" and .step > 2) | (.ranks | map(.bubble_fraction) | add / length)] | sort
    | .[length / 2 | floor] as $b | (1 / ($m + 1)) as $t
    | { kind: "value", name: "rtrain_pp_bubble_2_stages_\($m)_micro_vs_theory",
        command: "rtrain launch --nproc-per-node 2 -- rtrain run --strategy pp --micro-batches \($m) --layers 768,512,512,512,512 --batch-size 1024",
        anchor: "(p-1)/(m+p-1) = \($t)", unit: "fraction", runs: length,
        rkit_value: $b, anchor_value: $t, value: ($b - $t), goal_min: -0.05, goal_max: 0.05 }' pp.jsonl
done

workload=(--steps 300 --warmup-steps 5 --rows 200000 --threads 1 --no-track -q)
PAIRS=${PAIRS:-7}
for s in dp zero3 tp pp; do
  for ((i = 0; i < PAIRS; i++)); do
    if ((i % 2)); then
      run2 "$s.traced" --strategy "$s" --trace tr
      run2 "$s.plain" --strategy "$s"
    else
      run2 "$s.plain" --strategy "$s"
      run2 "$s.traced" --strategy "$s" --trace tr
    fi
  done
  jq -n -c --arg s "$s" --argjson r "$(median <"$s.traced.rate")" --argjson a "$(median <"$s.plain.rate")" \
    --argjson v "$(pair_ratio_median "$s.traced.rate" "$s.plain.rate")" --argjson n "$PAIRS" '
    { kind: "value", name: "rtrain_trace_\($s)_2_ranks_samples_per_s_vs_untraced",
      command: "rtrain launch --nproc-per-node 2 -- rtrain run --strategy \($s) --trace DIR --threads 1 --steps 300",
      anchor: "the same without --trace", unit: "ratio", runs: $n,
      rkit_value: $r, anchor_value: $a, value: $v, goal_min: 0.98, values_unit: "samples/s" }'
done
