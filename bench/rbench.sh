#!/usr/bin/env bash
# rbench's fidelity against the reference tools, and the time of a quick run.
#   - cpu.stream triad against likwid-bench's stream kernel (A = B*c + C, the same bytes
#     counted, 1e6-byte MB) at the same thread count and the same total array size,
#     both as bytes over total time;
#   - io.seq against fio with the same pattern: one file, sequential, queue depth 1,
#     O_DIRECT, each write pass ending in fsync (fio --end_fsync=1), per block size;
#   - `rbench run --quick` over every suite that can run (the CPU ones here), which must
#     finish within 60 s.
# The two sides run PAIRS times back to back (default 10; which goes first alternates): this
# VM's memory and disk speeds drift by tens of per cent between minutes, so a row compares
# pairs, and going first can favour either side, so its value is the geometric mean of the
# median ratio over the pairs where rbench went first and that where the anchor went first
# (pair_ratio_orders in bench/lib/stats.sh). Fidelity rows pass when
# the ratio is within the tolerance the issue sets (±5% for stream, ±10% for I/O).
# RKIT_BENCH_IO_DIR: where I/O runs (default /var/tmp: a real disk, not tmpfs).
set -euo pipefail
rbench=$RKIT_BUILD_DIR/tools/rbench/rbench
pairs=${PAIRS:-10}
((pairs >= 2)) || { echo "rbench.sh: error: PAIRS must be 2 or more (one pair of each order)" >&2; exit 64; }
io_dir=${RKIT_BENCH_IO_DIR:-/var/tmp}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; rm -f "$io_dir"/rkit-bench-fio.$$' EXIT
source "$(dirname "$0")/lib/stats.sh"

# row name rkit-values-file anchor-values-file command anchor goal_min goal_max
# The value is that geometric mean; rkit_value and anchor_value are the sides' medians, and
# ratio_rkit_first and ratio_anchor_first the two orders' median ratios.
row() {
  local orders r a
  orders=$(pair_ratio_orders "$2" "$3") && r=$(median <"$2") && a=$(median <"$3") ||
    { echo "rbench.sh: $1: no measurement to compare" >&2; exit 1; }
  jq -n -c --arg name "$1" --arg cmd "$4" --arg anchor "$5" --argjson r "$r" --argjson a "$a" \
    --argjson o1 "${orders% *}" --argjson o2 "${orders#* }" \
    --argjson lo "$6" --argjson hi "$7" --argjson n "$pairs" '
    { kind: "value", name: $name, command: $cmd, anchor: $anchor, unit: "ratio", runs: $n,
      rkit_value: $r, anchor_value: $a, value: ($o1 * $o2 | sqrt), goal_min: $lo, goal_max: $hi,
      ratio_rkit_first: $o1, ratio_anchor_first: $o2 }'
}

# --- cpu.stream triad vs likwid-bench --------------------------------------------------
threads=$(nproc)
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
kernel=stream_sse
[[ $flags == *" avx2 "* && $flags == *" fma "* ]] && kernel=stream_avx_fma
# likwid-bench reports all its iterations' bytes over their total time; rbench's samples
# (one pass each) are put the same way: their harmonic mean.
stream_rkit() {
  "$rbench" -q run cpu.stream --threads "$threads" --reps 20 --json |
    jq -r 'select(.metric == "triad") | (.samples | length) / (.samples | map(1 / .) | add)' >> "$tmp/stream.rkit"
}
stream_likwid() {  # likwid's size is the three arrays together; "kB" is 1000 bytes
  likwid-bench -t "$kernel" -w "S0:$((3 * array_bytes / 1000))kB:$threads" 2>/dev/null |
    awk '/^MByte\/s:/ {print $2 / 1000}' >> "$tmp/stream.likwid"
}
array_bytes=$("$rbench" -q run cpu.stream --reps 1 --warmup 0 --json | jq -r 'select(.metric == "triad") | .params.array_bytes')
for ((i = 0; i < pairs; i++)); do  # which side goes first alternates
  if ((i % 2 == 0)); then stream_rkit; stream_likwid; else stream_likwid; stream_rkit; fi
