#!/usr/bin/env bash
# Checks that need a real NVIDIA GPU: build with CUDA, run the unit tests, compare
# rtop's NVML view with nvidia-smi's (count, names, UUIDs, bus ids, memory, the
# `nvidia-smi topo -m` link matrix, live utilisation/power), run the CUDA kernels
# against their CPU references (rkit_kernels_gpu_test), and run rbench's GPU suites
# (every record correct, rkit's SGEMM within reach of cuBLAS, peaks plausible), and
# train with rtrain run --device cuda against its CPU loss curve. Prints
# one line per check and "gpu-check: N passed, N failed"; exits 69 when no GPU is visible.
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

# The CUDA kernels against their CPU references (not in ctest: it needs the GPU).
check "CUDA kernels equal their CPU references (rkit_kernels_gpu_test)" "$build/tests/unit/rkit_kernels_gpu_test"

# rbench's GPU suites. OWN_SGEMM_MIN_PERCENT: the least share of cuBLAS's fp32 speed
# that rkit's SGEMM must reach at 4096^3 (a 128x128x8 SIMT kernel; cuBLAS is ~1.5-2x).
rbench=$build/tools/rbench/rbench
min_percent=${OWN_SGEMM_MIN_PERCENT:-30}
check "rbench list: the four gpu suites are available (its plug-in rbench_gpu.so loads)" jq -e -s \
  '[.[] | select(.suite | startswith("gpu."))] | length == 4 and all(.available)' < <("$rbench" list --json)
installed=$(mktemp -d)
cmake --install "$build" --prefix "$installed" >/dev/null
check "installed rbench loads the plug-in from lib/rkit" jq -e -s \
  '[.[] | select(.suite | startswith("gpu."))] | length == 4 and all(.available)' < <("$installed/bin/rbench" list --json)
rm -rf "$installed"
bench_json=$(mktemp) bench_err=$(mktemp)
"$rbench" run gpu --quick --json >"$bench_json" 2>"$bench_err"
bench_rc=$?
check "rbench run gpu --quick exits 0" test "$bench_rc" -eq 0
[[ $bench_rc -eq 0 ]] || tail -5 "$bench_err"
check "gpu.copy, gpu.gemm, gpu.nccl and gpu.stream each report" jq -e -s \
  '[.[].suite] | unique == ["gpu.copy", "gpu.gemm", "gpu.nccl", "gpu.stream"]' "$bench_json"
check "every gpu record passed its own check" jq -e -s 'length > 0 and all(.correct)' "$bench_json"
jq -r -s '.[] | select(.correct | not) | "  wrong: \(.suite) \(.metric) \(.params | tostring): \(.check)"' "$bench_json"
check "gpu.gemm: cuBLAS fp32, tf32, fp16, bf16 and rkit's sgemm measured" jq -e -s \
  '[.[] | select(.suite == "gpu.gemm") | .metric] as $m
   | (["fp32", "tf32", "fp16", "bf16", "own_sgemm", "own_sgemm_of_cublas"] - $m) == []' "$bench_json"
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')  # "9.0"
if [[ "$cc" =~ ^[0-9]+\.[0-9]$ && ${cc/./} -ge 89 ]]; then
  check "gpu.gemm: fp8 measured (compute capability $cc)" jq -e -s \
    'any(.[]; .suite == "gpu.gemm" and .metric == "fp8")' "$bench_json"
fi
jq -r -s '.[] | select(.metric == "own_sgemm_of_cublas")
          | "  rkit sgemm gpu\(.params.device) \(.params.m)^3: \(.median | floor)% of cuBLAS fp32"' "$bench_json"
check "rkit's sgemm reaches >= $min_percent% of cuBLAS fp32 at 4096^3" jq -e -s --argjson min "$min_percent" \
  '[.[] | select(.metric == "own_sgemm_of_cublas" and .params.m == 4096)] | length > 0 and all(.median >= $min)' \
  "$bench_json"
check "gpu.gemm and gpu.stream stay under their peaks (+5%)" jq -e -s \
  '[.[] | select((.suite == "gpu.gemm" or .suite == "gpu.stream") and .peak_fraction != null)]
   | all(.peak_fraction <= 1.05)' "$bench_json"
# Behind NVSwitches allreduce and reduce_scatter have no peak (NVLink SHARP can beat the links).
check "gpu.nccl and gpu.copy stay under their link peaks (+5%)" jq -e -s \
  '[.[] | select((.suite == "gpu.nccl" or .suite == "gpu.copy") and .peak_fraction != null)]
   | all(.peak_fraction <= 1.05)' "$bench_json"
check "gpu.stream has a peak (datasheet or memory clock)" jq -e -s \
  '[.[] | select(.suite == "gpu.stream")] | length > 0 and all(.peak != null)' "$bench_json"
# CUDA numbers GPUs fastest first, host.gpus (NVML) in PCI order: the bus ids tie them.
check "every gpu record names its GPUs by PCI bus ids that host.gpus lists" jq -e -s \
  'all(.[]; [.host.gpus[].pci_bus_id] as $known
      | [.params.device_bus_id, .params.from_bus_id, .params.to_bus_id, (.params.device_bus_ids // [])[]]
      | map(select(. != null)) | length > 0 and all(IN($known[])))' "$bench_json"
check "gpu.gemm: ab_bytes and c_bytes as each type stores A, B and C" jq -e -s \
  '[.[] | select(.suite == "gpu.gemm")] | length > 0 and all(.[]; .params as $p
   | {fp32: [4, 4], tf32: [4, 4], fp16: [2, 4], bf16: [2, 4], fp8: [1, 2], own_sgemm: [4, 4],
      own_sgemm_of_cublas: [4, 4]}[.metric] == [$p.ab_bytes, $p.c_bytes])' "$bench_json"
