#!/usr/bin/env bats
# rcost end to end. Totals are compared with an independent computation over the same
# records (rcost_check.py, written from rcost(1)'s definitions, not from its code) to the
# cent, with a price sheet whose rates make a second of a job cost dollars
# (fixtures/rcost/prices.toml) and with examples/prices.toml. Capacity from samples must
# land in exactly one of used, allocated idle and unallocated. One test runs a real local
# rsub (private state directory and daemon, stopped by pid in teardown).
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state  # never the state of whoever runs the tests
  CHECK=$BATS_TEST_DIRNAME/rcost_check.py
  PRICES=$FIXTURES/rcost/prices.toml
  EXAMPLE_PRICES=$RKIT_ROOT/examples/prices.toml
  T0=1793491200  # 2026-11-01T00:00:00Z: the synthetic records' window is [T0, T0 + 10 h)
  T1=$((T0 + 36000))
}

teardown() {  # the rsub daemon and job supervisors of the test that started them
  stop_rsub
}

# totals_match REPORT CHECK-TOTALS-ARGS...: the check's per-tenant totals over the same
# inputs, compared with REPORT (rcost report --json) to the cent.
totals_match() {
  local report=$1; shift
  python3 "$CHECK" totals "$@" >"$report.expected"
  run python3 "$CHECK" compare --expect "$report.expected" --rcost "$report"
  echo "$output"
  assert_success
}

@test "rsub's records: per-tenant totals equal the independent computation; capacity is conserved" {
  export RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  printf '[local]\ncpus = 2\ngpus = 2\nmemory = "4G"\n' >"$RKIT_CONFIG"
  a=$(rsub -t alpha -- sleep 1)
  c=$(rsub -t beta -g 1 -- sleep 1)
  b=$(rsub -t beta -c 2 --mem 1G -- sleep 1)
  wait_state "$b" RUNNING  # before d is submitted: else d, narrower, may start first
  d=$(rsub -t alpha -g 2 --mem 512M -- sleep 30)  # still running when the records are read
  run rsub wait "$a" "$b" "$c"
  assert_success
  wait_state "$d" RUNNING
  rsub ls --all --json >jobs.jsonl
  [[ $(jq -s 'length' jobs.jsonl) -eq 4 ]]
  jq -e -s 'map(select(.end_unix_s == null)) | length == 1' jobs.jsonl
  host=$(jq -r -s '.[0].host' jobs.jsonl)
  [[ -n $host && $host != null ]]
  # The window cuts the first job and ends 2 s after the running one started.
  since=$(jq -s --arg a "$a" 'map(select(.id == $a))[0].start_unix_s + 0.25' jobs.jsonl)
  until=$(jq -s --arg d "$d" 'map(select(.id == $d))[0].start_unix_s + 2' jobs.jsonl)
  first=$(jq -s 'map(.start_unix_s) | min' jobs.jsonl)

  # Without samples: GPUs without a type are priced at the sheet's default.
  run --separate-stderr rcost --prices "$PRICES" report --since "@$since" --until "@$until" --share-idle none --json jobs.jsonl
  assert_success
  echo "$output" >plain.jsonl
  totals_match plain.jsonl --prices "$PRICES" --since "$since" --until "$until" jobs.jsonl

  # With samples of the jobs' host (2 GPUs named NVIDIA H200, 2 CPUs): the GPUs are priced as
  # H200, and the records come through stdin as rsub ls --json | rcost report - would give them.
  python3 "$CHECK" samples --host "$host" --start "$(jq -n "$first - 3")" --end "$until" --interval 0.5 \
    --gpus 2 --cpus 2 --memory-bytes $((4 << 30)) >samples.jsonl
  run --separate-stderr rcost --prices "$PRICES" report --since "@$since" --until "@$until" --share-idle none --json - samples.jsonl <jobs.jsonl
  assert_success
  echo "$output" >none.jsonl
  totals_match none.jsonl --prices "$PRICES" --since "$since" --until "$until" jobs.jsonl samples.jsonl
  run ! cmp -s none.jsonl.expected plain.jsonl.expected  # the samples' GPU name changed the price
  python3 "$CHECK" capacity --prices "$PRICES" --since "$since" --until "$until" jobs.jsonl samples.jsonl >capacity.json
  jq -e '.detailed and .gpu.allocated_hours > 0 and .gpu.allocated_hours < .gpu.capacity_hours' capacity.json
  run python3 "$CHECK" check-capacity --exact --expect capacity.json --rcost none.jsonl
  echo "$output"
  assert_success
  for how in none weighted even; do
    rcost --prices "$PRICES" report --since "@$since" --until "@$until" --share-idle "$how" --json jobs.jsonl samples.jsonl >"$how.jsonl"
    run python3 "$CHECK" check-idle --share-idle "$how" --expect none.jsonl.expected --rcost "$how.jsonl"
    echo "$output"
    assert_success
  done
}

