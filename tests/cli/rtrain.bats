#!/usr/bin/env bats
# rtrain launch on one node: torchrun's environment, output and logs per rank, and the
# faults: a killed worker, a worker failing at start, a hung worker, SIGTERM to rtrain.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  # The run's secret that the agents of several nodes share (--secret-file).
  (umask 077 && head -c 32 /dev/urandom | base64 >secret)
}

@test "workers get torchrun's environment; output is prefixed with the rank and logged per attempt" {
  run -0 rtrain launch --nproc-per-node 2 --max-restarts 3 --run-id r1 --log-dir logs -- sh -c \
    'echo "$RANK $LOCAL_RANK $GROUP_RANK $ROLE_RANK $ROLE_NAME $LOCAL_WORLD_SIZE $WORLD_SIZE $GROUP_WORLD_SIZE $ROLE_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID $OMP_NUM_THREADS"'
  # MASTER_PORT: a port free when the run started (torchrun's --master-port 0), the same for both.
  port=$(sed -n 's/^\[0\]: 0 0 0 0 default 2 2 1 2 127\.0\.0\.1 \([0-9]*\) 0 3 r1 1$/\1/p' <<<"$output")
  ((port > 0))
  assert_line "[1]: 1 1 0 1 default 2 2 1 2 127.0.0.1 $port 0 3 r1 1"
  assert_equal "$(cat logs/attempt-0.rank-1.out)" "1 1 0 1 default 2 2 1 2 127.0.0.1 $port 0 3 r1 1"
}

@test "workers get a secret of the run (RKIT_RUN_SECRET), a new one each run; the heartbeat folder is private and fresh" {
  run -0 rtrain launch --nproc-per-node 2 -- sh -c 'echo "$RKIT_RUN_SECRET $(stat -c %a "$(dirname "$RKIT_HEARTBEAT_FILE")")"'
  first=$(sed -n 's/^\[0\]: //p' <<<"$output")
  [[ $first =~ ^[0-9a-f]{64}\ 700$ ]]
  assert_line "[1]: $first"
  run -0 rtrain launch -- sh -c 'echo "$RKIT_RUN_SECRET"'
  refute_line "[0]: ${first% *}"
  # One given in the environment is the one the workers get.
  RKIT_RUN_SECRET=given-secret-of-this-run run -0 rtrain launch -- sh -c 'echo "$RKIT_RUN_SECRET"'
  assert_line "[0]: given-secret-of-this-run"
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
  jq -e -s --arg host "$(hostname)" 'map(select(.event == "restart"))[0].root_cause | startswith("rank 1 on \($host) killed by signal 9")' events.jsonl
}

