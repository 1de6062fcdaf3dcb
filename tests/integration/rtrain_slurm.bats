#!/usr/bin/env bats
# rtrain launch under a real Slurm 22.05 (started here: slurm.sh, no accounting): `srun
# rtrain launch ...` takes the node count, the node's rank and node 0's address from
# Slurm's environment, and two agents get the run's secret through srun's environment.
# Needs root and the packages of install-deps.sh tests.
bats_require_minimum_version 1.5.0

setup_file() {
  load slurm/bats_slurm
  slurm_start
}

teardown_file() {
  load slurm/bats_slurm
  slurm_stop
}

setup() {
  load ../cli/helpers
  cd "$BATS_TEST_TMPDIR"
  chmod 755 "$BATS_TEST_TMPDIR"
  export SLURM_CONF=$SLURM_DIR/etc/slurm.conf
}

@test "srun rtrain launch: nodes, node rank and node 0's address come from Slurm" {
  run -0 srun -N1 --ntasks-per-node=1 -c2 "$RKIT_BUILD_DIR/tools/rtrain/rtrain" launch --nproc-per-node 2 --master-port 0 -- \
    sh -c 'echo "$RANK/$WORLD_SIZE node $GROUP_RANK/$GROUP_WORLD_SIZE at $MASTER_ADDR"'
  node0=$(getent ahostsv4 "$(scontrol show hostnames "$(sinfo -h -o %N)" | head -1)" | awk 'NR == 1 {print $1}')
  [[ -n $node0 ]]
  assert_line "[0]: 0/2 node 0/1 at $node0"
  assert_line "[1]: 1/2 node 0/1 at $node0"
}

@test "srun rtrain launch: an option given wins over Slurm's value" {
  run -0 srun -N1 --ntasks-per-node=1 "$RKIT_BUILD_DIR/tools/rtrain/rtrain" launch --master-addr 127.0.0.1 --master-port 0 -- \
    sh -c 'echo "at $MASTER_ADDR"'
  assert_line "[0]: at 127.0.0.1"
}

@test "srun, two agents: the run's secret reaches both through the job's environment" {
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # srun hands its environment to every task: one secret, given once, for both agents.
  export RKIT_RUN_SECRET=$(head -c 32 /dev/urandom | base64)
  run -0 srun -N1 -n2 -c1 sh -c "exec '$RKIT_BUILD_DIR/tools/rtrain/rtrain' launch --nnodes 2 --node-rank \$SLURM_PROCID \
    --master-addr 127.0.0.1 --master-port $port -- sh -c 'echo \"\$RANK/\$WORLD_SIZE \${#RKIT_RUN_SECRET}\"'"
  assert_line "[0]: 0/2 ${#RKIT_RUN_SECRET}"
  assert_line "[1]: 1/2 ${#RKIT_RUN_SECRET}"
  # Without it, several agents refuse to start.
  run -64 env -u RKIT_RUN_SECRET srun -N1 -n1 "$RKIT_BUILD_DIR/tools/rtrain/rtrain" launch --nnodes 2 --master-port "$port" -- true
}
