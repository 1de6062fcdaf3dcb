#!/usr/bin/env bats
# rtrain run --strategy: ZeRO stages 1 to 3, tensor and pipeline parallel on 2 ranks
# under rtrain launch follow data parallel's loss curve; their step records count the
# textbook bytes and the memory held; a rank killed with kill -9 resumes to the same bits;
# a checkpoint saved sharded on 2 ranks resumes whole on 1.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
}

# Every layer block even (32*64+64, 64*64+64, 64*2+2 floats): no pad on 2 ranks, Ψ = 6402.
small=(--layers 32,64,64,2 --rows 20000 --threads 1)
launch2=(rtrain launch --nproc-per-node 2 --master-port 0 --)

losses() { jq -s -c '[.[] | select(.event == "step") | .loss]' "$1"; }

@test "every strategy on 2 ranks follows data parallel's loss curve within 1e-5 over 100 steps" {
  args=("${small[@]}" --steps 100 --log-every 1 --warmup-steps 10 --batch-size 64 -q)
  run -0 "${launch2[@]}" rtrain run "${args[@]}" --events dp.jsonl
  losses dp.jsonl >dp
  for z in zero1 zero2 zero3 tp pp; do
    run -0 "${launch2[@]}" rtrain run "${args[@]}" --strategy "$z" --events "$z.jsonl"
    jq -e -s --arg z "$z" 'map(select(.event == "summary"))[0] | .strategy == $z and .world_size == 2' "$z.jsonl"
    losses "$z.jsonl" >"$z"
    jq -e -n --slurpfile a dp --slurpfile b "$z" '
      ($a[0] | length) == 100 and ($b[0] | length) == 100
      and ([range(0; 100) | (($a[0][.] - $b[0][.]) / $a[0][.] | fabs)] | max) < 1e-5'
  done
}

@test "step records count each rank's bytes by collective (the textbook volumes) and the memory it holds" {
  psi=6402
  for s in dp zero1 zero2 zero3; do
    run -0 "${launch2[@]}" rtrain run "${small[@]}" --steps 4 --log-every 1 --batch-size 32 --strategy "$s" --json -q --events "$s.jsonl"
  done
  # All-reduce of Ψ floats on 2 ranks: each sends 2(N-1)/N Ψ = Ψ floats.
  jq -e -s --argjson p $psi 'map(select(.event == "step")) | length == 4 and all(.ranks | length == 2 and
    all(.bytes_sent.allreduce == 4 * $p and .bytes_sent.reduce_scatter == 0 and .bytes_sent.allgather == 0
        and .memory_bytes.params == 4 * $p and .memory_bytes.grads == 4 * $p and .memory_bytes.optimizer == 8 * $p))' dp.jsonl
  # ZeRO-1 and 2: a reduce-scatter and an all-gather of (N-1)/N Ψ (the all-reduce's volume)
  # and the gradient norm's 8 bytes; ZeRO-3 gathers twice: 1.5 times the all-reduce.
  for z in zero1 zero2 zero3; do
    jq -e -s --argjson p $psi --arg z "$z" '
      def held: if $z == "zero1" then [4 * $p, 4 * $p, 4 * $p] elif $z == "zero2" then [4 * $p, 2 * $p, 4 * $p]
                else [2 * $p, 2 * $p, 4 * $p] end;
      map(select(.event == "step")) | length == 4 and all(.ranks[] |
        .bytes_sent.allreduce == 8 and .bytes_sent.reduce_scatter == 2 * $p
        and .bytes_sent.allgather == (if $z == "zero3" then 4 else 2 end) * $p
        and [.memory_bytes.params, .memory_bytes.grads, .memory_bytes.optimizer] == held)' "$z.jsonl"
  done
  # Tensor parallel (pair 0-1 split, layer 2 whole): the pair's output all-reduced forward,
  # 32 rows x 64 floats (its input, layer 0's, needs no gradient); the gradient norm's 8
  # bytes. Each rank holds layer 0's half rows, layer 1's half columns and bias, layer 2.
  run -0 "${launch2[@]}" rtrain run "${small[@]}" --steps 4 --log-every 1 --batch-size 16 --strategy tp -q --events tp.jsonl
  jq -e -s 'map(select(.event == "step")) | length == 4 and all(.ranks[] |
    .bytes_sent.allreduce == 4 * 32 * 64 + 8 and .bytes_sent.send_recv == 0
    and .memory_bytes.params == 4 * (32 * 32 + 32 + 64 * 32 + 64 + 64 * 2 + 2))' tp.jsonl
  # Pipeline parallel (stages: layer 0 | layers 1 and 2): stage 0 sends 32 rows x 64
  # activations, stage 1 their gradients, whatever the micro-batches.
  run -0 "${launch2[@]}" rtrain run "${small[@]}" --steps 4 --log-every 1 --batch-size 16 --strategy pp     --micro-batches 4 --schedule gpipe -q --events pp.jsonl
  jq -e -s 'map(select(.event == "step")) | length == 4 and all(.ranks[] | .bytes_sent.send_recv == 4 * 32 * 64
    and .bytes_sent.allreduce == 8 and .bubble_s > 0 and .bubble_fraction > 0 and .bubble_fraction < 1)
    and all(.ranks[0].memory_bytes.params == 4 * (32 * 64 + 64) and .ranks[1].memory_bytes.params == 4 * (64 * 64 + 64 + 64 * 2 + 2))' pp.jsonl
  # The summary: the mean step's counters, rank 0's at the top, every rank's beside them.
  jq -e -s 'map(select(.event == "summary"))[0] | .strategy == "zero3" and (.ranks | length) == 2
    and .bytes_sent == .ranks[0].bytes_sent and .comm_s > 0 and .exposed_s >= 0 and .hidden_s >= 0
    and .bubble_s == 0 and .memory_bytes.buffers > 0' zero3.jsonl
}