@test "synthetic records: totals to the cent with both price sheets (clipping, running, pending, spot, derived, GPU names)" {
  for sheet in "$PRICES" "$EXAMPLE_PRICES"; do
    run --separate-stderr rcost --prices "$sheet" report --since "@$T0" --until "@$T1" --share-idle none --json "$FIXTURES/rcost/synthetic.jsonl"
    assert_success
    [[ -z $stderr ]]
    echo "$output" >report.jsonl
    totals_match report.jsonl --prices "$sheet" --since "$T0" --until "$T1" "$FIXTURES/rcost/synthetic.jsonl"
    jq -e -s 'last | .jobs_read == 11 and .bad_records == 0' report.jsonl
  done
}

@test "synthetic records with samples: GPU names from samples, capacity conserved, idle cost shared" {
  python3 "$CHECK" samples --host n1 --start $((T0 - 1800)) --end $((T0 + 9000)) --interval 60 --gpus 2 --cpus 4 \
    --gpu-name "NVIDIA H200 NVL" >samples.jsonl
  python3 "$CHECK" samples --host n2 --start $((T0 + 1500)) --end $((T0 + 3000)) --interval 30 --gpus 8 --cpus 16 \
    --gpu-name "NVIDIA H100 80GB HBM3" --seed 2 >>samples.jsonl
  inputs=("$FIXTURES/rcost/synthetic.jsonl" samples.jsonl)
  run --separate-stderr rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --share-idle none --json "${inputs[@]}"
  assert_success
  echo "$output" >none.jsonl
  totals_match none.jsonl --prices "$PRICES" --since "$T0" --until "$T1" "${inputs[@]}"
  python3 "$CHECK" capacity --prices "$PRICES" --since "$T0" --until "$T1" "${inputs[@]}" >capacity.json
  run python3 "$CHECK" check-capacity --exact --expect capacity.json --rcost none.jsonl
  echo "$output"
  assert_success
  rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --json "${inputs[@]}" >weighted.jsonl
  run python3 "$CHECK" check-idle --share-idle weighted --expect none.jsonl.expected --rcost weighted.jsonl
  echo "$output"
  assert_success
}

@test "over-committed host: jobs hold more GPUs and cores than the samples show; capacity is still conserved" {
  cat >jobs.jsonl <<EOF
{"schema":"rkit.job.v1","id":"1","backend":"local","tenant":"a","user":"u","state":"COMPLETED","cpus":3,"gpus":2,"gpu_type":null,"submit_unix_s":$T0,"start_unix_s":$((T0 + 600)),"end_unix_s":$((T0 + 4200)),"host":"big","alloc":[{"task":0,"pus":[0,1,2],"gpus":[0,1]}]}
{"schema":"rkit.job.v1","id":"2","backend":"local","tenant":"b","user":"u","state":"COMPLETED","cpus":1,"gpus":1,"gpu_type":null,"submit_unix_s":$T0,"start_unix_s":$((T0 + 1800)),"end_unix_s":$((T0 + 6000)),"host":"big","alloc":[{"task":0,"pus":[0],"gpus":[0]}]}
EOF
  python3 "$CHECK" samples --host big --start "$T0" --end $((T0 + 7200)) --interval 60 --gpus 1 --cpus 2 >samples.jsonl
  run --separate-stderr rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --share-idle none --json jobs.jsonl samples.jsonl
  assert_success
  echo "$output" >report.jsonl
  totals_match report.jsonl --prices "$PRICES" --since "$T0" --until "$T1" jobs.jsonl samples.jsonl
  python3 "$CHECK" capacity --prices "$PRICES" --since "$T0" --until "$T1" jobs.jsonl samples.jsonl >capacity.json
  # Held beyond the capacity: from T0 + 600 to T0 + 6000 the one GPU is allocated all the time.
  jq -e '(.gpu.capacity_hours - 2 | fabs) < 1e-9 and (.gpu.allocated_hours - 1.5 | fabs) < 1e-9' capacity.json
  run python3 "$CHECK" check-capacity --exact --expect capacity.json --rcost report.jsonl
  echo "$output"
  assert_success
  jq -e -s 'last | .total.gpu_sampled_hours <= .capacity.gpu.capacity_hours' report.jsonl
}

