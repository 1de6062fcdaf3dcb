#!/usr/bin/env bats
# rtrain launch on one node: torchrun's environment, output and logs per rank, and the
# faults: a killed worker, a worker failing at start, a hung worker, SIGTERM to rtrain.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
}

@test "workers get torchrun's environment; output is prefixed with the rank and logged per attempt" {
  run -0 rtrain launch --nproc-per-node 2 --max-restarts 3 --run-id r1 --log-dir logs -- sh -c \
    'echo "$RANK $LOCAL_RANK $GROUP_RANK $ROLE_RANK $ROLE_NAME $LOCAL_WORLD_SIZE $WORLD_SIZE $GROUP_WORLD_SIZE $ROLE_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID $OMP_NUM_THREADS"'
  assert_line "[0]: 0 0 0 0 default 2 2 1 2 127.0.0.1 29500 0 3 r1 1"
  assert_line "[1]: 1 1 0 1 default 2 2 1 2 127.0.0.1 29500 0 3 r1 1"
  assert_equal "$(cat logs/attempt-0.rank-1.out)" "1 1 0 1 default 2 2 1 2 127.0.0.1 29500 0 3 r1 1"
}

@test "--master-port 0 picks a free port; OMP_NUM_THREADS set by the user is kept" {
  OMP_NUM_THREADS=4 run -0 rtrain launch --nproc-per-node 2 --master-port 0 -- sh -c 'echo "$MASTER_PORT $OMP_NUM_THREADS"'
  port=$(sed -n 's/^\[0\]: \([0-9]*\) 4$/\1/p' <<<"$output")
  ((port > 0 && port != 29500))
  assert_line "[1]: $port 4"
}

@test "kill -9 of a worker: the whole group restarts and the run finishes" {
  run -0 rtrain launch --nproc-per-node 2 --max-restarts 1 --events events.jsonl -- sh -c \
    'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then kill -9 $$; fi; sleep 0.2; echo "done $RANK gen $TORCHELASTIC_RESTART_COUNT"'
  assert_line "[0]: done 0 gen 1"
  assert_line "[1]: done 1 gen 1"
  refute_line "[0]: done 0 gen 0"  # stopped with its group
  [[ $(jq -r -s 'map(.event) | join(",")' events.jsonl) == start,worker_exit,worker_exit,restart,start,worker_exit,worker_exit,done ]]
  jq -e -s 'map(select(.event == "restart"))[0].root_cause | startswith("rank 1 killed by signal 9")' events.jsonl
}

@test "a worker failing at start every time: stops after --max-restarts with its exit code and its stderr" {
  run --separate-stderr rtrain launch --nproc-per-node 2 --max-restarts 2 --events events.jsonl -- sh -c \
    'if [ "$RANK" = 1 ]; then echo "cannot open data" >&2; exit 3; fi; sleep 5'
  assert_equal "$status" 3
  [[ $(jq -s 'map(select(.event == "start")) | length' events.jsonl) == 3 ]]
  [[ $stderr == *"rtrain: worker failed (generation 2): rank 1 exit 3 after"* ]]
  [[ $stderr == *"rtrain:   [1]: cannot open data"* ]]
}

@test "--restart-on: a failure with an unlisted code is not restarted" {
  run rtrain launch --nproc-per-node 1 --max-restarts 5 --restart-on 75 --events events.jsonl -- sh -c 'exit 4'
  assert_equal "$status" 4
  [[ $(jq -s 'map(select(.event == "start")) | length' events.jsonl) == 1 ]]
}

@test "a hung worker (no heartbeat) is detected within the timeout and the group restarted" {
  start=$SECONDS
  run -0 rtrain launch --nproc-per-node 2 --max-restarts 1 --heartbeat-timeout 1 --kill-grace 1 --events events.jsonl -- sh -c \
    'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ]; then sleep 60; fi; touch "$RKIT_HEARTBEAT_FILE"; echo ok'
  ((SECONDS - start < 10))
  jq -e -s 'map(select(.event == "hang_detected"))[0] | .rank == 0 and .generation == 0' events.jsonl
  assert_line "[0]: ok"
}

@test "SIGTERM to rtrain: every worker is gone, no orphans, exit 143" {
  rtrain launch --nproc-per-node 2 -- sh -c 'echo $$ >> pids; sleep 60' >/dev/null 2>&1 &
  launcher=$!
  for _ in $(seq 50); do [[ $(wc -l <pids 2>/dev/null) == 2 ]] && break; sleep 0.1; done
  kill -TERM "$launcher"
  wait "$launcher" || status=$?
  assert_equal "$status" 143
  while read -r pid; do ! kill -0 "$pid" 2>/dev/null; done <pids
}

@test "bad input: nothing to run, an unknown option" {
  run --separate-stderr rtrain launch --nproc-per-node 2
  assert_equal "$status" 64
  assert_one_line_stderr
  run --separate-stderr rtrain launch --nproc-per-node 0 -- true
  assert_equal "$status" 64
  run --separate-stderr rtrain launch -- /no/such/program
  assert_equal "$status" 66
}

@test "a PyTorch DDP script (gloo, env://) runs unchanged under rtrain launch and gives torchrun's result" {
  script=$RKIT_ROOT/tests/peers/ddp_train.py
  run -0 rtrain launch --nproc-per-node 2 --master-port 0 -- /usr/bin/python3 "$script"
  ours=$(sed -n 's/^\[0\]: //p' <<<"$output" | grep '^{')
  # torchrun on Python 3.11 needs the per-rank --redirects/--tee maps (DESIGN.md).
  run -0 torchrun --standalone --nproc_per_node 2 --redirects 0:1,1:1 --tee 0:1,1:1 "$script"
  theirs=$(sed -n 's/^\[default0\]://p' <<<"$output" | grep '^{')
  [[ -n $ours ]]
  assert_equal "$ours" "$theirs"
  jq -e '.world_size == 2 and .final_loss < 0.01' <<<"$ours"
}