@test "kill -9 of a rank under each strategy: the run resumes and ends with bit-identical weights" {
  args=(--layers 64,128,128,2 --rows 50000 --steps 200 --batch-size 64 --threads 1 -q --ckpt-every 25)
  for z in zero1 zero2 zero3 tp pp; do
    kill_and_resume "$z" 2 1 50 200 "${args[@]}" --strategy "$z"
  done
}

@test "kill -9 of a rank of a 2x2 grid (tensor x pipeline) on 4 ranks: the run resumes to the same bits" {
  kill_and_resume grid 4 3 40 120 --layers 64,128,128,2 --rows 50000 --steps 120 --batch-size 32 --threads 1 -q \
    --ckpt-every 20 --strategy 3d --tensor-parallel 2 --pipeline-parallel 2
}

@test "a checkpoint saved with ZeRO-1 on 2 ranks resumes on 1 rank under data parallel" {
  args=("${small[@]}" --steps 100 --log-every 1 --warmup-steps 10 -q)
  run -0 "${launch2[@]}" rtrain run "${args[@]}" --strategy zero1 --batch-size 64 --ckpt-every 50 --ckpt-dir ck \
    --events two.jsonl
  [[ -f ck/step-50.rkpt ]]
  run -0 rtrain run "${args[@]}" --batch-size 128 --resume-from ck/step-50.rkpt --events one.jsonl
  jq -e -s 'map(select(.event == "summary"))[0] | .strategy == "dp" and .world_size == 1 and .start_step == 50' one.jsonl
  jq -s -c '[.[] | select(.event == "step" and .step > 50) | .loss]' two.jsonl >two
  losses one.jsonl >one
  jq -e -n --slurpfile a two --slurpfile b one '
    ($a[0] | length) == 50 and ($b[0] | length) == 50
    and ([range(0; 50) | (($a[0][.] - $b[0][.]) / $a[0][.] | fabs)] | max) < 1e-5'
}

@test "an unknown strategy is refused in one line (64), from a flag or the configuration" {
  run --separate-stderr rtrain run "${small[@]}" --strategy zero9
  assert_equal "$status" 64
  assert_equal "$stderr" "rtrain: error: unknown strategy 'zero9' (expected 3d, dp, pp, tp, zero1, zero2, zero3)"
  printf '[train]\nstrategy = "fsdp"\n' >run.toml
  run --separate-stderr rtrain run run.toml
  assert_equal "$status" 78
  assert_one_line_stderr
  [[ $stderr == *"run.toml: unknown strategy 'fsdp' (expected 3d, dp, pp, tp, zero1, zero2, zero3)" ]]
}

@test "a grid that does not fit the ranks or the model is refused in one line (64) on every rank" {
  run --separate-stderr "${launch2[@]}" rtrain run "${small[@]}" --strategy 3d --tensor-parallel 2 --pipeline-parallel 2
  assert_equal "$status" 64
  [[ $stderr == *"--strategy 3d: 2 tensor-parallel x 2 pipeline ranks do not divide 2 ranks"* ]]
  run --separate-stderr "${launch2[@]}" rtrain run --layers 32,63,2 --rows 2000 --strategy tp
  assert_equal "$status" 64
  [[ $stderr == *"2 tensor-parallel ranks do not divide layer 0's 63 outputs"* ]]
  run --separate-stderr "${launch2[@]}" rtrain run --layers 32,2 --rows 2000 --strategy pp
  assert_equal "$status" 64
  [[ $stderr == *"2 pipeline stages need 2 layers or more; the model has 1"* ]]
  run --separate-stderr "${launch2[@]}" rtrain run "${small[@]}" --batch-size 2 --strategy pp --micro-batches 5
  assert_equal "$status" 64
  [[ $stderr == *"5 micro-batches of a replica's 4 rows: some would be empty"* ]]
  run --separate-stderr rtrain run "${small[@]}" --schedule zigzag
  assert_equal "$status" 64
  assert_one_line_stderr
}

