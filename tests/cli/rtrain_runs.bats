#!/usr/bin/env bats
# Experiment tracking: every rtrain run is a record in the run store (configuration,
# system, code, inputs by digest, metrics, outputs); rtrain runs ls/show/metrics/compare/
# reproduce; rtrain launch --track with the Python helper; lineage in the checkpoints
# (rckpt log) and the model registry (rckpt model, rckpt verify --model). And what a
# hostile or careless user tries: bad ids, injected filters, a damaged store.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
}

teardown() {
  stop_rsub  # the test that submits rsub jobs
}

small=(--layers 8,16,1 --rows 4000 --batch-size 64 --threads 1 --log-every 10)

# The id of the newest run in the store.
last_run() { rtrain runs ls --last 1 --json | jq -r .id; }

# A CSV of regression data: 8 features and a target, `$2` rows, seed `$3`.
make_csv() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'EOF'
import random, sys
path, rows, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
with open(path, "w") as f:
    f.write(",".join(f"x{i}" for i in range(8)) + ",y\n")
    for _ in range(rows):
        x = [rng.gauss(0, 1) for _ in range(8)]
        f.write(",".join(f"{v:.6f}" for v in x) + f",{sum(x[:3]) + 0.1 * rng.gauss(0, 1):.6f}\n")
EOF
}

@test "a run's record: configuration, system, inputs by digest, metrics as series, the final weights' digest" {
  make_csv train.csv 2000 1
  run -0 rtrain run "${small[@]}" --data train.csv --steps 40 --experiment alpha --run-name first --tag desk=a \
    --events ev.jsonl
  assert_line --regexp '; run [0-9a-f]{12}$'
  id=$(last_run)
  rtrain runs ls --json >ls.json
  jq -e --arg id "$id" 'select(.id == $id) | .schema == "rkit.run.v1" and .experiment == "alpha"
    and .name == "first" and .status == "FINISHED" and .tags.desk == "a" and .duration_s > 0
    and .params["train.steps"] == 40 and .params["model.layers"] == "8,16,1" and .params["train.threads"] == 1
    and (.params["data.source"] | startswith("/")) and .system.cpus > 0 and (.system.rkit_revision | length) > 0
    and (.summary.weights_xxh3 | length) == 16 and .summary.tracking_s >= 0' ls.json
  # The input's digest is XXH3-64 of the file's bytes, as python3-xxhash computes it.
  want=$(/usr/bin/python3 -c 'import sys, xxhash; print(xxhash.xxh3_64_hexdigest(open(sys.argv[1], "rb").read()))' train.csv)
  jq -e --arg x "$want" '.inputs[0] | .name == "data" and .xxh3 == $x and .bytes > 0' ls.json
  # Every step record's loss is in the series, at its step; the last is the final one.
  jq -s -c '[.[] | select(.event == "step") | [.step, .loss]]' ev.jsonl >want.json
  rtrain runs metrics "$id" --key loss --json | jq -s -c '[.[] | [.step, .metrics.loss]]' >got.json
  assert_equal "$(cat got.json)" "$(cat want.json)"
  jq -e --slurpfile w want.json '.metrics.loss.last == $w[0][-1][1] and .metrics.loss.step == 40' ls.json
  run -0 rtrain runs show "${id:0:6}"
  assert_line --regexp "^run $id  alpha / first  FINISHED$"
  assert_line --regexp "^  input     data /.*/train.csv \(.*, xxh3 $want\)$"
  assert_line --regexp '^    train.lr +0.001$'
}

@test "a run's cost: the cores, memory and time it held, priced by the configured sheet, unpriced without one" {
  run -0 rtrain run "${small[@]}" --steps 20 -q
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e '.summary.cost | .amount == null and .price_sheet == null
    and .backend == "local" and .cpus > 0 and .gpus == 0 and .memory_bytes > 1048576 and .hours > 0'
  run -0 rtrain runs show "$id"
  assert_line --regexp '^  cost      unpriced \(no price sheet\): [0-9]+ CPUs, 0 GPUs, .* for .* on local$'
  printf 'currency = "EUR"\n[backends.local]\ncpu_hour = 3600\nmemory_gib_hour = 0\n' >prices.toml
  printf '[rcost]\nprices = "prices.toml"\n' >rkit.toml
  RKIT_CONFIG=$PWD/rkit.toml rtrain run "${small[@]}" --steps 20 -q
  id=$(last_run)
  # 3600 a core-hour is 1 a core-second: the amount is the cores times the seconds held.
  rtrain runs show "$id" --json | jq -e --arg sheet "$PWD/prices.toml" '.summary.cost as $c
    | $c.currency == "EUR" and $c.price_sheet == $sheet and $c.amount > 0
    and ($c.amount - $c.cpus * $c.hours * 3600 | if . < 0 then -. else . end) < 1e-6'
  run -0 rtrain runs show "$id"
  assert_line --regexp '^  cost      [0-9.e+-]+ EUR: [0-9]+ CPUs, 0 GPUs, .* on local$'
  # A sheet without this backend's prices: the run and its record go on, the cost says why.
  printf 'currency = "EUR"\n[backends.slurm]\ncpu_hour = 1\n' >prices.toml
  RKIT_CONFIG=$PWD/rkit.toml run -0 rtrain run "${small[@]}" --steps 20 -q
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e '.status == "FINISHED" and .summary.cost.amount == null
    and (.summary.cost.error | test("no prices for backend \"local\""))'
}

