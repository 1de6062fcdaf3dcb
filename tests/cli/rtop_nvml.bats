#!/usr/bin/env bats
# rtop's NVML paths, run against a FAKE NVML (tests/fakes/fake_nvml.c): these machines
# have no GPU and no NVIDIA driver. The fake answers with GPUs named "FAKE NVML GPU n";
# RKIT_FAKE_NVML_* variables vary what it says (see the comment atop fake_nvml.c).
bats_require_minimum_version 1.5.0
load helpers

GIB80=85899345920

setup() {
  FAKE_NVML="$RKIT_BUILD_DIR/tests/fakes/libfake_nvml.so"
  [[ -f "$FAKE_NVML" ]] || fail "$FAKE_NVML is missing: build the fake_nvml target (tests on)"
  # the same fake without nvmlDeviceGetNvLinkRemoteDeviceType, as older drivers
  FAKE_NVML_OLD_DRIVER="$RKIT_BUILD_DIR/tests/fakes/libfake_nvml_old_driver.so"
  export RKIT_NVML_LIBRARY="$FAKE_NVML"
  unset RKIT_FAKE_NVML_GPUS RKIT_FAKE_NVML_FAIL_INIT RKIT_FAKE_NVML_DENY RKIT_FAKE_NVML_NVSWITCH \
    RKIT_FAKE_NVML_FAIL_LINKS
}

# The number of off-diagonal entries of a GPU link matrix that are not $2 (or diagonal
# entries that are not X), given the rtop --json record $1.
off_diagonal_not() {
  jq --arg want "$2" '.gpu_links as $m | ($m | length) as $n
    | [range(0; $n) as $i | range(0; $n) as $j
       | select($m[$i][$j] != (if $i == $j then "X" else $want end))] | length' <<<"$1"
}

# The number of GPUs NVML reported in a topology record.
nvml_gpus() { jq '[.gpus[] | select(.source == "nvml")] | length' <<<"$1"; }

@test "fake nvml: rtop --json lists the fake's 2 GPUs with their names, uuids, memory and driver" {
  run --separate-stderr rtop --json
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(jq '.gpus | length' <<<"$output")" 2
  assert_equal "$(nvml_gpus "$output")" 2
  assert_equal "$(jq -c '[.gpus[].index]' <<<"$output")" '[0,1]'
  assert_equal "$(jq -c '[.gpus[].name]' <<<"$output")" '["FAKE NVML GPU 0","FAKE NVML GPU 1"]'
  assert_equal "$(jq -c '[.gpus[].uuid]' <<<"$output")" '["GPU-fake-0000","GPU-fake-0001"]'
  assert_equal "$(jq -c '[.gpus[].memory_bytes]' <<<"$output")" "[$GIB80,$GIB80]"
  # NVML's "00000000:10:00.0" is normalised to hwloc's "0000:10:00.0"
  assert_equal "$(jq -c '[.gpus[].pci_bus_id]' <<<"$output")" '["0000:10:00.0","0000:11:00.0"]'
  assert_equal "$(jq -c '[.gpus[].driver] | unique' <<<"$output")" '["999.99-fake"]'
  assert_equal "$(jq -c '.nvml_error' <<<"$output")" null
}

@test "fake nvml: gpu_links has NV4 between the GPUs and X on the diagonal" {
  run --separate-stderr rtop --json
  assert_success
  assert_equal "$(jq -c .gpu_links <<<"$output")" '[["X","NV4"],["NV4","X"]]'
}

