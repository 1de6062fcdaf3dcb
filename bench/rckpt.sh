#!/usr/bin/env bash
# rckpt against what people use today: `tar | zstd -T0 -1` for packing and unpacking a
# checkpoint directory, and `zstd -dc | tar -xO` to get at one tensor. Prints JSON lines
# for bench/run.sh: timing rows (hyperfine medians) and value rows (sizes, peak memory).
#
# Data: a generated ~1.1 GiB checkpoint (bench/make_checkpoint.py) and a copy with 10% of
# its tensors changed, kept in $RKIT_BENCH_DIR (default /dev/shm/rkit-bench, tmpfs, so
# the tools are measured rather than this machine's disk; $RKIT_BUILD_DIR/bench-data
# when /dev/shm is short of space). Generated once and reused while its stamp matches.
# Outputs are removed at exit; the input data is kept (rm -rf the directory to drop it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rckpt=$RKIT_BUILD_DIR/tools/rckpt/rckpt
[[ -x $rckpt ]] || { echo "rckpt.sh: $rckpt is not built" >&2; exit 1; }
RUNS=${RKIT_BENCH_RUNS:-10}
GiB=$((1 << 30))

free_bytes() { df -B1 --output=avail "$1" 2>/dev/null | tail -1 | tr -d ' '; }

# --- where the data lives -----------------------------------------------------------
gen_bytes=${RKIT_BENCH_BYTES:-$(( GiB + (16 << 20) ))}
stamp_text="make_checkpoint $(sha256sum "$here/make_checkpoint.py" | cut -c1-16) bytes=$gen_bytes"
if [[ -n ${RKIT_BENCH_DIR:-} ]]; then
  data=$RKIT_BENCH_DIR
else
  data=/dev/shm/rkit-bench
  need=$((6 * GiB))
  [[ -f $data/src/stamp && $(cat "$data/src/stamp") == "$stamp_text" ]] && need=$((4 * GiB))
  if [[ ! -d /dev/shm ]] || (( $(free_bytes /dev/shm || echo 0) < need )); then
    data=$RKIT_BUILD_DIR/bench-data
  fi
fi
src=$data/src
ckpt=$src/step-1000       # the checkpoint
next=$src/step-1001       # the next one: 10% of tensors changed
mkdir -p "$data"
if [[ ! -f $src/stamp || $(cat "$src/stamp") != "$stamp_text" ]]; then
  rm -rf "$src"
  mkdir -p "$src"
  t0=$(date +%s.%N)
  /usr/bin/python3 "$here/make_checkpoint.py" "$ckpt" --bytes "$gen_bytes"
  t1=$(date +%s.%N)
  /usr/bin/python3 "$here/make_checkpoint.py" --mutate "$ckpt" "$next" --fraction 0.1
  t2=$(date +%s.%N)
  echo "$stamp_text" > "$src/stamp"
  printf 'rckpt.sh: generated %s (%s bytes) in %.1f s, mutated copy in %.1f s\n' "$ckpt" \
    "$(du -sb "$ckpt" | cut -f1)" "$(jq -n "$t1 - $t0")" "$(jq -n "$t2 - $t1")" >&2
fi

out=$data/out
disk=$RKIT_BUILD_DIR/bench-disk
tmp=$(mktemp -d)
cleanup() { rm -rf "$out" "$disk" "$tmp"; }
trap cleanup EXIT
rm -rf "$out"
mkdir -p "$out"

X=$out/ckpt.rkpt            # rckpt's archive
Y=$out/ckpt.tar.zst         # the anchor's archive
tensor=layers.0.attn.wq     # [1024,1024] fp32: exactly 4 MiB

# --- helpers --------------------------------------------------------------------------
# hf NAME RUNS SHELL(none|bash) PREPARE COMMAND: hyperfine one command; result in $tmp/NAME.json
hf() {
  local name=$1 runs=$2 shell=$3 prepare=$4 cmd=$5
  local args=(--style none --warmup 1 --runs "$runs" --export-json "$tmp/$name.json")
  [[ $shell == none ]] && args+=(-N) || args+=(--shell "bash -o pipefail")
  [[ -n $prepare ]] && args+=(--prepare "$prepare")
  if ! hyperfine "${args[@]}" "$cmd" > "$tmp/$name.log" 2>&1; then
    echo "rckpt.sh: hyperfine failed for: $cmd" >&2
    cat "$tmp/$name.log" >&2
    return 1
  fi
}

