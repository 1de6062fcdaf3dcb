#!/usr/bin/env bats
# rtop end to end: records, counts against hwloc's own tools, placement, exit codes.
bats_require_minimum_version 1.5.0
load helpers

SYN="pack:2 numa:2 core:8 pu:2"

@test "rtop --json is one valid rkit.topology.v1 record" {
  run --separate-stderr rtop --json
  assert_success
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ]
  run jq -r .schema <<<"$output"
  assert_output "rkit.topology.v1"
}

@test "rtop --json core and thread counts equal hwloc-calc's" {
  json=$(rtop --json)
  [ "$(jq .core_count <<<"$json")" -eq "$(hwloc-calc --number-of core all)" ]
  [ "$(jq .pu_count <<<"$json")" -eq "$(hwloc-calc --number-of pu all)" ]
  [ "$(jq .numa_node_count <<<"$json")" -eq "$(hwloc-calc --number-of numa all)" ]
}

@test "rtop --synthetic counts equal hwloc-calc's on the same description" {
  json=$(rtop --synthetic "$SYN" --json)
  [ "$(jq .core_count <<<"$json")" -eq "$(hwloc-calc -i "$SYN" --number-of core all)" ]
  [ "$(jq .pu_count <<<"$json")" -eq "$(hwloc-calc -i "$SYN" --number-of pu all)" ]
  [ "$(jq .numa_node_count <<<"$json")" -eq 4 ]
}

@test "rtop --input reads an XML exported by lstopo from this machine" {
  xml="$BATS_TEST_TMPDIR/here.xml"
  lstopo-no-graphics --of xml "$xml"
  a=$(rtop --json | jq -c '{core_count, pu_count, numa_node_count, caches}')
  b=$(rtop --input "$xml" --json | jq -c '{core_count, pu_count, numa_node_count, caches}')
  assert_equal "$b" "$a"
  run jq -r .source < <(rtop --input "$xml" --json)
  assert_output xml
}

@test "rtop without flags prints a readable summary" {
  run rtop
  assert_success
  cores=$(hwloc-calc --number-of core all) pus=$(hwloc-calc --number-of pu all)
  assert_line --regexp '^host +[^ ]+ +\(live\)$'
  assert_line --regexp "^layout +[0-9]+ sockets?, [0-9]+ NUMA nodes?, $cores cores, $pus threads, [0-9.]+ [KMGT]iB memory$"
  assert_line --regexp '^caches +L1d [0-9.]+ [KM]iB ×[0-9]+'
  assert_line --regexp '^  node 0 +[0-9.]+ [KMGT]iB +cores [0-9,-]+ +cpus [0-9,-]+$'
  refute_output --partial '{'
  run rtop --input "$FIXTURES/dgx_like.xml"
  assert_line 'layout    2 sockets, 2 NUMA nodes, 16 cores, 32 threads, 256 GiB memory'
  assert_line --regexp '^  GPU4 +NVIDIA .*\(NUMA 1, 0000:84:00.0\)$'
  assert_line --regexp '^  mlx5_3 +infiniband +\(NUMA 1, 0000:85:00.0\)  netdev ib3$'
  assert_line --regexp '^  nvme0n1 +1.75 TiB +\(NUMA 0, 0000:21:00.0\)$'
}

@test "--input - reads the XML from stdin; empty --input or --synthetic is a usage error" {
  a=$(rtop --input "$FIXTURES/dgx_like.xml" --json | jq -c '{core_count, gpus: (.gpus | length), nics: (.nics | length)}')
  b=$(rtop --input - --json < "$FIXTURES/dgx_like.xml" | jq -c '{core_count, gpus: (.gpus | length), nics: (.nics | length)}')
  assert_equal "$b" "$a"
  assert_equal "$a" '{"core_count":16,"gpus":5,"nics":4}'
  run --separate-stderr rtop --input ""
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop --synthetic ""
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop --input /dev/zero
  assert_failure 65
  assert_one_line_stderr
  run --separate-stderr rtop --input "$FIXTURES"
  assert_failure 66
  assert_one_line_stderr
}

