#!/usr/bin/env bash
# `make demo`: the main job end to end on this machine, with the embedded defaults.
# Today: rtop probes this machine, plans rank placement, reads a real server's topology
# and samples live usage; rckpt packs a checkpoint, checks it, reads one tensor back,
# packs the next step incrementally and restores it. Later tools join as they land.
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

# A small checkpoint, written by an independent safetensors writer (numpy).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/step-100"
/usr/bin/python3 tests/fixtures/write_safetensors.py "$work/step-100/model.safetensors" --kind small
printf '{"step": 100}\n' > "$work/step-100/trainer_state.json"
cp -r "$work/step-100" "$work/step-200"
printf '{"step": 200}\n' > "$work/step-200/trainer_state.json"
cd "$work"
step "rckpt pack step-100 -o step-100.rkpt"
step "rckpt ls step-100.rkpt"
step "rckpt verify step-100.rkpt"
step "rckpt cat step-100.rkpt model.safetensors:\$(rckpt ls step-100.rkpt --tensors --json | jq -r 'select(.dtype == \"F32\" and .bytes > 0) | .tensor' | head -1) | od -A d -t f4 | head -2"
step "rckpt pack step-200 -o step-200.rkpt --base step-100.rkpt"
step "rckpt diff step-100.rkpt step-200.rkpt || true"
step "rckpt unpack step-200.rkpt -C restored && diff -r step-200 restored && echo restored: identical"
cd - >/dev/null
printf '\n%sdemo: ok%s\n' "$bold" "$plain"
