#!/usr/bin/env bash
# Snakemake 7.21 workflows whose every rule is an rsub job (rsub workflow: rkit's profile)
# against Snakemake's own executors, on the same machine and cores, one run each:
#   - local: 100 short rules (each RSUB_BENCH_RULE_S seconds of CPU, default 1, one core)
#     through rsub's local backend, against `snakemake --cores $(nproc)` running them itself;
#   - slurm: 50 of those rules on a real Slurm (Debian's 22.05 with accounting, started for
#     the run by tests/integration/slurm/slurm.sh and stopped on every exit) through rsub's
#     Slurm backend, against Debian's built-in `snakemake --slurm`.
# Each side runs its workflow in a new folder, from the start until snakemake exits (every
# output made). Each cluster job runs Snakemake again for its one rule (its cluster mode;
# rsub's start of it: snakemake/rkit/rsub-smk-job.py), which the local executor never does.
# Needs root (Slurm's daemons) and the packages of `packaging/install-deps.sh bench`.
set -euo pipefail
bin=$RKIT_BUILD_DIR/tools/rsub
slurm_sh=$(realpath "$(dirname "$0")/../tests/integration/slurm/slurm.sh")
rule_s=${RSUB_BENCH_RULE_S:-1}
[[ -x $bin/rsub ]] || { echo "snakemake.sh: error: no rsub at $bin/rsub (build it first)" >&2; exit 1; }
command -v snakemake >/dev/null || { echo "snakemake.sh: error: snakemake not found (packaging/install-deps.sh bench)" >&2; exit 1; }
tmp=$(mktemp -d)
slurm_dir=$(mktemp -d)  # not inside $tmp: munged and slurmdbd, running as their own users, must reach it
chmod 755 "$slurm_dir"
export RKIT_STATE_DIR=$tmp/state RKIT_CONFIG=$tmp/rkit.toml
cleanup() {
  local pid_file=$RKIT_STATE_DIR/rsub/daemon.pid pid i
  if [[ -s $pid_file ]]; then
    pid=$(<"$pid_file")
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  "$slurm_sh" stop "$slurm_dir" >/dev/null 2>&1 || true
  rm -rf "$tmp" "$slurm_dir"
}
trap cleanup EXIT
"$slurm_sh" start "$slurm_dir" --accounting >/dev/null
source "$slurm_dir/env.sh"
cat >"$RKIT_CONFIG" <<EOF
[local]
cpus = $(nproc)
gpus = 0
[rsub.backends.slurm]
kind = "slurm"
slurm_conf = "$SLURM_CONF"
EOF
PATH=$bin:$PATH
export USER=${USER:-$(id -un)}  # snakemake --slurm reads it (to guess an account), as a login shell has it

# A fan-out of N rules, each burning RULE_S seconds of one core's CPU, and their union.
cat >"$tmp/Snakefile" <<'EOF'
N = int(config["n"])
rule all:
    input: expand("out/{i}.txt", i=range(N))
rule step:
    output: "out/{i}.txt"
    threads: 1
    resources: mem_mb=100, runtime=10
    shell: "/usr/bin/python3 -c 'import sys, time\nend = time.thread_time() + float(sys.argv[1])\nwhile time.thread_time() < end: pass\nprint(sys.argv[2])' {config[rule_s]} {wildcards.i} > {output}"
EOF

# wall NAME CMD...: runs CMD in a new folder $tmp/NAME; prints its wall seconds.
wall() {
  local name=$1 start; shift
  mkdir "$tmp/$name"
  start=$EPOCHREALTIME
  (cd "$tmp/$name" && "$@") >"$tmp/$name.log" 2>&1 ||
    { echo "snakemake.sh: error: $name failed (its log: $tmp/$name.log)" >&2; tail -n 20 "$tmp/$name.log" >&2; exit 1; }
  awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}'
}
outputs() { find "$tmp/$1/out" -name '*.txt' | wc -l; }

n=100
a=$(wall local_snakemake snakemake -s "$tmp/Snakefile" --config n=$n rule_s="$rule_s" --cores "$(nproc)" -q)
r=$(wall local_rsub rsub workflow -s "$tmp/Snakefile" --config n=$n rule_s="$rule_s" -q)
echo "snakemake.sh: local: rsub ${r}s, snakemake ${a}s" >&2
[[ $(outputs local_snakemake) == "$n" && $(outputs local_rsub) == "$n" ]]
jq -n -c --argjson r "$r" --argjson a "$a" --argjson n $n --argjson s "$rule_s" --argjson c "$(nproc)" '
  { kind: "value", name: "snakemake_\($n)_rules_rsub_local_vs_snakemake_local",
    command: "rsub workflow (\($n) rules of \($s) s of CPU, 1 core each)",
    anchor: "snakemake --cores \($c) (its local executor)", unit: "ratio", runs: 1,
    rkit_value: $r, anchor_value: $a, value: ($r / $a), goal_max: 1.5, values_unit: "s" }'

n=50
r=$(wall slurm_rsub rsub workflow -s "$tmp/Snakefile" --config n=$n rule_s="$rule_s" \
  --default-resources "backend='slurm'" -q)
a=$(wall slurm_snakemake snakemake -s "$tmp/Snakefile" --config n=$n rule_s="$rule_s" --slurm -j 500 -q)
[[ $(outputs slurm_snakemake) == "$n" && $(outputs slurm_rsub) == "$n" ]]
jq -n -c --argjson r "$r" --argjson a "$a" --argjson n $n --argjson s "$rule_s" '
  { kind: "value", name: "snakemake_\($n)_rules_rsub_slurm_vs_snakemake_slurm",
    command: "rsub workflow --default-resources \"backend='"'"'slurm'"'"'\" (\($n) rules of \($s) s of CPU)",
    anchor: "snakemake --slurm -j 500 (Snakemake 7.21)", unit: "ratio", runs: 1,
    rkit_value: $r, anchor_value: $a, value: ($r / $a), goal_max: 0.2, values_unit: "s" }'