@test "two samplers on one host (overlapping samples): capacity counts each covered second once" {
  # Sampler A every 10 s, sampler B every 4 s, started 1 s later: B's samples lie inside A's.
  python3 "$CHECK" samples --host n1 --start "$T0" --end $((T0 + 600)) --interval 10 --gpus 2 --cpus 4 >samples.jsonl
  python3 "$CHECK" samples --host n1 --start $((T0 + 1)) --end $((T0 + 597)) --interval 4 --gpus 2 --cpus 4 --seed 3 >>samples.jsonl
  printf '%s\n' "{\"schema\":\"rkit.job.v1\",\"id\":\"1\",\"backend\":\"local\",\"tenant\":\"a\",\"user\":\"u\",\"state\":\"COMPLETED\",\"cpus\":2,\"gpus\":1,\"submit_unix_s\":$T0,\"start_unix_s\":$((T0 + 100)),\"end_unix_s\":$((T0 + 400)),\"host\":\"n1\"}" >jobs.jsonl
  run --separate-stderr rcost --prices "$PRICES" report --since "@$T0" --until "@$((T0 + 600))" --share-idle none --json jobs.jsonl samples.jsonl
  assert_success
  echo "$output" >report.jsonl
  python3 "$CHECK" capacity --prices "$PRICES" --since "$T0" --until $((T0 + 600)) jobs.jsonl samples.jsonl >capacity.json
  jq -e '.detailed == false and (.gpu.capacity_hours - 2 * 600 / 3600 | fabs) < 1e-9' capacity.json
  run python3 "$CHECK" check-capacity --expect capacity.json --rcost report.jsonl
  echo "$output"
  assert_success
}

@test "sacct -P text: local times, AllocTRES memory units and GPU types, rsub.users, stdin" {
  export TZ=IST-5:30  # sacct prints local time: rcost and the check must both read it so
  printf '[rsub.users]\ncarol = "bio"\n' >rkit.toml
  for input in "$FIXTURES/rcost/sacct.txt" -; do
    run --separate-stderr rcost --config rkit.toml --prices "$PRICES" report --since "@$T0" --until "@$T1" --share-idle none --json "$input" <"$FIXTURES/rcost/sacct.txt"
    assert_success
    [[ -z $stderr ]]
    echo "$output" >report.jsonl
    totals_match report.jsonl --config rkit.toml --prices "$PRICES" --since "$T0" --until "$T1" "$FIXTURES/rcost/sacct.txt"
    jq -e -s 'map(select(.schema == "rkit.cost.v1") | .tenant) | sort == ["bio", "chem", "physics"]' report.jsonl
  done
  # --slurm-backend prices the same jobs on another backend of the sheet.
  rcost --config rkit.toml --prices "$PRICES" report --since "@$T0" --until "@$T1" --share-idle none --json --slurm-backend cloud "$FIXTURES/rcost/sacct.txt" >cloud.jsonl
  totals_match cloud.jsonl --config rkit.toml --slurm-backend cloud --prices "$PRICES" --since "$T0" --until "$T1" "$FIXTURES/rcost/sacct.txt"
}