@test "fake nvml: GPUs whose bus id hwloc does not know have numa_node null and no cpus" {
  # The fake's bus ids are invented; on a machine where one exists the check is moot.
  for bus in 0000:10:00.0 0000:11:00.0; do
    [[ ! -e /sys/bus/pci/devices/$bus ]] || skip "this machine has a PCI device at $bus"
  done
  run --separate-stderr rtop --json
  assert_success
  assert_equal "$(jq -c '[.gpus[] | {numa_node, cpus}] | unique' <<<"$output")" '[{"numa_node":null,"cpus":[]}]'
  # the human summary says the NUMA node is unknown, and the matrix says N/A, as nvidia-smi does
  run --separate-stderr rtop
  assert_success
  assert_line --regexp '^  GPU0 +FAKE NVML GPU 0  80 GiB  \(NUMA \?, 0000:10:00\.0\)  driver 999\.99-fake$'
  assert_line --regexp '^  GPU1 +FAKE NVML GPU 1  80 GiB  \(NUMA \?, 0000:11:00\.0\)  driver 999\.99-fake$'
  run --separate-stderr rtop matrix
  assert_success
  assert_line --regexp '^GPU0 +X +NV4 .* +- +N/A$'
}

@test "fake nvml: RKIT_FAKE_NVML_GPUS=4 gives 4 GPUs, every pair NV4" {
  RKIT_FAKE_NVML_GPUS=4 run --separate-stderr rtop --json
  assert_success
  assert_equal "$(nvml_gpus "$output")" 4
  assert_equal "$(jq -c '[.gpus[].pci_bus_id]' <<<"$output")" \
    '["0000:10:00.0","0000:11:00.0","0000:12:00.0","0000:13:00.0"]'
  # X exactly on the diagonal, NV4 everywhere else
  bad=$(jq '.gpu_links as $m | [range(0; 4) as $i | range(0; 4) as $j
            | select($m[$i][$j] != (if $i == $j then "X" else "NV4" end))] | length' <<<"$output")
  assert_equal "$bad" 0
  assert_equal "$(jq '.gpu_links | length' <<<"$output")" 4
}

@test "fake nvml: a failing nvmlInit gives no NVML GPUs, exit 0 and the reason in nvml_error" {
  RKIT_FAKE_NVML_FAIL_INIT=1 run --separate-stderr rtop --json
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(nvml_gpus "$output")" 0
  assert_equal "$(jq -r .nvml_error <<<"$output")" "nvmlInit: Driver Not Loaded"
  # no PCI GPUs on these machines either, so no GPUs at all
  if ! lspci -d 10de: 2>/dev/null | grep -q .; then
    assert_equal "$(jq '.gpus | length' <<<"$output")" 0
    assert_equal "$(jq -c .gpu_links <<<"$output")" '[]'
  fi
}

@test "fake nvml: RKIT_NVML_LIBRARY naming a missing file gives no NVML GPUs and exit 0" {
  RKIT_NVML_LIBRARY="$BATS_TEST_TMPDIR/no-such-libnvml.so" run --separate-stderr rtop --json
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(nvml_gpus "$output")" 0
  run jq -r .nvml_error <<<"$output"
  assert_output --partial "no-such-libnvml.so"
  # the human summary still works
  RKIT_NVML_LIBRARY="$BATS_TEST_TMPDIR/no-such-libnvml.so" run --separate-stderr rtop
  assert_success
  assert_line --regexp '^layout '
}

@test "fake nvml: rtop --no-nvml --json has nvml_error null and no NVML GPUs" {
  run --separate-stderr rtop --no-nvml --json
  assert_success
  assert_equal "$(nvml_gpus "$output")" 0
  assert_equal "$(jq -c .nvml_error <<<"$output")" null
}

@test "fake nvml: rtop sample reports the fake's utilisation, memory and power" {
  run --separate-stderr rtop sample --count 1 --interval 0.1s --json
  assert_success
  assert_equal "$(printf '%s\n' "$output" | wc -l)" 1
  assert_equal "$(jq -r .schema <<<"$output")" rkit.sample.v1
  assert_equal "$(jq '.gpus | length' <<<"$output")" 2
  assert_equal "$(jq -c '[.gpus[].index]' <<<"$output")" '[0,1]'
  assert_equal "$(jq -c '[.gpus[].util] | unique' <<<"$output")" '[0.37]'
  assert_equal "$(jq -c '[.gpus[].power_w] | unique' <<<"$output")" '[312.5]'
  assert_equal "$(jq -c '[.gpus[].memory_total_bytes] | unique' <<<"$output")" "[$GIB80]"
  assert_equal "$(jq -c '[.gpus[].memory_used_bytes] | unique' <<<"$output")" '[21474836480]'
  # the table shows the mean utilisation and the total power of the GPUs
  assert_equal "$(jq -c "[.gpu_util_mean, .gpu_power_w_total]" <<<"$output")" "[0.37,625]"
  run --separate-stderr rtop sample --count 1 --interval 0.1s
  assert_success
  assert_line --index 1 --regexp ' 37.0% +625 W$'
}