@test "runs ls filters on experiment, status, tags, parameters and final metrics; --last; columns" {
  for lr in 0.001 0.003 0.01; do
    rtrain run "${small[@]}" --steps 20 --lr $lr --experiment sweep --tag lr=$lr -q
  done
  rtrain run "${small[@]}" --steps 20 --experiment other -q
  run -0 rtrain runs ls --experiment sweep --json
  assert_equal "${#lines[@]}" 3
  run -0 rtrain runs ls --param 'train.lr>0.002' --json
  assert_equal "$(jq -r '.params["train.lr"]' <<<"$output" | sort | tr '\n' ' ')" "0.003 0.01 "
  run -0 rtrain runs ls --tag lr=0.01 --json
  assert_equal "${#lines[@]}" 1
  run -0 rtrain runs ls --metric 'loss<1000000' --status FINISHED --json
  assert_equal "${#lines[@]}" 4
  run -0 rtrain runs ls --last 2 --json
  assert_equal "$(jq -r .experiment <<<"$output" | tr '\n' ' ')" "sweep other "
  run -0 rtrain runs ls --experiment sweep --show-param train.lr
  assert_line --regexp '^ID +EXPERIMENT +NAME +STATUS +STARTED +DURATION +TRAIN.LR +LOSS +EVAL_LOSS$'
  assert_line --regexp '^[0-9a-f]{12} +sweep +- +FINISHED +.* 0.01 +[0-9.]+ +[0-9.]+$'
  # An injected condition is a value, compared as one: it matches nothing.
  run -0 rtrain runs ls --param "model.activation=gelu' OR '1'='1" --json
  assert_output ''
}

@test "compare: the parameters that differ, last and best metrics, and a page of curves that Chromium renders" {
  rtrain run "${small[@]}" --steps 30 --lr 0.001 -q
  a=$(last_run)
  rtrain run "${small[@]}" --steps 30 --lr 0.01 -q
  b=$(last_run)
  run -0 rtrain runs compare "$a" "$b" --json --html cmp.html
  jq -e --arg a "$a" --arg b "$b" '.runs == [$a, $b] and .differing == ["train.lr"]
    and .params["train.lr"] == [0.001, 0.01] and (.metrics.loss.last | length) == 2
    and .metrics.loss.min[0] <= .metrics.loss.last[0]' <<<"$output"
  run -0 rtrain runs compare "$a" "$b"
  assert_line --regexp '^train.lr +param +0.001 +0.01$'
  assert_line --regexp '^loss +min +[0-9.e-]+ +[0-9.e-]+$'
  # The page: self-contained (no script, nothing fetched), one chart per metric with a curve per run.
  run -0 grep -c 'class="chart" data-kind="curves"' cmp.html
  ((output >= 5))
  run -1 grep -E '<script|https?://[^ "]*\.(js|css)' cmp.html
  chromium_run --dump-dom "file://$PWD/cmp.html" >dom.html
  grep -q "2 runs compared" dom.html
  grep -q "data-kind=\"curves\"" dom.html
  chromium_run --screenshot="$PWD/cmp.png" --window-size=1000,1400 "file://$PWD/cmp.html"
  [[ $(stat -c %s cmp.png) -gt 10000 ]]
}