@test "place on a server with 3 GPUs on one node: GPU ranks go where their cores are free" {
  out=$(rtop --input "$FIXTURES/dgx_like.xml" place --ranks 4 --gpus-per-rank 1 --cpus-per-rank 4 --json)
  [ "$(jq -s 'map(select(.numa_local == true)) | length' <<<"$out")" -eq 4 ]
  assert_equal "$(jq -c -s 'map(.gpus[0])' <<<"$out")" "[0,1,3,4]"
  assert_equal "$(jq -c -s 'map(.nic)' <<<"$out")" '["mlx5_0","mlx5_0","mlx5_3","mlx5_3"]'
}

@test "place: four disjoint core sets, each inside one NUMA node" {
  out=$(rtop --synthetic "$SYN" place --ranks 4 --cpus-per-rank 4 --json)
  [ "$(wc -l <<<"$out")" -eq 4 ]
  # every record is a placement with 4 cores
  [ "$(jq -s 'map(select(.schema == "rkit.placement.v1" and (.cores | length) == 4)) | length' <<<"$out")" -eq 4 ]
  # disjoint: 16 distinct cores and 32 distinct PUs
  [ "$(jq -s '[.[].cores[]] | unique | length' <<<"$out")" -eq 16 ]
  [ "$(jq -s '[.[].pus[]] | unique | length' <<<"$out")" -eq 32 ]
  # each rank's cores are inside its NUMA node, checked against the topology record
  topo=$(rtop --synthetic "$SYN" --json)
  bad=$(jq -n --argjson t "$topo" '[inputs] | map(. as $p | ($t.numa_nodes[] | select(.os_index == $p.numa_node) | .cores) as $nc
          | select($p.numa_node == null or ($p.cores - $nc | length) > 0)) | length' <<<"$out")
  [ "$bad" -eq 0 ]
}

@test "place with a 4-GPU fixture: each rank's cores sit on its GPU's NUMA node" {
  out=$(rtop --synthetic "$SYN" --gpus "$FIXTURES/gpus4.json" place --ranks 4 --cpus-per-rank 4 --gpus-per-rank 1 --json)
  topo=$(rtop --synthetic "$SYN" --gpus "$FIXTURES/gpus4.json" --json)
  [ "$(jq -s '[.[].gpus[]] | unique | length' <<<"$out")" -eq 4 ]
  bad=$(jq -n --argjson t "$topo" '[inputs] | map(. as $p | $t.gpus[$p.gpus[0]].numa_node as $gn
          | ($t.cores | map(select(.index as $i | $p.cores | index($i))) | map(.numa_node) | unique) as $cn
          | select($cn != [$gn] or $p.numa_local != true)) | length' <<<"$out")
  [ "$bad" -eq 0 ]
}

@test "place --policy spread puts consecutive ranks on different NUMA nodes" {
  out=$(rtop --synthetic "$SYN" place --ranks 4 --cpus-per-rank 2 --policy spread --json)
  [ "$(jq -s '[.[].numa_node] | unique | length' <<<"$out")" -eq 4 ]
  out=$(rtop --synthetic "$SYN" place --ranks 4 --cpus-per-rank 2 --policy pack --json)
  [ "$(jq -s '[.[].numa_node] | unique | length' <<<"$out")" -eq 1 ]
}

@test "place output pipes into jq as CSV and as a table" {
  run rtop --synthetic "$SYN" place --ranks 2 --csv
  assert_success
  assert_line --index 0 "RANK,NUMA,CORES,CPUS,GPUS,NIC,LOCAL"
  run rtop --synthetic "$SYN" place --ranks 2
  assert_line --index 0 --regexp '^RANK +NUMA +CORES +CPUS'
}