done
row cpu.stream_triad_vs_likwid "$tmp/stream.rkit" "$tmp/stream.likwid" \
  "rbench run cpu.stream --threads $threads --reps 20 (harmonic mean of the triad samples)" \
  "likwid-bench -t $kernel -w S0:<3 x array bytes>:$threads" 0.95 1.05

# --- io.seq vs fio ----------------------------------------------------------------------
fio_file=$io_dir/rkit-bench-fio.$$
fio_run() {  # rw bs: one fio pass over the 1 GiB file (the first creates it), prints MB/s
  fio --name=rkit --filename="$fio_file" --rw="$1" --bs="$2" --size=1G --direct=1 --ioengine=psync \
    --iodepth=1 --end_fsync=1 --output-format=json 2>/dev/null | jq --arg rw "$1" '.jobs[0][$rw].bw_bytes / 1e6'
}
# Both sides make the same passes over the file per block size: one untimed write and read
# (rbench's warm-up), then io_reps timed ones; each side's median of those is one sample.
io_reps=3
io_rkit() {  # block: one rbench io.seq run at that block size, its medians appended
  RKIT_BENCH_IO_BLOCKS=$1 "$rbench" -q run io.seq --dir "$io_dir" --reps "$io_reps" --warmup 1 --json > "$tmp/io.jsonl"
  jq -r '"\(.metric) \(.params.block_bytes) \(.median)"' "$tmp/io.jsonl" |
    while read -r metric block value; do echo "$value" >> "$tmp/io.rkit.$metric.$block"; done
}
io_fio() {  # block: the same passes with fio, their medians appended
  local block=$1 bs=$(($1 / 1024))k
  fio_run write "$bs" > /dev/null
  fio_run read "$bs" > /dev/null
  : > "$tmp/fio.write" && : > "$tmp/fio.read"
  for ((r = 0; r < io_reps; r++)); do
    fio_run write "$bs" >> "$tmp/fio.write"
    fio_run read "$bs" >> "$tmp/fio.read"
  done
  for rw in write read; do median < "$tmp/fio.$rw" >> "$tmp/io.fio.$rw.$block"; done
  rm -f "$fio_file"
}
# A pair is one block size of each side back to back (the disk's speed drifts over
# minutes on these VMs), the side that goes first alternating.
for ((i = 0; i < pairs; i++)); do
  for block in 65536 1048576 4194304; do
    if ((i % 2 == 0)); then io_rkit "$block"; io_fio "$block"; else io_fio "$block"; io_rkit "$block"; fi
  done
done
for block in 65536 1048576 4194304; do
  for rw in write read; do
    row "io.seq_${rw}_$((block / 1024))k_vs_fio" "$tmp/io.rkit.$rw.$block" "$tmp/io.fio.$rw.$block" \
      "RKIT_BENCH_IO_BLOCKS=$((block / 1024))K rbench run io.seq --dir $io_dir --reps $io_reps --warmup 1" \
      "fio --rw=$rw --bs=$((block / 1024))k --size=1G --direct=1 --ioengine=psync --end_fsync=1, 1 warm-up + median of $io_reps" 0.90 1.10
  done
done

# --- a quick run of every CPU suite ------------------------------------------------------
# GPU suites are unavailable here and skipped; on a GPU machine they are not CPU suites.
start=$(date +%s%N)
"$rbench" -q run --quick --json > /dev/null
secs=$(awk -v ns="$(($(date +%s%N) - start))" 'BEGIN {print ns / 1e9}')
jq -n -c --argjson s "$secs" '{ kind: "value", name: "rbench_quick_cpu_run", command: "rbench run --quick",
  anchor: "the issue'"'"'s limit", unit: "s", value: $s, goal_max: 60 }'