@test "reproduce: the same configuration, data and revision give bitwise the same weights" {
  make_csv train.csv 2000 2
  rtrain run "${small[@]}" --data train.csv --steps 60 --seed 7 -q
  id=$(last_run)
  run -0 rtrain runs reproduce "$id" -q --json
  jq -e --arg id "$id" '.schema == "rkit.run.reproduce.v1" and .run_id == $id and .identical == true
    and .weights_xxh3 == .recorded_weights_xxh3' <<<"$output"
  repro=$(jq -r .reproduction <<<"$output")
  rtrain runs show "$repro" --json | jq -e --arg id "$id" '.tags.reproduces == $id and .parent.kind == "reproduce"'
  # One changed byte of the data: refused, naming the file, before any training.
  sed -i '2s/^./9/' train.csv
  run -65 --separate-stderr rtrain runs reproduce "$id"
  assert_one_line_stderr
  [[ $stderr == "rtrain: error: data $PWD/train.csv changed since run $id: xxh3 "* ]]
}

@test "reproduce refuses a changed revision of the code the run started from" {
  git init -q proj && cd proj
  git -c user.email=t@t -c user.name=t commit -q --allow-empty -m one
  rtrain run "${small[@]}" --steps 20 -q
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e --arg c "$(git rev-parse HEAD)" '.code.commit == $c and .code.dirty == false'
  git -c user.email=t@t -c user.name=t commit -q --allow-empty -m two
  run -65 --separate-stderr rtrain runs reproduce "$id"
  assert_one_line_stderr
  [[ $stderr == "rtrain: error: revision changed: run $id ran at commit "*" which is at $(git rev-parse HEAD) now" ]]
  # Uncommitted changes are part of the revision: their digest is recorded.
  echo change >file && git add file
  rtrain run "${small[@]}" --steps 20 -q
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e '.code.dirty == true and (.code.diff_xxh3 | length) == 16'
  echo more >>file
  run -65 --separate-stderr rtrain runs reproduce "$id"
  [[ $stderr == *"has other uncommitted changes than run $id had"* ]]
}

@test "a fine-tune's checkpoint leads back through rckpt log to the base run's data digests" {
  make_csv base.csv 2000 3
  make_csv ft.csv 500 4
  rtrain run "${small[@]}" --data base.csv --steps 40 --ckpt-every 20 --ckpt-dir base -q
  base_id=$(last_run)
  rtrain run "${small[@]}" --data ft.csv --steps 20 --ckpt-every 20 --ckpt-dir ft --init-from base/step-40.rkpt -q
  ft_id=$(last_run)
  rtrain runs show "$ft_id" --json | jq -e --arg b "$base_id" '.parent.kind == "finetune" and .parent.run_id == $b
    and (.outputs | map(select(.kind == "checkpoint")) | length) == 1'
  run -0 rckpt log ft/step-20.rkpt --json
  base_digest=$(/usr/bin/python3 -c 'import sys, xxhash; print(xxhash.xxh3_64_hexdigest(open(sys.argv[1], "rb").read()))' base.csv)
  jq -e -s --arg f "$ft_id" --arg b "$base_id" --arg d "$base_digest" 'length == 2
    and .[0].run_id == $f and .[0].parent_kind == "finetune" and .[0].step == 20 and .[0].status == "ok"
    and .[1].run_id == $b and .[1].step == 40 and .[1].status == "ok" and .[1].inputs[0].xxh3 == $d' <<<"$output"
  run -0 rckpt log ft/step-20.rkpt
  assert_line --regexp '^0 +ok +[0-9a-f]{12} +20 +finetune '
  # The base moved away: the walk says where it breaks, and exits 1.
  mv base/step-40.rkpt moved.rkpt
  run -1 --separate-stderr rckpt log ft/step-20.rkpt --json
  [[ $stderr == *"lineage broken: ft/step-20.rkpt's parent $PWD/base/step-40.rkpt is missing" ]]
  jq -e -s '.[1].status == "missing"' <<<"$output"
  # Another archive in its place is not the parent: its digest says so.
  cp ft/step-20.rkpt base/step-40.rkpt
  run -1 --separate-stderr rckpt log ft/step-20.rkpt --json
  [[ $stderr == *"is not the parent ft/step-20.rkpt was made from"* ]]
}

