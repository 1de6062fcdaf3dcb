#!/usr/bin/env bash
# rtop's probe time against hwloc's own tool. Both load the same hwloc topology with
# I/O devices and write it out: rtop as its JSON record, lstopo as XML.
set -euo pipefail
rtop=$RKIT_BUILD_DIR/tools/rtop/rtop
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

compare() {  # name goal rkit-command anchor-command
  local name=$1 goal=$2 cmd=$3 anchor=$4
  hyperfine --style none --warmup 5 --runs 60 -N --export-json "$tmp/$name.json" "$cmd" "$anchor" >/dev/null 2>&1
  jq -c --arg name "$name" --arg cmd "$cmd" --arg anchor "$anchor" --argjson goal "$goal" '
    { name: $name, command: $cmd, anchor: $anchor, runs: .results[0].times | length,
      median_s: .results[0].median, stddev_s: .results[0].stddev,
      anchor_median_s: .results[1].median, anchor_stddev_s: .results[1].stddev, goal_ratio: $goal }' \
    "$tmp/$name.json"
}

compare rtop_probe_json 2 "$rtop --json" "lstopo-no-graphics --of xml"
compare rtop_probe_summary 2 "$rtop" "lstopo-no-graphics --of console"