@test "a worker failing at start every time: stops after --max-restarts with its exit code and its stderr" {
  run --separate-stderr rtrain launch --nproc-per-node 2 --max-restarts 2 --events events.jsonl -- sh -c \
    'if [ "$RANK" = 1 ]; then echo "cannot open data" >&2; exit 3; fi; sleep 5'
  assert_equal "$status" 3
  [[ $(jq -s 'map(select(.event == "start")) | length' events.jsonl) == 3 ]]
  [[ $stderr == *"rtrain: worker failed (generation 2): rank 1 on $(hostname) exit 3 after"* ]]
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
  refute_alive $(cat pids)  # `! kill -0` alone could not fail a Bats test
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

# A port for the agents' rendezvous, free now.
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

@test "two agents on loopback: node 0 hosts the rendezvous; ranks, world and port agree" {
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --nproc-per-node 2 --master-port "$port" -- \
    sh -c 'echo "$RANK/$WORLD_SIZE local $LOCAL_RANK node $GROUP_RANK/$GROUP_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT"' >node1.out 2>&1 &
  node1=$!
  run -0 rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --nproc-per-node 2 --master-port "$port" -- \
    sh -c 'echo "$RANK/$WORLD_SIZE local $LOCAL_RANK node $GROUP_RANK/$GROUP_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT"'
  wait "$node1"
  workers=$(sed -n 's/^\[0\]: 0\/4 local 0 node 0\/2 //p' <<<"$output")
  [[ $workers =~ ^127\.0\.0\.1:[0-9]+$ && $workers != "127.0.0.1:$port" ]]  # not the rendezvous' port
  assert_line "[1]: 1/4 local 1 node 0/2 $workers"
  grep -qx "\[2\]: 2/4 local 0 node 1/2 $workers" node1.out
  grep -qx "\[3\]: 3/4 local 1 node 1/2 $workers" node1.out
}

@test "two agents: a worker killed on node 1 restarts both nodes' workers; the run finishes on both" {
  port=$(free_port)
  script='if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then kill -9 $$; fi; sleep 0.3; echo "rank $RANK gen $TORCHELASTIC_RESTART_COUNT"'
  rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" --max-restarts 1 -- sh -c "$script" >node1.out 2>&1 &
  node1=$!
  run -0 rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" --max-restarts 1 --events events.jsonl -- sh -c "$script"
  wait "$node1"
  assert_line "[0]: rank 0 gen 1"
  grep -qx '\[1\]: rank 1 gen 1' node1.out
  jq -e -s --arg host "$(hostname)" 'map(select(.event == "restart"))[0].root_cause | startswith("rank 1 on \($host) killed by signal 9")' events.jsonl
}

@test "two agents: a run that fails every time ends on both nodes with the failing worker's code" {
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" --max-restarts 1 -- sh -c 'exit 5' >node1.out 2>&1 &
  node1=$!
  run rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" --max-restarts 1 -- sleep 30
  assert_equal "$status" 5
  wait "$node1" || node1_status=$?
  assert_equal "${node1_status:-0}" 5
}

@test "a PyTorch DDP script on two agents gives torchrun's two-process result" {
  script=$RKIT_ROOT/tests/peers/ddp_train.py
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- /usr/bin/python3 "$script" >node1.out 2>&1 &
  node1=$!
  run -0 rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" -- /usr/bin/python3 "$script"
  wait "$node1"
  ours=$(sed -n 's/^\[0\]: //p' <<<"$output" | grep '^{')
  run -0 torchrun --standalone --nproc_per_node 2 --redirects 0:1,1:1 --tee 0:1,1:1 "$script"
  assert_equal "$ours" "$(sed -n 's/^\[default0\]://p' <<<"$output" | grep '^{')"
}

@test "bad multi-node input: a node rank out of range, no --master-port, no secret" {
  run --separate-stderr rtrain launch --nnodes 2 --node-rank 2 --secret-file secret -- true
  assert_equal "$status" 64
  run --separate-stderr rtrain launch --nnodes 2 --master-port 0 --secret-file secret -- true
  assert_equal "$status" 64
  assert_one_line_stderr
  run --separate-stderr rtrain launch --nnodes 2 --secret-file secret -- true
  assert_equal "$status" 64
  assert_one_line_stderr
  [[ $stderr == *"--nnodes 2 needs --master-port"* ]]
  # Several nodes cannot make up a secret between them: it must be given.
  run --separate-stderr env -u RKIT_RUN_SECRET -u RKIT_RUN_SECRET_FILE rtrain launch --nnodes 2 --master-port 29400 -- true
  assert_equal "$status" 64
  assert_one_line_stderr
  [[ $stderr == *"--nnodes 2 needs the run's secret on every node"* ]]
  # A secret file others may read, or a symbolic link, is refused (77); a missing one is 66.
  chmod 644 secret
  run --separate-stderr rtrain launch --nnodes 2 --master-port 29400 --secret-file secret -- true
  assert_equal "$status" 77
  assert_one_line_stderr
  [[ $stderr == *"chmod 600 secret"* ]]
  chmod 600 secret && ln -s secret link
  run --separate-stderr rtrain launch --nnodes 2 --master-port 29400 --secret-file link -- true
  assert_equal "$status" 77
  run --separate-stderr rtrain launch --nnodes 2 --master-port 29400 --secret-file nonesuch -- true
  assert_equal "$status" 66
}

@test "two agents: a second agent with a node rank already taken is refused (69); the run goes on" {
  port=$(free_port)
  # The workers run until the test creates `release`.
  worker='echo "rank $RANK"; touch "running.$RANK"; while [ ! -e release ]; do sleep 0.05; done'
  rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- sh -c "$worker" >node1.out 2>&1 &
  node1=$!
  rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" -- sh -c "$worker" >node0.out 2>&1 &
  node0=$!
  # Once node 1 has joined (its worker runs), a second node 1 is too late.
  for _ in $(seq 100); do [[ -e running.1 ]] && break; sleep 0.1; done
  [[ -e running.1 ]]
  run --separate-stderr rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- true
  assert_equal "$status" 69
  [[ $stderr == *"node rank 1 has joined already"* ]]
  touch release
  wait "$node0"
  wait "$node1"
  grep -qx '\[0\]: rank 0' node0.out
}

@test "two agents: SIGTERM to node 1's agent ends the run on both nodes (143), no orphans" {
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" --max-restarts 3 -- sh -c 'echo $$ >> pids; sleep 60' >node1.out 2>&1 &
  node1=$!
  rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" --max-restarts 3 -- sh -c 'echo $$ >> pids; sleep 60' >node0.out 2>&1 &
  node0=$!
  for _ in $(seq 50); do [[ $(wc -l <pids 2>/dev/null) == 2 ]] && break; sleep 0.1; done
  kill -TERM "$node1"
  wait "$node0" || node0_status=$?
  wait "$node1" || node1_status=$?
  assert_equal "${node0_status:-0}" 143
  assert_equal "${node1_status:-0}" 143
  refute_alive $(cat pids)  # `! kill -0` alone could not fail a Bats test
  [[ $(wc -l <pids) == 2 ]]  # not restarted
}

@test "two agents: node 0's run id reaches every node's workers" {
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- sh -c 'echo "$TORCHELASTIC_RUN_ID"' >node1.out 2>&1 &
  node1=$!
  run -0 rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" --run-id shared7 -- sh -c 'echo "$TORCHELASTIC_RUN_ID"'
  wait "$node1"
  assert_line "[0]: shared7"
  grep -qx '\[1\]: shared7' node1.out
}

@test "--placement binds each worker to its CPUs (rtop place) and GPUs; a short or bad file is refused (65)" {
  rtop place --ranks 2 --json >cpus.jsonl
  run -0 rtrain launch --nproc-per-node 2 --placement cpus.jsonl -- sh -c 'echo "cpus $(taskset -cp $$ | sed "s/.*: //") gpus [$CUDA_VISIBLE_DEVICES]"'
  for rank in 0 1; do
    assert_line "[$rank]: cpus $(jq -r "select(.rank == $rank) | .cpuset" cpus.jsonl) gpus []"
  done
  # GPUs are indices here (no GPU on these machines): what CUDA_VISIBLE_DEVICES says.
  jq -c '.gpus = [.rank * 2, .rank * 2 + 1]' cpus.jsonl >gpus.jsonl
  run -0 rtrain launch --nproc-per-node 2 --placement - -- sh -c 'echo "[$CUDA_VISIBLE_DEVICES] $CUDA_DEVICE_ORDER"' <gpus.jsonl
  assert_line "[0]: [0,1] PCI_BUS_ID"
  assert_line "[1]: [2,3] PCI_BUS_ID"
  head -1 cpus.jsonl >one.jsonl
  run --separate-stderr rtrain launch --nproc-per-node 2 --placement one.jsonl -- true
  assert_equal "$status" 65
  [[ $stderr == *"one.jsonl: no placement for local rank 1"* ]]
  echo '{"schema": "rkit.sample.v1"}' >bad.jsonl
  run --separate-stderr rtrain launch --placement bad.jsonl -- true
  assert_equal "$status" 65
}

@test "--min-uptime: generations that keep failing at start are a crash loop, ended after 3" {
  run --separate-stderr rtrain launch --max-restarts 10 --min-uptime 30 --events events.jsonl -- sh -c 'exit 2'
  assert_equal "$status" 2
  [[ $(jq -s 'map(select(.event == "start")) | length' events.jsonl) == 3 ]]
  [[ $stderr == *"3 generations in a row failed within --min-uptime 30s: a crash loop; not restarting"* ]]
}

@test "--ckpt-dir: RKIT_RESUME_FROM is the newest complete checkpoint, read again at each restart" {
  mkdir -p state ckpt
  echo weights >state/model.bin
  rckpt pack state -o ckpt/step-1.rkpt
  rckpt pack state -o full.rkpt
  head -c 1000 full.rkpt >ckpt/step-2.rkpt  # newer, but cut short by a crash: skipped
  touch -d '+1 min' ckpt/step-2.rkpt
  # Generation 0 saves step-3 (complete), then dies; generation 1 resumes from it.
  run -0 rtrain launch --ckpt-dir ckpt --max-restarts 1 -- sh -c '
    echo "dir $RKIT_CKPT_DIR from $RKIT_RESUME_FROM"
    if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
      rckpt pack state -o "$RKIT_CKPT_DIR/step-3.rkpt" && touch -d "+2 min" "$RKIT_CKPT_DIR/step-3.rkpt"; exit 1
    fi'
  assert_line "[0]: dir $PWD/ckpt from $PWD/ckpt/step-1.rkpt"
  assert_line "[0]: dir $PWD/ckpt from $PWD/ckpt/step-3.rkpt"
  # None complete: empty.
  run -0 rtrain launch --ckpt-dir empty -- sh -c 'echo "from [$RKIT_RESUME_FROM]"'
  assert_line "[0]: from []"
}
