#!/usr/bin/env bats
# rtrain plan: every strategy's predicted step on a machine, ranked; its bytes and memory
# are the counters rtrain run reports for the same model; rcost perf prices a plan; bad
# machines and ranks are refused in one line.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  machine=$RKIT_ROOT/examples/h200x8.toml
}

@test "plan on 2 ranks of a described machine: every strategy, fastest first, in a table and as records" {
  run -0 rtrain plan --ranks 2 --machine "$machine"
  assert_line --index 0 --regexp '^RANK +STRATEGY +TPxPPxDP +MICRO +STEP_MS +COMPUTE_MS +EXPOSED_MS +BUBBLE_MS +SAMPLES/S +MEMORY +SENT +FITS$'
  assert_equal "${#lines[@]}" 7
  run -0 rtrain plan --ranks 2 --machine "$machine" --json
  jq -e -s 'length == 6 and all(.schema == "rkit.train.plan.v1" and .world_size == 2 and .fits and .step_time_s > 0
      and ((.compute_s + .exposed_s + .bubble_s - .step_time_s) | fabs) < 1e-12)
    and ([.[].strategy] | sort) == ["dp", "pp", "tp", "zero1", "zero2", "zero3"]
    and ([.[].step_time_s] == ([.[].step_time_s] | sort)) and ([.[].rank] == [1, 2, 3, 4, 5, 6])
    and (map(select(.strategy == "pp"))[0] | .micro_batches == 8 and .schedule == "1f1b" and .bubble_s > 0)' <<<"$output"
  # 8 ranks of a 5-layer model: the 3-D grids too (2x2x2, 2x4x1, 4x2x1), each a divisor split.
  run -0 rtrain plan --ranks 8 --machine "$machine" --layers 256,1024,1024,1024,1024,1 --json
  jq -e -s 'map(select(.strategy == "3d")) | length == 3 and
    all(.tensor_parallel * .pipeline_parallel * .data_parallel == 8 and .tensor_parallel > 1 and .pipeline_parallel > 1)' <<<"$output"
}

@test "a plan's bytes and memory are what rtrain run counts on rank 0, for every strategy" {
  model=(--layers 32,64,64,2 --batch-size 16)
  for s in dp zero1 zero2 zero3 tp pp; do
    run -0 rtrain plan --ranks 2 --machine "$machine" --strategy "$s" "${model[@]}" --json
    plan=$output
    run -0 rtrain launch --nproc-per-node 2 --master-port 0 -- \
      rtrain run "${model[@]}" --rows 4000 --steps 2 --threads 1 --strategy "$s" --no-track -q --events "$s.jsonl"
    summary=$(jq -c 'select(.event == "summary")' "$s.jsonl")
    jq -e -n --argjson p "$plan" --argjson r "$summary" --arg s "$s" '
      $p.strategy == $s and $p.bytes_sent == $r.bytes_sent and $p.memory_bytes == $r.memory_bytes' ||
      { echo "$s: plan $plan"; echo "run $summary"; false; }
  done
  # And a 2x2 grid on 4 ranks.
  run -0 rtrain plan --ranks 4 --machine "$machine" --strategy 3d "${model[@]}" --json
  plan=$output
  run -0 rtrain launch --nproc-per-node 4 --master-port 0 -- rtrain run "${model[@]}" --rows 4000 --steps 2 \
    --threads 1 --strategy 3d --tensor-parallel 2 --pipeline-parallel 2 --no-track -q --events 3d.jsonl
  summary=$(jq -c 'select(.event == "summary")' 3d.jsonl)
  jq -e -n --argjson p "$plan" --argjson r "$summary" '
    $p.tensor_parallel == 2 and $p.pipeline_parallel == 2
    and $p.bytes_sent == $r.bytes_sent and $p.memory_bytes == $r.memory_bytes' ||
    { echo "3d: plan $plan"; echo "run $summary"; false; }
}

@test "this machine from rbench records; rcost perf prices the plans' steps" {
  run -0 rbench -q run cpu.gemm cpu.stream comm.gloo --quick --json
  echo "$output" >machine.jsonl
  run -0 rtrain plan --ranks 2 --bench machine.jsonl --threads 1 --json
  jq -e -s 'length == 6 and all(.device == "cpu (1 BLAS thread)" and .step_time_s > 0)' <<<"$output"
  echo "$output" >plans.jsonl
  run -0 rcost perf --prices "$RKIT_ROOT/examples/prices.toml" --json plans.jsonl
  jq -e -s 'length == 6 and all(.source == "rtrain plan" and .per == "1000 steps" and .cost_per > 0
    and .per_million_samples > 0)' <<<"$output"
}

@test "plan refuses a missing machine, bad records, a bad machine file and bad ranks in one line" {
  run --separate-stderr rtrain plan --ranks 2
  assert_equal "$status" 64
  assert_one_line_stderr
  [[ $stderr == "rtrain: error: give the machine: --bench FILE (this one, from rbench) or --machine FILE (a described one)"* ]]
  run --separate-stderr rtrain plan --ranks 0 --machine "$machine"
  assert_equal "$status" 64
  assert_one_line_stderr
  echo '{"schema":"rkit.bench.v1","suite":"cpu.stream","metric":"triad","median":10,"params":{"threads":2}}' >partial.jsonl
  run --separate-stderr rtrain plan --ranks 2 --bench partial.jsonl
  assert_equal "$status" 65
  assert_one_line_stderr
  [[ $stderr == "rtrain: error: the rbench records lack cpu.gemm sgemm, comm.gloo"* ]]
  printf '[machine]\ngemm_tflops = 1\n' >bad.toml
  run --separate-stderr rtrain plan --ranks 2 --machine bad.toml
  assert_equal "$status" 78
  assert_equal "$stderr" "rtrain: error: bad.toml: no machine.memory_gbps"
  run --separate-stderr rtrain plan --ranks 2 --machine nowhere.toml
  assert_equal "$status" 66
  assert_one_line_stderr
  run --separate-stderr rtrain plan --ranks 2 --machine "$machine" --strategy fsdp
  assert_equal "$status" 64
  assert_one_line_stderr
}
