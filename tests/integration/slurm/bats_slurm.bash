# Sourced by tests/integration/*.bats in setup_file/teardown_file: one real Slurm per
# test file, in a folder of its own (slurm.sh), stopped by pid at the end.
#   slurm_start [--accounting]   skips the file unless root; exports SLURM_DIR
#   slurm_stop
#   rsub_slurm_config FILE       rsub's configuration for that Slurm, written to FILE
#   count_slurm_calls            Slurm's commands behind wrappers in ./bin that append
#                                each command's name to ./calls; rsub's bin_dir names them
slurm_start() {
  if ((EUID != 0)); then skip "Slurm's daemons start as root"; fi
  SLURM_DIR=$(mktemp -d /tmp/rkit-slurm.XXXXXX)
  chmod 755 "$SLURM_DIR"  # munged and slurmdbd run as their own users and must reach it
  export SLURM_DIR
  "$BATS_TEST_DIRNAME/slurm/slurm.sh" start "$SLURM_DIR" "$@" >&3 2>&1
}

slurm_stop() {
  "$BATS_TEST_DIRNAME/slurm/slurm.sh" stop "$SLURM_DIR" >&3 2>&1 || true
  rm -rf "$SLURM_DIR"
}

rsub_slurm_config() {  # refresh = 0: every command reads sacct afresh, so tests need not wait
  cat >"$1" <<EOF
[local]
cpus = 2
gpus = 0
[rsub.backends.slurm]
kind = "slurm"
slurm_conf = "$SLURM_DIR/etc/slurm.conf"
refresh = "0s"
submit_retry = "1s"
EOF
}

count_slurm_calls() {
  local cmd
  mkdir bin
  for cmd in sbatch sacct squeue scancel scontrol; do
    printf '#!/bin/sh\necho %s >>"%s/calls"\nexec /usr/bin/%s "$@"\n' "$cmd" "$PWD" "$cmd" >"bin/$cmd"
    chmod +x "bin/$cmd"
  done
  printf 'bin_dir = "%s/bin"\n' "$PWD" >>"$RKIT_CONFIG"
}