# timing NAME GOAL_RATIO GOAL_MAX_S(or "") CMD ANCHOR: one timing row from hf results NAME.cmd, NAME.anchor
timing() {
  local name=$1 goal=$2 max=$3 cmd=$4 anchor=$5
  jq -n -c --arg name "$name" --arg cmd "$cmd" --arg anchor "$anchor" --argjson goal "$goal" \
     --argjson max "${max:-null}" --slurpfile c "$tmp/$name.cmd.json" --slurpfile a "$tmp/$name.anchor.json" '
    { name: $name, kind: "timing", command: $cmd, anchor: $anchor, runs: ($c[0].results[0].times | length),
      median_s: $c[0].results[0].median, stddev_s: $c[0].results[0].stddev,
      anchor_median_s: $a[0].results[0].median, anchor_stddev_s: $a[0].results[0].stddev,
      goal_ratio: $goal } + (if $max == null then {} else { goal_max_s: $max } end)'
}

# value NAME VALUE UNIT GOAL_MAX CMD ANCHOR RKIT_BYTES ANCHOR_BYTES [INFO_JSON]
value() {
  local info='{}'
  (( $# >= 9 )) && info=$9
  jq -n -c --arg name "$1" --argjson v "$2" --arg unit "$3" --argjson goal "$4" --arg cmd "$5" \
     --arg anchor "$6" --argjson rb "$7" --argjson ab "$8" --argjson info "$info" '
    { name: $name, kind: "value", command: $cmd, anchor: $anchor, value: $v, unit: $unit, goal_max: $goal,
      rkit_bytes: $rb, anchor_bytes: $ab } + $info'
}

size() { stat -c %s "$1"; }
ratio() { jq -n "$1 / $2 | . * 1e6 | round / 1e6"; }

# peak RSS in bytes of a command (of its largest process, for a pipeline)
rss() { /usr/bin/time -f %M -o "$tmp/rss" "$@" >/dev/null; echo $(( $(tail -1 "$tmp/rss") * 1024 )); }

parent=$(dirname "$ckpt")
base=$(basename "$ckpt")

# --- rckpt_pack --------------------------------------------------------------------------
cmd="$rckpt pack $ckpt -o $X -q"
anchor="tar -cf - -C $parent $base | zstd -T0 -1 -q -o $Y"
hf rckpt_pack.cmd "$RUNS" none "rm -f $X" "$cmd"
hf rckpt_pack.anchor "$RUNS" bash "rm -f $Y" "$anchor"
timing rckpt_pack 0.4 "" "$cmd" "$anchor"

# what one pack reports about itself (time_s, bytes_per_s), for the record
rm -f "$X" "$Y"
pack_json=$($rckpt pack "$ckpt" -o "$X" --json)
bash -o pipefail -c "$anchor"

# --- rckpt_pack_size ------------------------------------------------------------------------
xs=$(size "$X") ys=$(size "$Y")
value rckpt_pack_size "$(ratio "$xs" "$ys")" ratio 0.93 "$rckpt pack $ckpt -o $X" "$anchor" "$xs" "$ys" \
  "$(jq -c '{ rkit_pack: { time_s, bytes_per_s, raw_bytes, archive_bytes, frames, threads } }' <<< "$pack_json")"

# --- rckpt_unpack ---------------------------------------------------------------------------
U1=$out/unpack-rckpt U2=$out/unpack-tar
cmd="$rckpt unpack $X -C $U1 -q"
anchor="zstd -dc $Y | tar -xf - -C $U2"
hf rckpt_unpack.cmd "$RUNS" none "rm -rf $U1" "$cmd"
hf rckpt_unpack.anchor "$RUNS" bash "rm -rf $U2 && mkdir -p $U2" "$anchor"
timing rckpt_unpack 0.5 "" "$cmd" "$anchor"
# both must have given back the same bytes
diff -r "$ckpt" "$U1" >/dev/null || { echo "rckpt.sh: rckpt unpack differs from the input" >&2; exit 1; }
diff -r "$ckpt" "$U2/$base" >/dev/null || { echo "rckpt.sh: tar unpack differs from the input" >&2; exit 1; }
rm -rf "$U1" "$U2"

# --- rckpt_cat_4mib ---------------------------------------------------------------------------
cmd="$rckpt cat $X model.safetensors:$tensor > /dev/null"
anchor="zstd -dc $Y | tar -xOf - $base/model.safetensors > /dev/null"
hf rckpt_cat_4mib.cmd $((RUNS * 4)) bash "" "$cmd"
hf rckpt_cat_4mib.anchor "$RUNS" bash "" "$anchor"
timing rckpt_cat_4mib 1 0.05 "$cmd" "$anchor"
[[ $($rckpt cat "$X" "model.safetensors:$tensor" | wc -c) == 4194304 ]] ||
  { echo "rckpt.sh: rckpt cat did not give 4 MiB" >&2; exit 1; }

# --- peak memory ------------------------------------------------------------------------------
rm -f "$X" "$Y"
r_pack=$(rss "$rckpt" pack "$ckpt" -o "$X" -q)
a_pack=$(rss bash -o pipefail -c "tar -cf - -C $parent $base | zstd -T0 -1 -q -o $Y")
value rckpt_pack_rss "$r_pack" bytes 536870912 "$rckpt pack $ckpt -o $X -q" \
  "tar -cf - -C $parent $base | zstd -T0 -1 -q -o $Y" "$r_pack" "$a_pack"
rm -rf "$U1" "$U2" && mkdir -p "$U2"
r_unpack=$(rss "$rckpt" unpack "$X" -C "$U1" -q)
a_unpack=$(rss bash -o pipefail -c "zstd -dc $Y | tar -xf - -C $U2")
value rckpt_unpack_rss "$r_unpack" bytes 536870912 "$rckpt unpack $X -C $U1 -q" \
  "zstd -dc $Y | tar -xf - -C $U2" "$r_unpack" "$a_unpack"
rm -rf "$U1" "$U2"

# --- rckpt_incremental ------------------------------------------------------------------------
# The next checkpoint (10% of tensors changed) packed against this one, compared with
# packing it in full.
full=$out/next-full.rkpt inc=$out/next-inc.rkpt
$rckpt pack "$next" -o "$full" -q
inc_json=$($rckpt pack "$next" -o "$inc" --base "$X" --json)
fs=$(size "$full") is=$(size "$inc")
value rckpt_incremental "$(ratio "$is" "$fs")" ratio 0.15 "$rckpt pack $next -o $inc --base $X" \
  "$rckpt pack $next -o $full" "$is" "$fs" \
  "$(jq -c '{ rkit_pack: { time_s, bytes_per_s, frames, base_frames } }' <<< "$inc_json")"
rm -f "$full" "$inc"

# --- rckpt_pack_durable (informational) -----------------------------------------------------
# Writing to this machine's disk, both durable: rckpt fsyncs its archive; the anchor syncs
# its output file. Input stays on tmpfs so only the write side touches the disk.
mkdir -p "$disk"
if (( $(free_bytes "$disk") > 3 * GiB )); then
  DX=$disk/ckpt.rkpt DY=$disk/ckpt.tar.zst
  cmd="$rckpt pack $ckpt -o $DX -q"
  anchor="tar -cf - -C $parent $base | zstd -T0 -1 -q -o $DY && sync $DY"
  hf rckpt_pack_durable.cmd "$RUNS" none "bash -c 'rm -f $DX; sync'" "$cmd"
  hf rckpt_pack_durable.anchor "$RUNS" bash "rm -f $DY; sync" "$anchor"
  timing rckpt_pack_durable 0.4 "" "$cmd" "$anchor" | jq -c '. + { informational: true }'
  rm -f "$DX" "$DY"
fi