@test "bad records are counted and named file:line, never dropped in silence; --strict makes them fatal" {
  good='{"schema":"rkit.job.v1","id":"1","backend":"local","tenant":"alpha","user":"u","state":"COMPLETED","cpus":1,"gpus":0,"submit_unix_s":1000,"start_unix_s":1000,"end_unix_s":4600}'
  {
    echo "$good"
    echo '{"schema":"rkit.job.v1","id":"2","backend":"local","user":"u","state":"COMPLETED","cpus":1,"gpus":0,"submit_unix_s":1000,"start_unix_s":1000,"end_unix_s":4600}'
    echo '{"schema":"rkit.job.v1","id":"3","backend":"local","tenant":"alpha","user":"u","state":"COMPLETED","cpus":1,"gpus":0,"submit_unix_s":1000,"start_unix_s":2000,"end_unix_s":1500}'
    echo
    echo '{"schema":"rkit.widget.v1","id":"4"}'
    echo 'this is not JSON'
    printf '%s' '{"schema":"rkit.job.v1","id":"5","backend":"lo'  # cut mid-object, no newline
  } >bad.jsonl
  for threads in 1 3; do  # line numbers must not depend on how the input is cut for threads
    run --separate-stderr rcost --prices "$PRICES" report --threads "$threads" --since @0 --until @10000 bad.jsonl
    assert_success
    assert_output --partial "alpha"
    mapfile -t lines <<<"$stderr"
    [[ ${#lines[@]} -eq 6 ]]
    [[ ${lines[0]} == "rcost: warning: bad.jsonl:2: "*tenant* ]]
    [[ ${lines[1]} == "rcost: warning: bad.jsonl:3: "*negative* ]]
    [[ ${lines[2]} == "rcost: warning: bad.jsonl:5: "*rkit.widget.v1* ]]
    [[ ${lines[3]} == "rcost: warning: bad.jsonl:6: "* ]]
    [[ ${lines[4]} == "rcost: warning: bad.jsonl:7: "* ]]
    [[ ${lines[5]} == *"5 bad records skipped"* ]]
  done
  run --separate-stderr rcost --prices "$PRICES" report --since @0 --until @10000 --json bad.jsonl
  assert_success
  echo "$output" | jq -e -s 'last | .bad_records == 5 and .jobs_read == 1 and .lines == 6'
  echo "$output" | jq -e -s '.[0] | .tenant == "alpha" and .jobs == 1 and .cost == 3600' # 1 core-hour at 3600
  run --separate-stderr rcost --prices "$PRICES" report --since @0 --until @10000 - <bad.jsonl
  assert_success
  [[ $(grep -c . <<<"$stderr") -eq 6 && $stderr == *"<stdin>:2: "*"<stdin>:7: "* ]]
  run --separate-stderr rcost --prices "$PRICES" report --strict --since @0 --until @10000 bad.jsonl
  assert_failure 65
  assert_one_line_stderr
  [[ $stderr == "rcost: error: bad.jsonl:2: "*tenant* ]]
  [[ -z $output ]]
  # Over ten bad records: the first ten are named, all are counted.
  { echo "$good"; for i in $(seq 12); do echo '{"schema":"rkit.job.v1"}'; done; } >many.jsonl
  run --separate-stderr rcost --prices "$PRICES" report --since @0 --until @10000 --json many.jsonl
  assert_success
  mapfile -t lines <<<"$stderr"
  [[ ${#lines[@]} -eq 11 && ${lines[0]} == *"many.jsonl:2: "* && ${lines[9]} == *"many.jsonl:11: "* ]]
  [[ ${lines[10]} == *"12 bad records skipped"* ]]
  echo "$output" | jq -e -s 'last | .bad_records == 12'
  # sacct rows: the header is line 1.
  {
    head -2 "$FIXTURES/rcost/sacct.txt"
    echo '201|x|bob|chem|cpu|COMPLETED|2026-11-01T06:00:00'
    echo '202|x|bob|chem|cpu|COMPLETED|2026-11-01T06:00:00|2026-11-01T06:00:00|2026-11-01T06:00:05|2026-11-01T06:30:05|cpu=two,mem=1G|c01'
    echo '203|x|bob|chem|cpu|COMPLETED|2026-11-01T06:00:00|2026-11-01T06:00:00|2026-11-01T07:00:05|2026-11-01T06:30:05|cpu=1,mem=1G|c01'
  } >bad-sacct.txt
  run --separate-stderr rcost --prices "$PRICES" report --since @0 --json bad-sacct.txt
  assert_success
  mapfile -t lines <<<"$stderr"
  [[ ${#lines[@]} -eq 4 && ${lines[0]} == *"bad-sacct.txt:3: "* && ${lines[1]} == *"bad-sacct.txt:4: "*AllocTRES* ]]
  [[ ${lines[2]} == *"bad-sacct.txt:5: "*negative* && ${lines[3]} == *"3 bad records skipped"* ]]
  echo "$output" | jq -e -s 'last | .bad_records == 3 and .jobs_read == 1'
}

@test "a line holding two records (files joined where one lacks its last newline) is never read as one in silence" {
  for t in alpha beta; do
    printf '{"schema":"rkit.job.v1","id":"%s","backend":"local","tenant":"%s","user":"u","state":"COMPLETED","cpus":1,"gpus":0,"submit_unix_s":1000,"start_unix_s":1000,"end_unix_s":4600}' "$t" "$t" >"$t.jsonl"
  done
  echo >>beta.jsonl  # alpha.jsonl ends without a newline
  run --separate-stderr rcost --prices "$PRICES" report --since @0 --until @10000 --json - < <(cat alpha.jsonl beta.jsonl)
  assert_success
  echo "$stderr"
  echo "$output" | jq -c -s 'last | {jobs_read, bad_records}'
  # Both jobs read, or the line counted as bad and named.
  if ! echo "$output" | jq -e -s 'last | .jobs_read == 2 and .bad_records == 0' >/dev/null; then
    echo "$output" | jq -e -s 'last | .bad_records == 1'
    [[ $stderr == *"<stdin>:1: "* ]]
  fi
}

@test "no price sheet: the report shows hours and leaves money out, saying so once" {
  in=$FIXTURES/rcost/synthetic.jsonl
  run --separate-stderr rcost report --by tenant "$in"
  assert_success
  assert_one_line_stderr
  [[ $stderr == "rcost: warning: no price sheet: hours only, money left out"* ]]
  [[ ${lines[0]} == *CORE_H* && ${lines[0]} != *COST* && ${lines[0]} != *TOTAL* && ${lines[0]} != *SHARE* ]]
  run -0 rcost -q report --json "$in"
  # The hours are those of the priced report; every money figure is null.
  rcost -q --prices "$PRICES" report --json "$in" | jq -s -c '[.[] | select(.schema == "rkit.cost.v1") | .core_hours * 1e3 | round] | sort' >priced
  jq -s -c '[.[] | select(.schema == "rkit.cost.v1") | .core_hours * 1e3 | round] | sort' <<<"$output" >unpriced
  assert_equal "$(cat unpriced)" "$(cat priced)"
  jq -e -s 'all(.[]; .schema != "rkit.cost.v1" or (.cost == null and .total_cost == null and .currency == null))' <<<"$output"
  jq -e -s '.[-1] | .priced == false and .total.cost == null and .total.core_hours > 0' <<<"$output"
}

@test "exit codes: missing input 66, no price sheet for FOCUS 64, unknown backend 65, bad options 64, sacct without a column 65" {
  in=$FIXTURES/rcost/synthetic.jsonl
  run --separate-stderr rcost --prices "$PRICES" report no-such.jsonl
  assert_failure 66
  assert_one_line_stderr
  [[ $stderr == *no-such.jsonl* ]]
  # What needs money needs a price sheet.
  for args in "--format focus" "--format html" "--fail-over-budget"; do
    run --separate-stderr rcost report $args "$in"
    assert_failure 64
    assert_one_line_stderr
    [[ $stderr == *"no price sheet for "* ]]
  done
  printf 'currency = "USD"\n[backends.local]\ncpu_hour = 1\n[backends.cloud]\ncpu_hour = 1\n[backends.cloud-spot]\nmarket = "spot"\nspot_discount = 0.5\ncpu_hour = 1\n[backends.slurm]\ncpu_hour = 1\n' >no-onprem.toml
  run --separate-stderr rcost --prices no-onprem.toml report "$in"
  assert_failure 65
  assert_one_line_stderr
  [[ $stderr == *'"onprem"'* ]]
  run --separate-stderr rcost --prices "$PRICES" report --by nonsense "$in"
  assert_failure 64
  [[ $stderr == *nonsense* ]]
  run --separate-stderr rcost --prices "$PRICES" report --since "@$T1" --until "@$T0" "$in"
  assert_failure 64
  [[ $stderr == *--since* ]]
  for bad in 2026-13-01 soon @12x "2026-11-01T25:00"; do
    run --separate-stderr rcost --prices "$PRICES" report --since "$bad" "$in"
    assert_failure 64
    assert_one_line_stderr
    [[ $stderr == *"$bad"* ]]
  done
  run --separate-stderr rcost --prices "$PRICES" report --until tomorrowish "$in"
  assert_failure 64
  sed '1s/|AllocTRES//; 2,$s/|[^|]*|\([^|]*\)$/|\1/' "$FIXTURES/rcost/sacct.txt" >no-tres.txt
  [[ $(head -1 no-tres.txt) != *AllocTRES* ]]
  run --separate-stderr rcost --prices "$PRICES" report no-tres.txt
  assert_failure 65
  [[ $stderr == *no-tres.txt:1:*AllocTRES* ]]
  [[ -z $output ]]
}

@test "empty input: exit 0, an empty report" {
  : >empty.jsonl
  run --separate-stderr rcost --prices "$PRICES" report --json empty.jsonl
  assert_success
  [[ -z $stderr ]]
  echo "$output" | jq -e -s 'length == 1 and .[0].schema == "rkit.cost.summary.v1" and .[0].jobs_read == 0 and .[0].total.cost == 0 and .[0].bad_records == 0'
  run --separate-stderr rcost --prices "$PRICES" report --json - </dev/null
  assert_success
  echo "$output" | jq -e -s 'length == 1 and .[0].jobs_read == 0'
  run --separate-stderr rcost --prices "$PRICES" report empty.jsonl
  assert_success
  assert_output --partial "0 jobs ran"
}

@test "--fail-over-budget: exit 1 naming the tenant over its prorated budget, 0 within it" {
  in=$FIXTURES/rcost/synthetic.jsonl
  printf '[rcost.budgets]\nalpha = 0.01\nbeta = 1e9\n' >small.toml
  run --separate-stderr rcost --config small.toml --prices "$EXAMPLE_PRICES" report --since "@$T0" --until "@$T1" --json --fail-over-budget "$in"
  assert_failure 1
  assert_one_line_stderr
  [[ $stderr == *"tenant alpha is over budget"* ]]
  echo "$output" >report.jsonl
  python3 "$CHECK" totals --prices "$EXAMPLE_PRICES" --since "$T0" --until "$T1" "$in" >expected.jsonl
  alpha=$(jq -s 'map(select(.tenant == "alpha"))[0].cost' expected.jsonl)
  # The window is 10 h of November's 720: budgets are prorated to it; without samples there
  # is no idle cost to add to the tenant's own.
  jq -e -s --argjson alpha "$alpha" 'last.budgets | map({(.tenant): .}) | add
      | (.alpha.cost - $alpha | fabs) < 0.005 and .alpha.over
        and (.alpha.budget - 0.01 * 10 / 720 | fabs) < 1e-9
        and (.beta.budget - 1e9 * 10 / 720 | fabs) < 1e-3 and (.beta.over | not)' report.jsonl
  printf '[rcost.budgets]\nalpha = 1e9\n' >large.toml
  run --separate-stderr rcost --config large.toml --prices "$EXAMPLE_PRICES" report --since "@$T0" --until "@$T1" --fail-over-budget "$in"
  assert_success
  [[ -z $stderr ]]
}

@test "perf: an rbench GEMM and STREAM result and an rtrain summary, priced per TFLOP/s-hour, GB/s-hour and run" {
  # Sheet: local cores 0.5/h, memory 0.25/GiB-h, H200 4/h (fixtures/rcost/prices.toml has others).
  printf '%s\n' '[backends.local]' 'cpu_hour = 0.5' 'memory_gib_hour = 0.25' 'gpu_hour = { default = 2, H200 = 4 }' >p.toml
  host='"host":{"hostname":"n1","cores":8,"memory_bytes":17179869184,"gpus":[{"index":0,"name":"NVIDIA H200"}]}'
  {
    echo "{\"schema\":\"rkit.bench.v1\",\"suite\":\"gpu.gemm\",\"metric\":\"bf16\",\"unit\":\"TFLOP/s\",\"median\":800,\"params\":{\"gpu\":0},$host}"
    echo "{\"schema\":\"rkit.bench.v1\",\"suite\":\"cpu.stream\",\"metric\":\"triad\",\"unit\":\"GB/s\",\"median\":40,\"params\":{},$host}"
    echo '{"schema":"rkit.bench.suite.v1","suite":"cpu.stream"}'
    echo '{"schema":"rkit.train.event.v1","event":"step","step":1}'
    echo '{"schema":"rkit.train.event.v1","event":"summary","device":"cpu (2 BLAS threads)","world_size":2,"samples_per_s":10000,"wall_s":100,"time_to_target_s":36}'
  } >results.jsonl
  run -0 rcost perf --prices p.toml --json results.jsonl
  [ "${#lines[@]}" -eq 3 ]
  # GPU: 4/h for one H200 over 800 TFLOP/s. CPU: 8 cores × 0.5 + 16 GiB × 0.25 = 8/h over 40 GB/s.
  # Train: 4 cores × 0.5 = 2/h for 36 s to target = 0.02; per million samples 2 / 36e6 × 1e6.
  python3 - "${lines[@]}" <<'PY'
import json, sys
g, c, t = (json.loads(l) for l in sys.argv[1:])
assert g["per"] == "TFLOP/s-hour" and abs(g["cost_per"] - 4 / 800) < 1e-12 and g["priced_as"] == "1 GPU (NVIDIA H200)", g
assert c["per"] == "GB/s-hour" and abs(c["cost_per"] - 8 / 40) < 1e-12, c
assert t["per"] == "run to target" and abs(t["cost_per"] - 0.02) < 1e-12, t
assert abs(t["per_million_samples"] - 2 / 36e6 * 1e6) < 1e-12, t
PY
  run -0 rcost perf --prices p.toml results.jsonl
  [[ $output == *"TFLOP/s-hour"* && $output == *"run to target"* ]]
  run -65 rcost perf --prices p.toml <(echo '{"schema":"rkit.train.event.v1","event":"step"}')
  [[ $output == *"no rkit.bench.v1 results"* ]]
  run -65 rcost perf --prices p.toml --backend cloud results.jsonl
  [[ $output == *'no prices for backend "cloud"'* ]]
}

@test "prices: every rate with its derivation; the derived on-premises H200 is computed from the sheet" {
  run -0 rcost prices --prices "$EXAMPLE_PRICES" --json
  python3 - "$EXAMPLE_PRICES" "$output" <<'PY'
import json, sys, tomllib
sheet = tomllib.load(open(sys.argv[1], "rb"))
rows = [json.loads(l) for l in sys.argv[2].splitlines()]
b = sheet["backends"]["onprem"]
d = b["gpu_hour"]["H200"]
want = (d["purchase_price"] / (d["depreciation_years"] * 8760) + d.get("power_w", 0) / 1000 * b.get("pue", 1) * b["electricity_per_kwh"]) / d.get("units", 1)
got = [r for r in rows if r["backend"] == "onprem" and r["resource"] == "gpu_hour" and r["gpu"] == "H200"]
assert len(got) == 1 and abs(got[0]["effective"] - want) < 1e-12 and "8760" in got[0]["derivation"], got
spot = [r for r in rows if r["backend"] == "cloud-spot" and r["resource"] == "cpu_hour"][0]
assert spot["market"] == "spot" and abs(spot["effective"] - spot["list"] * (1 - sheet["backends"]["cloud-spot"]["spot_discount"])) < 1e-12, spot
PY
  run -0 rcost prices --prices "$EXAMPLE_PRICES"
  [[ $output == *"BACKEND"* && $output == *"onprem"* ]]
  run -64 rcost prices
  [[ $output == *"no price sheet"* ]]
}
