#!/usr/bin/env bash
# `make demo`: the main job end to end on this machine, with the embedded defaults.
# Today that is rtop: probe this machine, plan rank placement, read a real server's
# topology, and sample live usage. Later tools join this script as they land.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
for dir in "$build"/tools/*/; do PATH="$dir:$PATH"; done
export PATH
server=tests/fixtures/dgx_like.xml   # hwloc XML of a 2-socket, 5-GPU, 4-NIC server

if [[ -t 1 ]]; then bold=$'\e[1m' plain=$'\e[0m'; else bold='' plain=''; fi
step() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; eval "$@"; }

step "rtop"
step "rtop --json | jq -c '{core_count, pu_count, numa_node_count, gpus: (.gpus | length), nics: [.nics[].name]}'"
step "rtop place --ranks 2"
step "rtop --input $server matrix"
step "rtop --input $server place --ranks 4 --gpus-per-rank 1 --cpus-per-rank 4"
step "rtop --input $server place --ranks 4 --gpus-per-rank 1 --cpus-per-rank 4 --json | jq -c '{rank, cpuset, gpus, nic}'"
step "rtop sample --count 3 --interval 500ms"
printf '\n%sdemo: ok%s\n' "$bold" "$plain"