@test "the model registry: versions, stages with who and when, verify --model checks the registered digest" {
  rtrain run "${small[@]}" --steps 20 --ckpt-every 10 --ckpt-dir ck -q
  id=$(last_run)
  run -0 rckpt model register alpha ck/step-10.rkpt --json
  jq -e --arg id "$id" --arg u "$(id -un)" '.schema == "rkit.model.v1" and .version == 1 and .stage == "candidate"
    and .run_id == $id and .registered_by == $u and (.archive | startswith("/"))' <<<"$output"
  rckpt model register alpha ck/step-20.rkpt -q
  rckpt model promote alpha@1 production -q
  run -0 rckpt model promote alpha@2 production --json
  jq -e '.stage == "production" and .version == 2' <<<"$output"
  run -0 rckpt model ls alpha --json
  assert_equal "$(jq -r '"\(.version) \(.stage)"' <<<"$output" | tr '\n' ' ')" "1 archived 2 production "
  run -0 rckpt model show alpha@1
  assert_line --regexp '^alpha version 1: archived$'
  assert_line --regexp '^  [0-9T:-]+Z  production +by '
  run -0 rckpt verify --model alpha@production
  # The file registered replaced by another archive: verify fails, naming the digests.
  cp ck/step-10.rkpt ck/step-20.rkpt
  run -1 rckpt verify --model alpha@production
  assert_output --partial "is not the archive registered: its digest is"
  run -66 --separate-stderr rckpt verify --model alpha@7
  assert_one_line_stderr
  run -64 --separate-stderr rckpt model register 'bad name' ck/step-10.rkpt
  assert_one_line_stderr
  run -64 --separate-stderr rckpt model promote alpha production
  assert_one_line_stderr
}

@test "rtrain launch --track records a PyTorch DDP run's metrics through the Python helper" {
  run -0 rtrain launch --track --experiment ddp --nproc-per-node 2 -- /usr/bin/python3 "$RKIT_ROOT/tests/peers/ddp_train.py"
  assert_line --regexp '^\[0\]: \{"world_size": 2'
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e '.experiment == "ddp" and .status == "FINISHED" and .summary.exit_code == 0
    and .params["launch.nproc_per_node"] == 2 and .params.lr == 0.05 and .metrics.loss.step == 50
    and (.command | length) == 2'
  # Rank 0's loss at every step, 1 to 50, as the script logged it: falling as it trains.
  rtrain runs metrics "$id" --key loss --json | jq -e -s '(map(.step) == [range(1; 51)])
    and (map(.metrics.loss) | all(. > 0) and .[-1] < .[0] / 10)'
  # Without --track the helper writes nothing and the script runs as under torchrun.
  before=$(rtrain runs ls --json | wc -l)
  run -0 rtrain launch --nproc-per-node 2 -- /usr/bin/python3 "$RKIT_ROOT/tests/peers/ddp_train.py"
  assert_equal "$(rtrain runs ls --json | wc -l)" "$before"
}

@test "rtrain launch --track of rtrain run: one record holds the launch and the trainer's configuration, data, metrics" {
  make_csv train.csv 2000 5
  run -0 rtrain launch --track --experiment launched --nproc-per-node 2 -- \
    rtrain run "${small[@]}" --data train.csv --steps 40 -q
  id=$(last_run)
  rtrain runs ls --json | jq -e -s 'map(select(.experiment == "launched")) | length == 1'
  rtrain runs show "$id" --json | jq -e '.status == "FINISHED" and .params["launch.nproc_per_node"] == 2
    and .params["train.steps"] == 40 and .inputs[0].name == "data" and (.inputs[0].xxh3 | length) == 16
    and .metrics.loss.step == 40 and .summary.world_size == 2 and .summary.exit_code == 0
    and (.summary.weights_xxh3 | length) == 16'
  # Two ranks are reproduced by two ranks, bitwise; by one, refused with the command to use.
  run -64 --separate-stderr rtrain runs reproduce "$id"
  assert_one_line_stderr
  [[ $stderr == *"had 2 ranks: rtrain launch --nproc-per-node 2 -- rtrain runs reproduce $id"* ]]
  run -0 rtrain launch --nproc-per-node 2 -- rtrain runs reproduce "$id" -q --json
  sed -n 's/^\[0\]: //p' <<<"$output" | jq -e -s --arg id "$id" 'map(select(.schema == "rkit.run.reproduce.v1"))
    | length == 1 and .[0].run_id == $id and .[0].identical == true'  # rank 0 says, as launch prefixes it
}

@test "a worker's garbage line is skipped with one warning; its good records still arrive; a failed launch is FAILED" {
  run -1 --separate-stderr rtrain launch --track -- sh -c \
    'printf "%s\n" "{\"schema\":\"rkit.metric.v1\",\"step\":1,\"metrics\":{\"m\":1}}" "not json" "{\"schema\":\"rkit.metric.v1\",\"step\":2,\"metrics\":{\"m\":2,\"train/loss\":3}}" >>"$RKIT_METRICS_FILE"; exit 1'
  [[ $(grep -c "not an rkit.metric.v1 record" <<<"$stderr") == 1 ]]
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e '.status == "FAILED" and .summary.exit_code == 1 and .metrics.m.last == 2'
  # A key with a slash is one metric, in its column.
  run -0 rtrain runs metrics "$id" --key train/loss
  assert_line --regexp '^2 +3$'
}