@test "--trace of a pipeline: forward and backward per micro-batch, the bubbles, nested on both ranks" {
  run -0 "${launch2[@]}" rtrain run "${small[@]}" --steps 5 --batch-size 32 --strategy pp --micro-batches 4 --trace tr -q
  run -0 rtrain trace merge tr -o merged.json.gz
  run -0 python3 "$RKIT_ROOT/tests/cli/check_trace.py" merged.json.gz --ranks 2
  # Stage 0 runs layer 0's backward once a micro-batch (its forward also for evaluation);
  # stage 1 waits for its first activations.
  zcat merged.json.gz | jq -e '[.traceEvents[] | select(.pid == 0 and .name == "backward 0")] | length == 5 * 4'
  zcat merged.json.gz | jq -e '[.traceEvents[] | select(.pid == 1 and .name == "backward 2")] | length == 5 * 4'
  zcat merged.json.gz | jq -e '[.traceEvents[] | select(.pid == 1 and .cat == "bubble")] | length >= 5'
}

@test "--trace: each rank's timeline; trace merge makes one, a track per rank, nested and aligned" {
  run -0 "${launch2[@]}" rtrain run "${small[@]}" --steps 20 --batch-size 32 --strategy zero3 --ckpt-every 10 \
    --ckpt-dir ck --trace tr -q --events ev.jsonl
  jq -e -s 'map(select(.event == "summary"))[0].trace == "tr/rank-0.trace.json.gz"' ev.jsonl
  [[ -f tr/rank-0.trace.json.gz && -f tr/rank-1.trace.json.gz ]]
  run -0 python3 "$RKIT_ROOT/tests/cli/check_trace.py" tr/rank-0.trace.json.gz --layers 3 --checkpoint
  run -0 rtrain trace merge tr -o merged.json.gz
  assert_output "merged.json.gz: 2 ranks, $(($(zcat tr/rank-0.trace.json.gz | jq '.traceEvents | length') + $(zcat tr/rank-1.trace.json.gz | jq '.traceEvents | length'))) events"
  run -0 python3 "$RKIT_ROOT/tests/cli/check_trace.py" merged.json.gz --ranks 2 --layers 3 --checkpoint
  zcat merged.json.gz | jq -e '[.traceEvents[] | select(.ph == "M" and .name == "process_name") | .args.name] == ["rank 0", "rank 1"]'
  # Every collective slice carries its bytes; a ZeRO-3 step gathers each layer twice.
  zcat merged.json.gz | jq -e '[.traceEvents[] | select(.pid == 0 and .cat == "comm" and .name == "allgather"
    and .args.bytes > 0)] | length >= 20 * 6'
  # The checker is no rubber stamp: two slices of one thread that overlap without nesting fail it.
  printf '{"traceEvents":[{"ph":"X","name":"a","pid":0,"tid":0,"ts":0,"dur":10},{"ph":"X","name":"b","pid":0,"tid":0,"ts":5,"dur":10}]}' |
    gzip >bad.json.gz
  run -1 python3 "$RKIT_ROOT/tests/cli/check_trace.py" bad.json.gz
  assert_output --partial "'b' at 5 overlaps 'a'"
}

@test "trace merge: a folder without traces, or a file that is no trace, is refused in one line" {
  mkdir empty
  run --separate-stderr rtrain trace merge empty
  assert_equal "$status" 66
  assert_equal "$stderr" "rtrain: error: empty: no rank-R.trace.json.gz in it"
  mkdir junk
  echo '{"a":1}' | gzip >junk/rank-0.trace.json.gz
  run --separate-stderr rtrain trace merge junk
  assert_equal "$status" 65
  assert_equal "$stderr" "rtrain: error: junk/rank-0.trace.json.gz: not a trace (no traceEvents array)"
  echo '{"traceEvents":[]}' | gzip | head -c 20 >junk/rank-0.trace.json.gz  # cut short
  run --separate-stderr rtrain trace merge junk
  assert_equal "$status" 65
  assert_one_line_stderr
}