@test "fake nvml: rtop sample --no-nvml samples no GPUs" {
  run --separate-stderr rtop sample --no-nvml --count 1 --interval 0.1s --json
  assert_success
  assert_equal "$(jq '.gpus | length' <<<"$output")" 0
}

@test "fake nvml: rtop sample without NVML has an empty gpus array" {
  RKIT_NVML_LIBRARY="$BATS_TEST_TMPDIR/no-such-libnvml.so" run --separate-stderr rtop sample --count 1 --interval 0.1s --json
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(jq -c .gpus <<<"$output")" '[]'
  RKIT_FAKE_NVML_FAIL_INIT=1 run --separate-stderr rtop sample --count 1 --interval 0.1s --json
  assert_success
  assert_equal "$(jq -c .gpus <<<"$output")" '[]'
}

@test "fake nvml: rtop matrix shows GPU0 GPU1 joined by NV4" {
  run --separate-stderr rtop matrix
  assert_success
  assert_line --regexp '^ +GPU0 +GPU1 '
  assert_line --regexp '^GPU0 +X +NV4 '
  assert_line --regexp '^GPU1 +NV4 +X '
  assert_line --regexp 'NV# +='
}

@test "fake nvml: rtop matrix --json is one rkit.link_matrix.v1 record" {
  run --separate-stderr rtop matrix --json
  assert_success
  assert_equal "$(printf '%s\n' "$output" | wc -l)" 1
  assert_equal "$(jq -r .schema <<<"$output")" rkit.link_matrix.v1
  assert_equal "$(jq -c '[.devices[] | select(.kind == "gpu") | [.label, .name]]' <<<"$output")" \
    '[["GPU0","FAKE NVML GPU 0"],["GPU1","FAKE NVML GPU 1"]]'
  assert_equal "$(jq -c '.links[0][0:2], .links[1][0:2]' <<<"$output" | tr -d '\n')" '["X","NV4"]["NV4","X"]'
  # square: one row and one column per device
  assert_equal "$(jq '(.devices | length) as $n | ([.links[] | length] + [.links | length] | unique) == [$n]' <<<"$output")" true
}

@test "fake nvml: GPUs NVML refuses to open are left out and the rest numbered densely" {
  # as when a cgroup hides GPUs: nvmlDeviceGetCount_v2 counts them, the handle is refused
  RKIT_FAKE_NVML_GPUS=3 RKIT_FAKE_NVML_DENY=1 run --separate-stderr rtop --json
  assert_success
  assert_equal "$(jq -c '[.gpus[] | [.index, .name]]' <<<"$output")" '[[0,"FAKE NVML GPU 0"],[1,"FAKE NVML GPU 2"]]'
  assert_equal "$(jq -c .gpu_links <<<"$output")" '[["X","NV4"],["NV4","X"]]'
  assert_equal "$(jq -c .nvml_error <<<"$output")" null
  RKIT_FAKE_NVML_GPUS=3 RKIT_FAKE_NVML_DENY=1 run --separate-stderr rtop sample --count 1 --interval 0.1s --json
  assert_success
  assert_equal "$(jq -c '[.gpus[].index]' <<<"$output")" '[0,1]'
}

@test "fake nvml: when NVML refuses every GPU, nvml_error says why" {
  RKIT_FAKE_NVML_DENY=0,1 run --separate-stderr rtop --json
  assert_success
  assert_equal "$(nvml_gpus "$output")" 0
  run jq -r .nvml_error <<<"$output"
  assert_output --partial "Insufficient Permissions"
}

