#!/usr/bin/env bash
# `make demo`: the platform end to end on this machine, on the embedded defaults, showing
# what a researcher sees: the machine (rtop), what it can do (rbench run --quick), a
# 2-rank training job with checkpoints submitted to the scheduler (rsub submit, rsub wait),
# its newest checkpoint checked and listed (rckpt verify, rckpt ls), a research pipeline
# of Snakemake rules each run as an rsub job (rsub workflow, examples/pipeline), and what
# the session cost (rcost report over the job records and the samples rtop took
# meanwhile; the pipeline's cost per stage).
#
# Usage: examples/demo.sh [BUILD_DIR]      (make demo passes its build directory)
# Everything it writes lands in one directory, which it names at the start and the end:
# $RKIT_DEMO_DIR, else a new /tmp/rkit-demo.XXXXXX. The scheduler's daemon and store live
# there too (RKIT_STATE_DIR), with an empty configuration (RKIT_CONFIG), so the demo
# neither sees nor touches the user's own jobs; the daemon is stopped at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
for tool in rtop rsub rckpt rbench rtrain rcost; do
  [[ -x $build/tools/$tool/$tool ]] || { echo "demo: error: no $tool in $build/tools/$tool (build first: make)" >&2; exit 66; }
done
build=$(realpath "$build")
for dir in "$build"/tools/*/; do PATH="$dir:$PATH"; done
export PATH

demo=${RKIT_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/rkit-demo.XXXXXX")}
mkdir -p "$demo" 2>/dev/null || { echo "demo: error: cannot create the directory $demo" >&2; exit 74; }
demo=$(realpath "$demo")
[[ -z $(ls -A "$demo") ]] || { echo "demo: error: $demo is not empty (set RKIT_DEMO_DIR to a new directory)" >&2; exit 64; }
cd "$demo"
export RKIT_STATE_DIR=$demo/state RKIT_CONFIG=$demo/rkit.toml
: >"$RKIT_CONFIG"  # the embedded defaults, whatever ~/.config/rkit holds

if [[ -t 1 ]]; then bold=$'\e[1m' plain=$'\e[0m'; else bold='' plain=''; fi
note() { printf '\n%s# %s%s\n' "$bold" "$*" "$plain"; }
step() { printf '%s$ %s%s\n' "$bold" "$*" "$plain"; eval "$@"; }

sampler='' running=''
stop_all() {  # the training job (when interrupted), the sampler and the scheduler's daemon
  # The daemon signals the job at its next pass: waiting for the job to end before the
  # daemon is stopped keeps a cancel from being lost to that race.
  if [[ -n $running ]]; then
    rsub cancel "$running" >/dev/null 2>&1 && rsub wait --timeout 30s "$running" >/dev/null 2>&1 || true
    running=''
  fi
  if [[ -n $sampler ]]; then
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    sampler=''
  fi
  local pid_file=$RKIT_STATE_DIR/rsub/daemon.pid pid i
  if [[ -s $pid_file ]]; then
    pid=$(<"$pid_file")
    kill "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  fi
  return 0
}
trap stop_all EXIT

printf '%sdemo: files in %s%s\n' "$bold" "$demo" "$plain"

note "The machine: sockets, cores, caches, memory, GPUs and NICs (rtop)"
step "rtop"

note "What it can do: every CPU benchmark at quick sizes, each result checked (rbench)"
step "rbench -q run --quick -o bench.jsonl"

note "Usage samples every second while the job runs, for the cost report (rtop sample)"
step "rtop sample --interval 1s --json > samples.jsonl &"
sampler=$!

note "A 2-rank data-parallel training run with checkpoints, submitted to the scheduler (rsub, rtrain)"
step "job=\$(rsub submit --name train --project demo --cpus-per-task 2 -- \\
  rtrain launch --nproc-per-node 2 --master-port 0 --ckpt-dir ckpt -- \\
  rtrain run --steps 300 --rows 20000 --ckpt-every 100 --log-every 100 --eval-every 150)"
echo "$job"
running=$job  # until it ends: an interrupted demo cancels it
step "rsub wait $job"
running=''
step "rsub logs $job | tail -n 8"
step "rsub ls --all"

note "Its newest checkpoint: every frame's checksum checked, then its contents (rckpt)"
newest=$(ls -t ckpt/*.rkpt | head -n 1)
step "rckpt verify $newest"
step "rckpt ls $newest"

note "A research pipeline: 29 Snakemake rules, each an rsub job (rsub workflow, examples/pipeline)"
mkdir pipeline
step "(cd pipeline && rsub workflow -s '$root/examples/pipeline/Snakefile' --quiet all)"
step "cat pipeline/report.txt"
step "rsub ls --all --workflow pipeline | head -n 4"

note "What the session cost, from the job records and the samples (rcost)"
stop_all
cp "$root/examples/prices.toml" prices.toml  # list prices and on-premises costs (rcost(1), PRICE SHEET)
step "rsub ls --all --json | rcost --prices prices.toml report - samples.jsonl"
note "The pipeline's cost per stage"
step "rsub ls --all --json --workflow pipeline | rcost --prices prices.toml report --by workflow,rule -"
note "The same in JSON: seconds on a small machine cost fractions of a cent"
step "rsub ls --all --json | rcost --prices prices.toml report --json - samples.jsonl |
  jq -c 'select(.schema == \"rkit.cost.v1\") | {tenant, jobs, core_hours, cost, waste_cost, total_cost, currency}'"
note "What the benchmarks' results cost per unit of work on this machine (rcost perf)"
step "jq -c 'select(.metric == \"sgemm\" or .metric == \"triad\" or .suite == \"train.mlp\")' bench.jsonl |
  rcost --prices prices.toml perf -"

printf '\n%sdemo: ok; files in %s%s\n' "$bold" "$demo" "$plain"