@test "an impossible placement exits 65 and says what is short" {
  run --separate-stderr rtop --synthetic "$SYN" place --ranks 8 --cpus-per-rank 8
  assert_failure 65
  assert_one_line_stderr
  [[ "$stderr" == "rtop: error: not enough cores: 8 ranks × 8 cores need 64, the topology has 32" ]]
  run --separate-stderr rtop --synthetic "$SYN" place --ranks 2 --gpus-per-rank 1
  assert_failure 65
  [[ "$stderr" == *"not enough GPUs"* ]]
}

@test "a bad flag exits 64 with one line on stderr" {
  run --separate-stderr rtop --bogus
  assert_failure 64
  assert_one_line_stderr
  [[ "$stderr" == "rtop: error: "* ]]
  [ -z "$output" ]
  run --separate-stderr rtop place --ranks notanumber
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop place
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop place --ranks 2 --policy sideways
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop --synthetic "pack:zero"
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop --json --csv
  assert_failure 64
  assert_one_line_stderr
}

@test "a malformed GPU fixture exits 65 with one line on stderr" {
  for f in "$FIXTURES"/gpus_bad_*.json; do
    run --separate-stderr rtop --synthetic "$SYN" --gpus "$f" --json
    assert_failure 65
    assert_one_line_stderr
    [[ "$stderr" == "rtop: error: $f"* ]]
    [ -z "$output" ]
  done
}

@test "a truncated fixture or XML exits 65; a missing one exits 66" {
  head -c 40 "$FIXTURES/gpus4.json" > "$BATS_TEST_TMPDIR/cut.json"
  run --separate-stderr rtop --synthetic "$SYN" --gpus "$BATS_TEST_TMPDIR/cut.json"
  assert_failure 65
  assert_one_line_stderr
  lstopo-no-graphics --of xml "$BATS_TEST_TMPDIR/full.xml"
  head -c 300 "$BATS_TEST_TMPDIR/full.xml" > "$BATS_TEST_TMPDIR/cut.xml"
  run --separate-stderr rtop --input "$BATS_TEST_TMPDIR/cut.xml"
  assert_failure 65
  assert_one_line_stderr
  run --separate-stderr rtop --input /nonexistent/topo.xml
  assert_failure 66
  assert_one_line_stderr
  run --separate-stderr rtop --gpus /nonexistent/gpus.json
  assert_failure 66
  assert_one_line_stderr
}

@test "an unknown fixture schema major version exits 65 naming the version" {
  sed 's/rkit.gpu_fixture.v1/rkit.gpu_fixture.v7/' "$FIXTURES/gpus4.json" > "$BATS_TEST_TMPDIR/v7.json"
  run --separate-stderr rtop --synthetic "$SYN" --gpus "$BATS_TEST_TMPDIR/v7.json"
  assert_failure 65
  [[ "$stderr" == *"rkit.gpu_fixture.v7"* ]]
}

@test "rtop matrix on a fixture machine prints nvidia-smi's layout" {
  run rtop --synthetic "$SYN" --gpus "$FIXTURES/gpus4.json" matrix
  assert_success
  assert_line --index 0 --regexp '^ +GPU0 +GPU1 +GPU2 +GPU3 +CPU Affinity +NUMA Affinity'
  assert_line --regexp '^GPU0 +X +NV'
  assert_output --partial 'Legend:'
  run jq -r .schema < <(rtop --synthetic "$SYN" --gpus "$FIXTURES/gpus4.json" matrix --json)
  assert_output rkit.link_matrix.v1
}