@test "fake nvml: place gives each rank its own fake GPU" {
  run --separate-stderr rtop place --ranks 2 --gpus-per-rank 1 --json
  assert_success
  assert_equal "$(jq -s -c '[.[].gpus[]] | sort' <<<"$output")" '[0,1]'
}

@test "fake nvml: NVSwitch machine (RKIT_FAKE_NVML_NVSWITCH=1), 4 GPUs: gpu_links NV18 between every pair" {
  # As on HGX H100: all 18 links of each GPU end at an NVSwitch, none at another GPU, and
  # nvidia-smi topo -m shows NV18 between every pair.
  RKIT_FAKE_NVML_NVSWITCH=1 RKIT_FAKE_NVML_GPUS=4 run --separate-stderr rtop --json
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(nvml_gpus "$output")" 4
  assert_equal "$(jq '.gpu_links | length' <<<"$output")" 4
  assert_equal "$(jq -c '[.gpu_links[] | length] | unique' <<<"$output")" '[4]'
  assert_equal "$(off_diagonal_not "$output" NV18)" 0
  # a GPU NVML refuses leaves the others all joined through the switches
  RKIT_FAKE_NVML_NVSWITCH=1 RKIT_FAKE_NVML_GPUS=4 RKIT_FAKE_NVML_DENY=2 run --separate-stderr rtop --json
  assert_success
  assert_equal "$(nvml_gpus "$output")" 3
  assert_equal "$(off_diagonal_not "$output" NV18)" 0
}

@test "fake nvml: NVSwitch machine, 4 GPUs: rtop matrix shows NV18" {
  RKIT_FAKE_NVML_NVSWITCH=1 RKIT_FAKE_NVML_GPUS=4 run --separate-stderr rtop matrix
  assert_success
  assert_line --regexp '^ +GPU0 +GPU1 +GPU2 +GPU3 '
  assert_line --regexp '^GPU0 +X +NV18 +NV18 +NV18 '
  assert_line --regexp '^GPU1 +NV18 +X +NV18 +NV18 '
  assert_line --regexp '^GPU2 +NV18 +NV18 +X +NV18 '
  assert_line --regexp '^GPU3 +NV18 +NV18 +NV18 +X '
}

@test "fake nvml: a link whose state NVML cannot read hides none of the links after it" {
  # link 1 of each GPU fails with NVML_ERROR_UNKNOWN; links 0, 2 and 3 still count
  RKIT_FAKE_NVML_FAIL_LINKS=1 run --separate-stderr rtop --json
  assert_success
  assert_equal "$(jq -c .gpu_links <<<"$output")" '[["X","NV3"],["NV3","X"]]'
  # the first link failing leaves the other three
  RKIT_FAKE_NVML_FAIL_LINKS=0 run --separate-stderr rtop --json
  assert_success
  assert_equal "$(jq -c .gpu_links <<<"$output")" '[["X","NV3"],["NV3","X"]]'
}

@test "fake nvml: a driver without nvmlDeviceGetNvLinkRemoteDeviceType still finds GPU-to-GPU NVLinks" {
  [[ -f "$FAKE_NVML_OLD_DRIVER" ]] || fail "$FAKE_NVML_OLD_DRIVER is missing: build the fake_nvml target"
  RKIT_NVML_LIBRARY="$FAKE_NVML_OLD_DRIVER" RKIT_FAKE_NVML_GPUS=4 run --separate-stderr rtop --json
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(jq -c .nvml_error <<<"$output")" null
  assert_equal "$(nvml_gpus "$output")" 4
  assert_equal "$(off_diagonal_not "$output" NV4)" 0
  # on an NVSwitch machine such a driver cannot tell a switch from a GPU: the switches'
  # bus ids match no GPU, so no pair is NVLink-joined
  RKIT_NVML_LIBRARY="$FAKE_NVML_OLD_DRIVER" RKIT_FAKE_NVML_NVSWITCH=1 RKIT_FAKE_NVML_GPUS=4 \
    run --separate-stderr rtop --json
  assert_success
  assert_equal "$(nvml_gpus "$output")" 4
  assert_equal "$(jq '[.gpu_links[][] | select(startswith("NV"))] | length' <<<"$output")" 0
}
