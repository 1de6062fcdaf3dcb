#!/usr/bin/env bash
# Checks that need a real NVIDIA GPU: build with CUDA, run the unit tests, and compare
# rtop's NVML view with nvidia-smi's (count, names, UUIDs, bus ids, memory, the
# `nvidia-smi topo -m` link matrix, live utilisation/power). Prints one line per check
# and "gpu-check: N passed, N failed"; exits 69 when no GPU is visible.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build-gpu}
passed=0 failed=0
check() {  # description command...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; passed=$((passed + 1)); else echo "FAIL $what"; failed=$((failed + 1)); fi
}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: error: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2
  exit 69
fi
nvidia-smi -L

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRKIT_CUDA=ON >/dev/null &&
  cmake --build "$build" -j "$(nproc)" >/dev/null || { echo "gpu-check: error: build failed" >&2; exit 70; }
rtop=$build/tools/rtop/rtop

check "unit tests pass (CUDA build)" ctest --test-dir "$build" --output-on-failure -j "$(nproc)"

topo=$("$rtop" --json)
smi=$(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv,noheader,nounits)
n_smi=$(wc -l <<<"$smi")
check "GPU count equals nvidia-smi ($n_smi)" test "$(jq '[.gpus[] | select(.source == "nvml")] | length' <<<"$topo")" -eq "$n_smi"
check "every GPU has a driver version" jq -e 'all(.gpus[]; .driver != null)' <<<"$topo"
for ((idx = 0; idx < n_smi; idx++)); do
  IFS=',' read -r _ _ uuid bus mem_mib < <(sed -n "$((idx + 1))p" <<<"$smi" | tr -d ' ')
  bus=$(tr 'A-F' 'a-f' <<<"${bus: -12}")
  check "GPU$idx uuid $uuid" jq -e --arg u "$uuid" --argjson i "$idx" '.gpus[$i].uuid == $u' <<<"$topo"
  check "GPU$idx bus id $bus" jq -e --arg b "$bus" --argjson i "$idx" '.gpus[$i].pci_bus_id == $b' <<<"$topo"
  check "GPU$idx memory $mem_mib MiB" jq -e --argjson m "$mem_mib" --argjson i "$idx" '(.gpus[$i].memory_bytes / 1048576 | floor) == $m' <<<"$topo"
  check "GPU$idx has a NUMA node" jq -e --argjson i "$idx" '.gpus[$i].numa_node != null' <<<"$topo"
done

# Link matrix: GPU×GPU entries of `nvidia-smi topo -m` against rtop's.
smi_links=$(nvidia-smi topo -m | awk -v n="$n_smi" '/^GPU[0-9]/ {row = ""; for (i = 2; i <= n + 1; i++) row = row $i " "; print row}')
rtop_links=$(jq -r '.gpu_links[] | join(" ") + " "' <<<"$topo")
check "GPU link matrix equals nvidia-smi topo -m" test "$smi_links" = "$rtop_links"
[[ "$smi_links" == "$rtop_links" ]] || { echo "nvidia-smi:"; echo "$smi_links"; echo "rtop:"; echo "$rtop_links"; }

sample=$("$rtop" sample --count 1 --interval 0.5s --json)
check "sample has util, memory and power per GPU" jq -e --argjson n "$n_smi" \
  '(.gpus | length) == $n and all(.gpus[]; .util != null and .memory_used_bytes != null and .power_w > 0)' <<<"$sample"
check "rtop matrix prints" "$rtop" matrix
check "placement uses the real GPUs" jq -e -s --argjson n "$n_smi" '[.[].gpus[]] | unique | length == $n' \
  < <("$rtop" place --ranks "$n_smi" --gpus-per-rank 1 --cpus-per-rank 1 --json)

echo "gpu-check: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
