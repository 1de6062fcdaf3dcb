# Sourced by tests/integration/*.bats in setup_file/teardown_file: one real Slurm per
# test file, in a folder of its own (slurm.sh), stopped by pid at the end.
#   slurm_start [--accounting]   skips the file unless root; exports SLURM_DIR
#   slurm_stop
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
