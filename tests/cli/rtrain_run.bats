#!/usr/bin/env bats
# rtrain run: the native trainer. It learns; 2 ranks follow the 1-rank curve; a worker
# killed with kill -9 under rtrain launch resumes from the last checkpoint and ends
# with bit-identical weights; bad configurations, data and checkpoints are refused.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
}

small=(--layers 32,64,64,1 --rows 20000 --threads 1)

@test "a run learns: the loss falls and the summary says what ran" {
  run -0 rtrain run "${small[@]}" --steps 200 --eval-every 100 --events ev.jsonl
  assert_line --regexp '^STEP +LOSS +EVAL +LR +SAMPLES/S +STEP_TIME +COMM_TIME +HIDDEN +GRAD_NORM$'
  assert_line --regexp '^200 +[0-9.e-]+ +- '
  assert_line --regexp '^200 +- +[0-9.e-]+ '
  assert_line --regexp '^200 steps on cpu \(1 BLAS thread\), 1 rank: [0-9]+ samples/s'
  jq -e -s 'map(select(.schema == "rkit.train.event.v1")) | length == (. | length)' ev.jsonl
  jq -e -s '(map(select(.event == "step"))) as $s | $s[-1].loss < 0.7 * $s[0].loss' ev.jsonl
  jq -e -s 'map(select(.event == "summary"))[0] | .steps == 200 and .world_size == 1 and .parameters == 6337
            and .samples_per_s > 0 and .eval_loss < 1 and .device == "cpu (1 BLAS thread)"' ev.jsonl
  jq -e -s 'map(select(.event == "step"))[0] | (.lr > 0 and .grad_norm > 0 and .step_time_s > 0 and .compute_s > 0)' ev.jsonl
}

@test "--json prints every record; -q only the summary; --target-loss reports the time to reach it" {
  run -0 rtrain run "${small[@]}" --steps 40 --eval-every 10 --target-loss 10 --json
  [[ $(jq -s 'map(.event) | unique | join(",")' <<<"$output") == '"eval,step,summary"' ]]
  jq -e -s 'map(select(.event == "summary"))[0].time_to_target_s > 0' <<<"$output"
  run -0 rtrain run "${small[@]}" --steps 10 --json -q
  [[ $(jq -s 'map(.event) | join(",")' <<<"$output") == '"summary"' ]]
}

@test "2 ranks with half the batch each follow the 1-rank loss curve within 1e-5 over 100 steps" {
  args=("${small[@]}" --steps 100 --log-every 1 --warmup-steps 10 -q)
  run -0 rtrain run "${args[@]}" --batch-size 128 --events one.jsonl
  # buckets of 10 KiB: each layer's gradients all-reduced on their own, during the backward pass
  run -0 rtrain launch --nproc-per-node 2 --master-port 0 -- rtrain run "${args[@]}" --batch-size 64 --bucket-mb 0.01 --events two.jsonl
  jq -e -s 'map(select(.event == "summary"))[0].world_size == 2' two.jsonl
  jq -s -c '[.[] | select(.event == "step") | .loss]' one.jsonl >one
  jq -s -c '[.[] | select(.event == "step") | .loss]' two.jsonl >two
  jq -e -n --slurpfile a one --slurpfile b two '
    ($a[0] | length) == 100 and ($b[0] | length) == 100
    and ([range(0; 100) | (($a[0][.] - $b[0][.]) / $a[0][.] | fabs)] | max) < 1e-5'
}

@test "kill -9 of a worker: the run resumes from its last checkpoint and ends with bit-identical weights" {
  kill_and_resume w 2 1 50 400 --layers 64,256,256,1 --rows 50000 --steps 400 --batch-size 128 --threads 1 -q \
    --ckpt-every 25
  run -0 rckpt verify w-ck/step-400.rkpt
  run -0 rckpt ls w-ck/step-400.rkpt
  assert_output --partial model.safetensors
  assert_output --partial optimizer.safetensors
  refute_alive "$victim"
}

@test "--no-pack keeps step-N folders; --resume-from one continues where it ended" {
  run -0 rtrain run "${small[@]}" --steps 20 --ckpt-every 10 --ckpt-dir ck --no-pack --output full.safetensors
  [[ -f ck/step-10/model.safetensors && -f ck/step-10/optimizer.safetensors && -d ck/step-20 ]]
  [[ ! -e ck/step-10.rkpt ]]
  run -0 rtrain run "${small[@]}" --steps 20 --resume-from ck/step-10 --output resumed.safetensors --json -q
  jq -e '.start_step == 10' <<<"$output"
  cmp full.safetensors resumed.safetensors
}

@test "a truncated newest archive is passed over: the run resumes from the one before" {
  run -0 rtrain run "${small[@]}" --steps 20 --ckpt-every 10 --ckpt-dir ck
  [[ -f ck/step-10.rkpt && -f ck/step-20.rkpt ]]
  truncate -s 1000 ck/step-20.rkpt
  run -0 rtrain run "${small[@]}" --steps 30 --ckpt-dir ck --json -q
  jq -e '.start_step == 10' <<<"$output"
}

@test "a checkpoint of another model is refused (65) and nothing is overwritten" {
  run -0 rtrain run "${small[@]}" --steps 10 --ckpt-every 10 --ckpt-dir ck
  before=$(sha256sum ck/step-10.rkpt)
  run --separate-stderr rtrain run --layers 32,16,1 --rows 20000 --steps 20 --ckpt-dir ck
  assert_equal "$status" 65
  assert_equal "$stderr" "rtrain: error: checkpoint ck/step-10.rkpt is of another model (layers=32,64,64,1 activation=gelu loss=mse), not layers=32,16,1 activation=gelu loss=mse"
  assert_equal "$(sha256sum ck/step-10.rkpt)" "$before"
}