check "host fingerprint names the $n_smi GPU(s) and the driver" jq -e -s --argjson n "$n_smi" \
  'all(.[]; (.host.gpus | length) == $n and .host.gpu_driver != null)' "$bench_json"
rm -f "$bench_json" "$bench_err"

# rtrain run on the GPU (the plug-in rtrain_cuda.so: cuBLAS, rkit's mlp kernels, NCCL):
# it trains, its loss curve follows the CPU's (fp32 both; sums in other orders), and its
# samples/s are reported beside the CPU's. With 2+ GPUs, 2 ranks over NCCL follow too.
rtrain=$build/tools/rtrain/rtrain
train_dir=$(mktemp -d)
train_args=(--layers 256,1024,1024,1 --rows 60000 --steps 60 --warmup-steps 5 --log-every 1 --json -q)
"$rtrain" run "${train_args[@]}" --device cpu --events "$train_dir/cpu.jsonl" >/dev/null
"$rtrain" run "${train_args[@]}" --device cuda --events "$train_dir/cuda.jsonl" >/dev/null 2>"$train_dir/cuda.err"
check "rtrain run --device cuda runs" jq -e -s 'map(select(.event == "summary")) | length == 1' "$train_dir/cuda.jsonl"
[[ -s "$train_dir/cuda.err" ]] && head -3 "$train_dir/cuda.err"
check "rtrain run --device cuda: its loss curve follows the CPU's within 1e-3 relative" jq -e -n \
  --slurpfile a "$train_dir/cpu.jsonl" --slurpfile b "$train_dir/cuda.jsonl" '
  [$a[] | select(.event == "step") | .loss] as $x | [$b[] | select(.event == "step") | .loss] as $y
  | ($x | length) == 60 and ($y | length) == 60 and ([range(0; 60) | (($x[.] - $y[.]) / $x[.] | fabs)] | max) < 1e-3'
jq -r -s '.[] | select(.event == "summary") | "  rtrain run \(.device): \(.samples_per_s | floor) samples/s"' \
  "$train_dir/cpu.jsonl" "$train_dir/cuda.jsonl"
if ((n_smi >= 2)); then
  "$rtrain" launch --nproc-per-node 2 --master-port 0 -- "$rtrain" run "${train_args[@]}" --device cuda --batch-size 256 \
    --events "$train_dir/nccl.jsonl" >/dev/null 2>&1
  check "rtrain run --device cuda on 2 ranks (NCCL) follows 1 rank within 1e-3" jq -e -n \
    --slurpfile a "$train_dir/cuda.jsonl" --slurpfile b "$train_dir/nccl.jsonl" '
    [$a[] | select(.event == "step") | .loss] as $x | [$b[] | select(.event == "step") | .loss] as $y
    | ($y | length) == 60 and ([range(0; 60) | (($x[.] - $y[.]) / $x[.] | fabs)] | max) < 1e-3'
fi
# The strategies beyond data parallel on the GPU (NCCL through NcclComm): on one rank
# (NCCL's one-rank communicator, micro-batches for the pipeline's accumulation) and, with
# 2+ GPUs (NCCL takes one GPU a rank), on 2 ranks: each loss curve follows data
# parallel's on as many ranks within 1e-5 relative.
strategy_args=(--layers 256,512,512,512,1 --rows 20000 --steps 40 --batch-size 128 --log-every 1 --json -q --device cuda)
strategy_run() {  # NAME RANKS ARGS...: rtrain run on RANKS ranks, its events in $train_dir/NAME-RANKS.jsonl
  local name=$1 ranks=$2
  shift 2
  "$rtrain" launch --nproc-per-node "$ranks" --master-port 0 -- "$rtrain" run "${strategy_args[@]}" "$@" \
    --events "$train_dir/$name-$ranks.jsonl" >/dev/null 2>"$train_dir/$name-$ranks.err" || head -3 "$train_dir/$name-$ranks.err"
}
rank_counts=(1)
((n_smi >= 2)) && rank_counts+=(2)
for ranks in "${rank_counts[@]}"; do
  strategy_run dp "$ranks" --strategy dp
  for s in zero1 zero2 zero3 tp pp; do
    extra=()
    [[ $s == pp ]] && extra=(--micro-batches 4)
    strategy_run "$s" "$ranks" --strategy "$s" "${extra[@]}"
    check "rtrain run --device cuda --strategy $s on $ranks rank(s) follows dp within 1e-5" jq -e -n \
      --slurpfile a "$train_dir/dp-$ranks.jsonl" --slurpfile b "$train_dir/$s-$ranks.jsonl" '
      [$a[] | select(.event == "step") | .loss] as $x | [$b[] | select(.event == "step") | .loss] as $y
      | ($x | length) == 40 and ($y | length) == 40 and ([range(0; 40) | (($x[.] - $y[.]) / $x[.] | fabs)] | max) < 1e-5'
  done
done
rm -rf "$train_dir"

echo "gpu-check: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