@test "a worker that swaps its metrics file for a FIFO or a link does not stall the launcher or its record" {
  # The link leads to good metric lines: were it followed, they would be in the record.
  printf '{"schema":"rkit.metric.v1","step":1,"metrics":{"planted":1}}\n' >planted.jsonl
  run -0 --separate-stderr timeout 30 rtrain launch --track --nproc-per-node 2 -- sh -c '
    if [ "$RANK" = 0 ]; then rm -f "$RKIT_METRICS_FILE"; mkfifo "$RKIT_METRICS_FILE"
    else ln -s "$PWD/planted.jsonl" "$RKIT_METRICS_FILE"; fi
    sleep 2'
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e '.status == "FINISHED" and .metrics == {}'
  # The Python helper given a FIFO says so at once instead of blocking on it; a name the
  # store cannot keep is refused, not dropped.
  mkfifo fifo
  run -1 --separate-stderr timeout 10 env RKIT_METRICS_FILE="$PWD/fifo" PYTHONPATH="$RKIT_ROOT/examples/python" \
    /usr/bin/python3 -c 'import rkit_track; rkit_track.log(1, loss=1.0)'
  [[ $stderr == *"is not a file of this user's"* ]]
  run -1 --separate-stderr env RKIT_METRICS_FILE="$PWD/m.jsonl" PYTHONPATH="$RKIT_ROOT/examples/python" \
    /usr/bin/python3 -c 'import rkit_track; rkit_track.log(1, **{"val loss": 1.0})'
  [[ $stderr == *"names are 1 to 256 letters"* ]]
}

@test "a --log-dir other users may write cannot feed the record: the metrics files are in a private folder" {
  mkdir -m 1777 logs
  run -0 rtrain launch --track --log-dir logs --nproc-per-node 2 -- sh -c '
    case "$RKIT_METRICS_FILE" in "$PWD/logs/"*) exit 9 ;; esac
    [ "$(stat -c %a "$(dirname "$RKIT_METRICS_FILE")")" = 700 ] || exit 8
    printf "{\"schema\":\"rkit.metric.v1\",\"step\":1,\"metrics\":{\"m\":$RANK}}\n" >>"$RKIT_METRICS_FILE"'
  id=$(last_run)
  rtrain runs show "$id" --json | jq -e '.status == "FINISHED" and .metrics.m.step == 1'
  assert_equal "$(ls logs | grep -c metrics)" 0
}

@test "64 rtrain runs at once into one store: every record whole, none lost" {
  pids=()
  for i in $(seq 1 64); do
    rtrain run --layers 4,4,1 --rows 300 --batch-size 16 --steps 20 --log-every 1 --threads 1 -q \
      --experiment many --tag i=$i >/dev/null 2>"err.$i" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cat err.* >&2
  run -0 rtrain runs ls --experiment many --status FINISHED --json
  assert_equal "${#lines[@]}" 64
  assert_equal "$(jq -r .tags.i <<<"$output" | sort -n | uniq | wc -l)" 64
  for id in $(jq -r .id <<<"$output"); do
    [[ $(rtrain runs metrics "$id" --key loss --json | wc -l) == 20 ]]
  done
  [[ $(sqlite3 "$RKIT_STATE_DIR/runs/runs.db" 'PRAGMA integrity_check') == ok ]]
}

@test "rcost reports cost by experiment: each rsub job's run from the run store" {
  rsub_sandbox
  ids=()
  for e in alpha alpha beta; do ids+=("$(rsub -n "t-$e" -- rtrain run "${small[@]}" --steps 20 -q --experiment "$e")"); done
  ids+=("$(rsub -n plain -- true)")
  rsub wait "${ids[@]}" >/dev/null
  rsub ls --all --json >jobs.jsonl
  rtrain runs ls --json | jq -e -s --arg a "${ids[0]}" 'map(select(.job.backend == "rsub")) | length == 3
    and (map(.job.id) | index($a)) != null'
  run -0 rcost --prices "$RKIT_ROOT/examples/prices.toml" report --by experiment --json jobs.jsonl
  jq -e -s 'map(select(.schema == "rkit.cost.v1")) | map({key: .experiment, value: .jobs}) | from_entries
    | .alpha == 2 and .beta == 1 and .[""] == 1' <<<"$output"
  # Without a run store, the report says so once and every job has no experiment.
  run -0 --separate-stderr rcost --prices "$RKIT_ROOT/examples/prices.toml" report --by experiment --project nowhere \
    --json jobs.jsonl
  assert_equal "$stderr" "rcost: warning: no run store at nowhere/runs.db: no job has an experiment"
}