@test "rtop sample prints the requested number of rkit.sample.v1 records" {
  run --separate-stderr rtop sample --count 2 --interval 100ms --json
  assert_success
  [ "${#lines[@]}" -eq 2 ]
  for l in "${lines[@]}"; do
    jq -e '.schema == "rkit.sample.v1" and (.cpu_util >= 0 and .cpu_util <= 1)
           and (.cpu_util_per_cpu | length) >= 1 and .memory_total_bytes > 0' <<<"$l" >/dev/null
    # The machine, named as rkit.job.v1's host names it, so that samples join with jobs.
    assert_equal "$(jq -r .host <<<"$l")" "$(uname -n)"
  done
  run --separate-stderr rtop sample --count 1 --interval 0s
  assert_failure 64
  run --separate-stderr rtop sample --count 1 --interval soon
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop --synthetic "$SYN" sample --count 1
  assert_failure 64
}

@test "--help goes to stdout and exits 0; --version names tool, version and revision" {
  run --separate-stderr rtop --help
  assert_success
  assert_output --partial 'place'
  [ -z "$stderr" ]
  run rtop place --help
  assert_success
  assert_output --partial '--ranks'
  run rtop --version
  assert_success
  assert_output --regexp '^rtop [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]+|unknown)\)$'
}

@test "a bad configuration file exits 78 naming file:line:column" {
  printf '[rtop]\npolicy = = "pack"\n' > "$BATS_TEST_TMPDIR/bad.toml"
  run --separate-stderr rtop --config "$BATS_TEST_TMPDIR/bad.toml" --synthetic "$SYN" place --ranks 2
  assert_failure 78
  assert_one_line_stderr
  [[ "$stderr" == *"bad.toml:2:"* ]]
  printf '[rtop]\npolicy = "spread"\n' > "$BATS_TEST_TMPDIR/good.toml"
  run rtop --config "$BATS_TEST_TMPDIR/good.toml" --synthetic "$SYN" place --ranks 4 --cpus-per-rank 2 --json
  assert_success
  [ "$(jq -s '[.[].numa_node] | unique | length' <<<"$output")" -eq 4 ]
  RKIT_CONFIG="$BATS_TEST_TMPDIR/good.toml" run rtop --synthetic "$SYN" place --ranks 4 --cpus-per-rank 2 --json
  [ "$(jq -s '[.[].numa_node] | unique | length' <<<"$output")" -eq 4 ]
  run --separate-stderr rtop --config /nonexistent.toml --synthetic "$SYN" place --ranks 2
  assert_failure 66
}

@test "output that cannot be written exits 74 with one line; a closed pipe ends sampling" {
  run --separate-stderr rtop --json
  good=$output
  run --separate-stderr bash -c 'rtop --json > /dev/full'
  assert_failure 74
  assert_one_line_stderr
  [[ "$stderr" == "rtop: error: write stdout: No space left on device" ]]
  run --separate-stderr bash -c 'rtop --synthetic "pack:2 core:4 pu:1" place --ranks 2 > /dev/full'
  assert_failure 74
  run --separate-stderr bash -c 'rtop --help > /dev/full'
  assert_failure 74
  # With SIGPIPE ignored (as some supervisors leave it), an endless sample stops at
  # the first write after its reader is gone, with exit 74, instead of running on.
  run --separate-stderr timeout 20 bash -c 'trap "" PIPE; set -o pipefail; rtop sample --interval 50ms --json | head -n 1'
  assert_failure 74
  assert_one_line_stderr
  [[ "$stderr" == "rtop: error: write stdout: Broken pipe" ]]
  assert_equal "$(jq -r .schema <<<"$output")" rkit.sample.v1
  # And so without: rtop ignores SIGPIPE itself (rkit(7), EXIT STATUS).
  run --separate-stderr timeout 20 bash -c 'set -o pipefail; rtop sample --interval 50ms --json | head -n 1'
  assert_failure 74
  [[ "$stderr" == "rtop: error: write stdout: Broken pipe" ]]
}

