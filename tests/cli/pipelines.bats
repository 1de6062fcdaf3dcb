#!/usr/bin/env bats
# The pipelines the README shows, run as pipes: each tool's records are the next one's input.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  rsub_sandbox
  prices=$RKIT_ROOT/examples/prices.toml
}

teardown() {
  stop_rsub
}

# A CPU list ("0-2,5", as taskset prints it) as numbers, one per line.
cpu_numbers() {
  local part
  for part in ${1//,/ }; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done | sort -n
}

@test "rtop place --json | rtrain launch --placement -: each worker starts on its rank's CPUs" {
  rtop place --ranks 2 --json >placement.jsonl
  run -0 bash -c "rtop place --ranks 2 --json |
    rtrain launch --nproc-per-node 2 --placement - -- sh -c 'echo rank \$RANK of \$WORLD_SIZE on cpus \$(taskset -cp \$\$ | cut -d\" \" -f6)'"
  for rank in 0 1; do
    line=$(grep -E "^\[$rank\]: rank $rank of 2 on cpus " <<<"$output")
    want=$(jq -r --argjson r "$rank" 'select(.rank == $r) | .pus[]' placement.jsonl | sort -n)
    [ -n "$want" ]
    assert_equal "$(cpu_numbers "${line##* }")" "$want"
  done
}

@test "rsub ls --all --json | rcost report -: what each tenant's jobs cost" {
  a=$(rsub -t desk-a -c 2 -- sleep 1)
  b=$(rsub -t desk-b -c 1 -- sleep 1)
  c=$(rsub -t desk-b -c 1 -- sleep 1)
  rsub wait "$a" "$b" "$c"
  run -0 bash -c "rsub ls --all --json | rcost --prices $prices report --json -"
  rows=$output
  # Each tenant's core-seconds are its jobs' cores times their elapsed seconds, from rsub.
  rsub ls --all --json | jq -s -c 'group_by(.tenant)[] | {tenant: .[0].tenant, jobs: length,
    core_s: (map(.cpus * .elapsed_s) | add)}' >expected.jsonl
  while read -r want; do
    tenant=$(jq -r .tenant <<<"$want")
    jq -e -s --argjson w "$want" '[.[] | select(.schema == "rkit.cost.v1" and .tenant == $w.tenant)] |
      length == 1 and .[0].jobs == $w.jobs and (.[0].core_hours * 3600 - $w.core_s | fabs) < 0.001
      and .[0].cost > 0' <<<"$rows" || { echo "tenant $tenant: $want" >&2; return 1; }
  done <expected.jsonl
  [ "$(wc -l <expected.jsonl)" -eq 2 ]
  # The table of the same pipe names both tenants and the total.
  run -0 bash -c "rsub ls --all --json | rcost --prices $prices report -"
  assert_line --regexp '^desk-a +1 '
  assert_line --regexp '^desk-b +2 '
  assert_line --regexp '^TOTAL +3 '
}

@test "rbench run --json | rcost perf -: dollars per unit of measured work" {
  run -0 bash -c "rbench -q run cpu.stream --quick --json | rcost --prices $prices perf --json -"
  # One priced row per stream metric, each its own measurement's hourly price over its value.
  for metric in copy scale add triad; do
    jq -e -s --arg m "$metric" '[.[] | select(.suite == "cpu.stream" and .metric == $m)] | length == 1 and
      .[0].unit == "GB/s" and .[0].per == "GB/s-hour" and .[0].hourly_cost > 0 and .[0].value > 0 and
      ((.[0].cost_per - .[0].hourly_cost / .[0].value) | fabs) < 1e-9 * .[0].cost_per' <<<"$output"
  done
}

@test "rtrain run --json | rcost perf -: what a training run cost, and per million samples" {
  run -0 bash -c "rtrain run --steps 20 --rows 5000 --log-every 10 --json | rcost --prices $prices perf --json -"
  # The run's cost is its wall time at the machine's hourly price.
  jq -e -s 'length == 1 and .[0].source == "rtrain" and .[0].per == "run" and .[0].unit == "s" and
    ((.[0].cost_per - .[0].hourly_cost * .[0].value / 3600) | fabs) < 1e-9 and .[0].per_million_samples > 0' <<<"$output"
}