@test "bad ids, filters and stores: one line and the documented code" {
  rtrain run "${small[@]}" --steps 10 -q
  run -64 --separate-stderr rtrain runs show xyz
  assert_one_line_stderr
  run -66 --separate-stderr rtrain runs show 0000000000ff
  assert_one_line_stderr
  run -64 --separate-stderr rtrain runs ls --param 'lr'
  assert_one_line_stderr
  run -64 --separate-stderr rtrain runs ls --tag "a'b=1"
  assert_one_line_stderr
  run -64 --separate-stderr rtrain run "${small[@]}" --steps 10 --tag novalue
  assert_one_line_stderr
  run -64 --separate-stderr rtrain runs compare "$(last_run)"
  assert_one_line_stderr
  # A store that is not a database: 65, and nothing is overwritten.
  mkdir bad && echo "not a database" >bad/runs.db
  run -65 --separate-stderr rtrain runs ls --project bad
  assert_one_line_stderr
  assert_equal "$(cat bad/runs.db)" "not a database"
  # An empty file, or another program's SQLite database, is no run store: a reader says
  # so (65) and leaves it as it was.
  mkdir empty && : >empty/runs.db
  run -65 --separate-stderr rtrain runs ls --project empty
  assert_one_line_stderr
  [[ $stderr == *"not a run store"* ]]
  assert_equal "$(stat -c %s empty/runs.db)" 0
  assert_equal "$(ls empty)" "runs.db"
  run -64 --separate-stderr rtrain runs ls --last 0
  assert_one_line_stderr
  # A record whose git diff failed (dirty unknown) still shows; reproduce refuses it.
  /usr/bin/python3 - "$RKIT_STATE_DIR/runs/runs.db" "$(last_run)" <<'EOF'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE run_texts SET code = ? WHERE run = (SELECT id FROM runs WHERE run_id = ?)",
           (json.dumps({"repo": "/nowhere", "commit": "abc", "branch": None, "dirty": None, "diff_xxh3": None}), sys.argv[2]))
db.commit()
EOF
  run -0 rtrain runs show "$(last_run)"
  assert_line --regexp '^  code      /nowhere at abc$'
  run -65 --separate-stderr rtrain runs reproduce "$(last_run)"
  assert_one_line_stderr
  [[ $stderr == *"revision unknown"* ]]
  # A store another user's folder holds: the kernel's permissions decide (77).
  if [[ $(id -u) == 0 ]]; then
    mkdir -m 700 theirs  # root's
    run -77 --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups \
      "$RKIT_BUILD_DIR/tools/rtrain/rtrain" runs ls --project "$PWD/theirs"
    assert_one_line_stderr
  fi
  # A store that is a link (to a file of root's, say) is refused, and the file untouched.
  mkdir linked && echo "precious" >precious && ln -s "$PWD/precious" linked/runs.db
  run -77 --separate-stderr rtrain run "${small[@]}" --steps 10 -q --project linked
  assert_one_line_stderr
  [[ $stderr == *"is a symbolic link"* ]]
  assert_equal "$(cat precious)" "precious"
  if [[ $(id -u) == 0 ]]; then
    # Root keeps no store in a folder another user owns or may write: they could plant
    # links for its -wal and -shm files. Nothing is created there.
    mkdir -m 777 shared && mkdir user && chown 65534:65534 user
    for d in shared user shared/new user/new/deeper; do
      run -77 --separate-stderr rtrain run "${small[@]}" --steps 10 -q --project "$d"
      assert_one_line_stderr
      [[ $stderr == *"root keeps no store where another user could replace its files"* ]]
      assert_equal "$(ls -A "${d%%/*}")" ""  # not even the folders on the way
    done
  fi
  # --no-track and RKIT_TRACK=0 keep no record.
  n=$(rtrain runs ls --json | wc -l)
  rtrain run "${small[@]}" --steps 10 -q --no-track
  RKIT_TRACK=0 rtrain run "${small[@]}" --steps 10 -q
  assert_equal "$(rtrain runs ls --json | wc -l)" "$n"
}