@test "the configuration is read by every command: missing --config 66, broken 78" {
  run --separate-stderr rtop --config /nonexistent.toml --json
  assert_failure 66
  assert_one_line_stderr
  printf 'x = \n' > "$BATS_TEST_TMPDIR/broken.toml"
  RKIT_CONFIG="$BATS_TEST_TMPDIR/broken.toml" run --separate-stderr rtop sample --count 1 --interval 10ms
  assert_failure 78
  [[ "$stderr" == *"broken.toml:1:"* ]]
  printf '[rtop]\npolicy = "sideways"\n' > "$BATS_TEST_TMPDIR/policy.toml"
  run --separate-stderr rtop --config "$BATS_TEST_TMPDIR/policy.toml" --synthetic "$SYN" place --ranks 2
  assert_failure 78
  [[ "$stderr" == *"policy.toml:2:10: rtop.policy is 'sideways'"* ]]
}

@test "sample: intervals beyond 1d are refused; CSV cells are flat values" {
  run --separate-stderr rtop sample --count 1 --interval 2d
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop sample --count 1 --interval 10ms --csv
  assert_success
  assert_line --index 0 "TIME,CPU,MEM_USED,MEM_TOTAL,LOAD1,GPU_UTIL,GPU_POWER"
  assert_line --index 1 --regexp '^[0-9.]+,[0-9.e-]+,[0-9]+,[0-9]+,[0-9.]+,,$'
}

@test "matrix --csv has a row and a column per device; the summary has no CSV form" {
  run rtop --input "$FIXTURES/dgx_like.xml" matrix --csv
  assert_success
  assert_line --index 0 "device,GPU0,GPU1,GPU2,GPU3,GPU4,NIC0,NIC1,NIC2,NIC3,cpu_affinity,numa_affinity"
  assert_line --index 1 "GPU0,X,PIX,PXB,SYS,SYS,PXB,PHB,NODE,SYS,0-15,0"
  [ "${#lines[@]}" -eq 10 ]
  run --separate-stderr rtop --csv
  assert_failure 64
  assert_one_line_stderr
}

@test "odd topologies: cores without a NUMA node, shared PUs, HBM nodes" {
  out=$(rtop --input "$FIXTURES/numa_missing.xml" place --ranks 4 --json)
  assert_equal "$(jq -s -c 'map(.cores | length)' <<<"$out")" "[1,1,1,1]"
  assert_equal "$(jq -s '[.[].cores[]] | unique | length' <<<"$out")" 4
  run --separate-stderr rtop --input "$FIXTURES/shared_pus.xml"
  assert_failure 65
  assert_one_line_stderr
  [[ "$stderr" == *"shared_pus.xml: core 1 shares hardware threads with another core" ]]
  out=$(rtop --input "$FIXTURES/hbm.xml" --gpus "$FIXTURES/gpus_hbm.json" place --ranks 2 --gpus-per-rank 1 --cpus-per-rank 2 --json)
  assert_equal "$(jq -s -c 'map([.numa_node, .numa_local])' <<<"$out")" "[[1,true],[3,true]]"
}

@test "inputs too large or ambiguous are refused with one line" {
  run --separate-stderr rtop --synthetic "pack:99999 core:99999 pu:99999"
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop --input "$FIXTURES/dgx_like.xml" --gpus "$FIXTURES/gpus_bad_bus_id_duplicate.json"
  assert_failure 65
  [[ "$stderr" == *"pci_bus_id 0000:05:00.0 is also GPU 0's"* ]]
  run --separate-stderr rtop --gpus ""
  assert_failure 64
  run --separate-stderr rtop --config ""
  assert_failure 64
  run --separate-stderr bash -c 'echo "{}" | rtop --input - --gpus -'
  assert_failure 64
  assert_one_line_stderr
  # output beyond stdio's buffer still reports why it was lost
  run --separate-stderr bash -c 'rtop --synthetic "pack:16 core:64 pu:4" --json > /dev/full'
  assert_failure 74
  [[ "$stderr" == "rtop: error: write stdout: No space left on device" ]]
}
