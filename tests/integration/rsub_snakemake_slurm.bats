#!/usr/bin/env bats
# Snakemake workflows through rkit's profile (rsub workflow) on a real Slurm 22.05 with
# accounting, which this file starts once (slurm.sh start --accounting) and stops by pid
# at the end: the example pipeline unchanged on the local backend and on Slurm, and the
# polling of a workflow of 200 active jobs. Needs root and the packages of
# install-deps.sh tests.
bats_require_minimum_version 1.5.0

setup_file() {
  load slurm/bats_slurm
  slurm_start --accounting
}

teardown_file() {
  load slurm/bats_slurm
  slurm_stop
}

setup() {
  load ../cli/helpers
  load slurm/bats_slurm
  command -v snakemake >/dev/null || { echo "snakemake is not installed (packaging/install-deps.sh tests)" >&2; return 1; }
  mkdir -p "$BATS_TEST_TMPDIR/wf"
  cd "$BATS_TEST_TMPDIR/wf"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml TMPDIR=$BATS_TEST_TMPDIR
  export SLURM_CONF=$SLURM_DIR/etc/slurm.conf
  unset RSUB_WORKFLOW
  rsub_slurm_config "$RKIT_CONFIG"
}

teardown() {
  if [[ -n ${SMK_PID:-} ]]; then
    kill -TERM "$SMK_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SMK_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SMK_PID" 2>/dev/null || true
  fi
  /usr/bin/scancel --user "$(id -un)" 2>/dev/null || true  # what a failed test left on Slurm
  stop_rsub
}

# slurm_active: how many of this user's jobs Slurm has pending or running.
slurm_active() { /usr/bin/squeue -h --user "$(id -un)" -t PENDING,RUNNING -o %i | wc -l; }

@test "the example pipeline, unchanged, on the local backend and on Slurm: Snakemake's own results on both" {
  pipeline=$RKIT_ROOT/examples/pipeline
  mkdir own local slurm
  (cd own && snakemake -s "$pipeline/Snakefile" --cores 2 -q >/dev/null 2>&1)  # the local executor, no rsub
  (cd local && rsub workflow -s "$pipeline/Snakefile" -q >/dev/null 2>&1)
  (cd slurm && rsub workflow -s "$pipeline/Snakefile" --default-resources "backend='slurm'" -q >/dev/null 2>&1)
  for run in local slurm; do
    cmp own/report.txt $run/report.txt
    diff -r own/backtest $run/backtest
    rsub ls --all --workflow $run --json >$run.jsonl
    jq -e -s --arg b $run 'length == 29 and all(.state == "COMPLETED" and .backend == $b)
                           and (map(.rule) | unique) == ["backtest", "dataset", "features", "market", "report", "train"]' \
      $run.jsonl
  done
  [[ $(jq -r 'select(.rule == "train") | .remote_id' slurm.jsonl) =~ ^[0-9]+$ ]]  # Slurm's job id
  [[ $(head -n 1 slurm/report.txt) == "model: 200 steps on 2 ranks, eval loss "*", 2 checkpoints" ]]
}

@test "200 active jobs on Slurm: one sacct per Snakemake polling round, one scancel for all on Ctrl-C" {
  # Slurm's commands behind wrappers that count rsub's calls, and the profile's status
  # command behind one that counts Snakemake's.
  count_slurm_calls
  cp -r "$RKIT_BUILD_DIR/tools/rsub/snakemake/rkit" profile
  printf '#!/bin/sh\necho "$1" >>"%s/status_calls"\nexec rsub snakemake status "$@"\n' "$PWD" >profile/rsub-smk-status
  export RSUB_SNAKEMAKE_PROFILE=$PWD/profile
  cat >Snakefile <<EOF
rule all:
    input: expand("out/{i}.txt", i=range(200))
rule step:
    output: "out/{i}.txt"
    resources: mem_mb=10, runtime=5
    shell: "while [ ! -e $PWD/gate ]; do sleep 0.2; done; touch {output}"
EOF
  set -m  # job control: a background job of a script otherwise ignores SIGINT
  rsub workflow --default-resources "backend='slurm'" -q >smk.log 2>&1 &
  SMK_PID=$!
  set +m
  for _ in $(seq 600); do (($(slurm_active) == 200)) && break; sleep 0.1; done
  assert_equal "$(slurm_active)" 200
  # From here on every round asks about all 200; three rounds and more.
  : >calls
  : >status_calls
  for _ in $(seq 600); do (($(wc -l <status_calls) >= 600)) && break; sleep 0.1; done
  asked=$(wc -l <status_calls)
  sacct=$(grep -c '^sacct$' calls || true)
  squeue=$(grep -c '^squeue$' calls || true)
  echo "status calls $asked, sacct $sacct, squeue $squeue"
  ((asked >= 600))
  rounds=$(((asked + 199) / 200 + 1))  # the rounds begun in the window, a first partial one too
  ((sacct >= 1 && sacct <= rounds && squeue <= rounds))
  assert_equal "$(grep -c '^sbatch$' calls || true)" 0
  # Ctrl-C: the sidecar cancels all 200 with one scancel.
  : >calls
  start=$(date +%s)  # Slurm's times are whole seconds
  kill -INT "$SMK_PID"
  for _ in $(seq 100); do (($(slurm_active) == 0)) && break; sleep 0.1; done
  (($(slurm_active) == 0)) || tail -n 20 smk.log
  assert_equal "$(slurm_active)" 0
  assert_equal "$(grep -c '^scancel$' calls)" 1
  # Every job CANCELLED, by Slurm's clock after the Ctrl-C and within the 10 s waited
  # above (whole seconds; how soon is the benchmark's to measure, not a loaded CI's).
  rsub ls --all --workflow wf --json >cancelled.jsonl
  jq -s --argjson t0 "$start" '{jobs: length, states: (group_by(.state) | map({(.[0].state): length}) | add),
    no_end: map(select(.end_unix_s == null) | {id, state, reason}),
    end_minus_ctrl_c_s: (map(select(.end_unix_s != null) | .end_unix_s - $t0) | [min, max])}' cancelled.jsonl
  jq -e -s --argjson t0 "$start" \
    'length == 200 and all(.state == "CANCELLED" and .end_unix_s - $t0 >= 0 and .end_unix_s - $t0 <= 11)' \
    cancelled.jsonl
  for _ in $(seq 100); do kill -0 "$SMK_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SMK_PID" 2>/dev/null; then echo "snakemake still runs 10 s after its Ctrl-C"; false; fi
  run wait "$SMK_PID"
  SMK_PID=
  ((status != 0))
}