@test "classification from a CSV file: cross-entropy, accuracy reported" {
  { echo "a,b,c,label"; for ((i = 0; i < 400; i++)); do echo "$((i % 7)),$((i % 5)),1,$((i % 7 > 3 ? 1 : 0))"; done; } >data.csv
  run -0 rtrain run --data data.csv --layers 3,16,2 --loss cross_entropy --steps 300 --batch-size 32 --lr 0.01 --warmup-steps 10 --json -q --eval-every 300 --events ev.jsonl
  jq -e -s 'map(select(.event == "eval"))[-1].accuracy > 0.9' ev.jsonl
}

@test "bad flags, configurations and data: one line and the documented exit code" {
  run --separate-stderr rtrain run --activation tanh
  assert_equal "$status" 64
  assert_equal "$stderr" "rtrain: error: unknown activation 'tanh' (expected gelu or relu)"
  run --separate-stderr rtrain run --lr 0
  assert_equal "$status" 64
  assert_equal "$stderr" "rtrain: error: lr must be > 0"
  run --separate-stderr rtrain run --layers 4,x,1
  assert_equal "$status" 64
  run --separate-stderr rtrain run --ckpt-every 5
  assert_equal "$status" 64
  [[ $stderr == *"checkpoints need a folder"* ]]
  run --separate-stderr rtrain run no-such.toml
  assert_equal "$status" 66
  printf '[train]\nstepz = 3\n' >bad.toml
  run --separate-stderr rtrain run bad.toml
  assert_equal "$status" 78
  assert_equal "$stderr" "rtrain: error: bad.toml:2:1: unknown key 'train.stepz'"
  printf '[train]\nlr = "fast"\n' >bad.toml
  run --separate-stderr rtrain run bad.toml
  assert_equal "$status" 78
  [[ $stderr == "rtrain: error: bad.toml:2:6: 'train.lr' must be a number" ]]
  run --separate-stderr rtrain run --data missing.csv
  assert_equal "$status" 66
  printf '1,2\n3,4\n' >two.csv
  run --separate-stderr rtrain run --data two.csv --layers 5,4,1
  assert_equal "$status" 64
  assert_equal "$stderr" "rtrain: error: two.csv has 1 features but the model's first layer takes 5"
  run --separate-stderr rtrain run --data two.csv --layers 1,4,1 --batch-size 8
  assert_equal "$status" 64
  run --separate-stderr rtrain run --device cuda --steps 1
  assert_equal "$status" 69
  [[ $stderr == "rtrain: error: --device cuda: "* ]]
}

@test "a configuration file sets the run; flags override it" {
  cat >run.toml <<'TOML'
[model]
layers = [16, 32, 1]
activation = "relu"
[data]
rows = 5000
[train]
steps = 30
batch_size = 64
lr = 0.002
seed = 7
threads = 1
TOML
  run -0 rtrain run run.toml --steps 12 --json -q
  jq -e '.steps == 12 and .parameters == (16*32+32+32+1)' <<<"$output"
}

@test "records stay whole while checkpoints complete in the background; --events - keeps stdout JSON" {
  run -0 rtrain run --layers 8,16,1 --rows 2000 --batch-size 16 --steps 300 --log-every 1 --ckpt-every 1 --no-pack \
    --ckpt-dir ck --events ev.jsonl --json
  jq -e -s 'map(select(.event == "checkpoint")) | length == 300' ev.jsonl
  jq -e -s 'map(select(.event == "checkpoint")) | length == 300' <<<"$output"
  run -0 rtrain run --layers 8,16,1 --rows 2000 --batch-size 16 --steps 20 --events -
  [[ $(jq -r -s 'map(.event) | join(",")' <<<"$output") == step,step,eval,summary ]]
}

@test "a step folder half removed by a kill is passed over for the archive of the same step" {
  run -0 rtrain run "${small[@]}" --steps 20 --ckpt-every 20 --ckpt-dir ck
  mkdir ck/step-20 ck/.step-20.tmp-999999999
  : >ck/step-20/optimizer.safetensors
  run -0 rtrain run "${small[@]}" --steps 30 --ckpt-dir ck --ckpt-every 10 --json -q
  jq -e '.start_step == 20' <<<"$output"
  [[ ! -e ck/.step-20.tmp-999999999 ]]  # what a dead process left is removed when checkpointing starts
}

@test "--epochs counts passes over the training rows" {
  run -0 rtrain run --layers 8,16,1 --rows 2000 --batch-size 100 --epochs 2 --json -q
  jq -e '.steps == 38' <<<"$output"  # 1900 training rows (5% held out): 19 steps an epoch
}

@test "refused before training: a checkpoint past the last step, an --output folder that is missing, a model too big" {
  run -0 rtrain run "${small[@]}" --steps 20 --ckpt-every 20 --ckpt-dir ck
  run --separate-stderr rtrain run "${small[@]}" --steps 15 --ckpt-dir ck
  assert_equal "$status" 64
  assert_equal "$stderr" "rtrain: error: checkpoint ck/step-20.rkpt is of step 20, past this run's last step 15"
  run --separate-stderr rtrain run "${small[@]}" --steps 15 --output no/such/w.safetensors
  assert_equal "$status" 66
  assert_equal "$stderr" "rtrain: error: --output no/such/w.safetensors: no folder no/such"
  run --separate-stderr rtrain run --layers 1048576,1048576,1 --steps 1
  assert_equal "$status" 64
  [[ $stderr == "rtrain: error: the model and batch need "*" GiB, more than this machine's "* ]]
}
