#!/usr/bin/env bats
# rbench's GPU suites where no GPU can be used: these machines have none (CUDA's runtime
# then reports "driver insufficient"), and CUDA_VISIBLE_DEVICES="" hides any GPU of a
# machine that has one, so that the tests mean the same everywhere. The gpu.* suites are
# a plug-in, rbench_gpu.so, that a CUDA build puts beside rbench and rbench loads at run
# time; loaded, the suites name CUDA's error; a build without CUDA says "built without
# CUDA". The host fingerprint's GPUs come from NVML: a FAKE NVML (tests/fakes) stands in
# for it, and a FAKE plug-in (libfake_gpu_plugin.so) for one whose CUDA libraries are
# missing.
bats_require_minimum_version 1.5.0

GPU_SUITES="gpu.copy gpu.gemm gpu.nccl gpu.stream"

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  export CUDA_VISIBLE_DEVICES=""
  export RKIT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1  # no NVML, whatever the machine has
}

# Whether the build under test was configured with CUDA (and so has the plug-in): CUDA
# on, and nvcc found (find_package(CUDAToolkit) then cached the CUDA runtime).
build_has_cuda() {
  grep -q '^RKIT_CUDA:BOOL=ON' "$RKIT_BUILD_DIR/CMakeCache.txt" &&
    grep -qE '^CUDA_cudart_LIBRARY:FILEPATH=/' "$RKIT_BUILD_DIR/CMakeCache.txt"
}

# The reason rbench gives for a GPU suite: a CUDA error, or the build's lack of CUDA.
assert_gpu_reason() {
  [[ "$1" == *"built without CUDA"* || "$1" == *"cudaGetDeviceCount"* ]] || {
    echo "not a GPU reason: $1" >&2
    return 1
  }
}

@test "list shows the four gpu suites as unavailable, each with a reason" {
  run rbench list
  assert_success
  for s in $GPU_SUITES; do
    assert_line --regexp "^${s//./\\.} +no "
  done
  run rbench list --json
  assert_success
  for s in $GPU_SUITES; do
    rec=$(jq -c --arg s "$s" 'select(.suite == $s)' <<<"$output")
    [[ -n "$rec" ]] || fail "$s is not listed"
    jq -e '.available == false and (.reason | type == "string" and length > 0) and (.description | length > 0)' <<<"$rec"
    assert_gpu_reason "$(jq -r .reason <<<"$rec")"
  done
  # The CPU suites are unaffected.
  jq -e -s 'any(.[]; .suite == "cpu.stream" and .available)' <<<"$output"
}

@test "run gpu: exit 69, one line per suite on stderr and the error, nothing on stdout" {
  run --separate-stderr rbench run gpu
  assert_failure 69
  [[ -z "$output" ]]
  [[ $(printf '%s\n' "$stderr" | wc -l) -eq 5 ]] || fail "expected 5 stderr lines, got: $stderr"
  for s in $GPU_SUITES; do
    line=$(grep -F "rbench: warning: $s is unavailable: " <<<"$stderr") || fail "no line for $s: $stderr"
    assert_gpu_reason "$line"
  done
  [[ $(printf '%s\n' "$stderr" | tail -1) == "rbench: error: none of the suites asked for can run here"* ]]
}

@test "run gpu --json --quick: the same, and each gpu suite by name too" {
  run --separate-stderr rbench run gpu --json --quick
  assert_failure 69
  [[ -z "$output" ]]
  for s in $GPU_SUITES; do
    run --separate-stderr rbench run "$s" --quick
    assert_failure 69
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 2 ]] || fail "$s: expected 2 stderr lines, got: $stderr"
    [[ "$stderr" == "rbench: warning: $s is unavailable: "* ]]
  done
}

@test "run gpu.gemm cpu.stream --quick: the CPU suite runs, gpu.gemm is said to be unavailable" {
  run --separate-stderr rbench run gpu.gemm cpu.stream --quick --reps 1 --json
  assert_success
  [[ $(jq -s 'length' <<<"$output") -eq 4 ]]
  jq -e -s 'all(.suite == "cpu.stream" and .correct)' <<<"$output"
  line=$(grep -F "rbench: warning: gpu.gemm is unavailable: " <<<"$stderr") || fail "gpu.gemm not named: $stderr"
  assert_gpu_reason "$line"
  # -q drops the notice but not the run
  run --separate-stderr rbench run gpu.gemm cpu.stream --quick --reps 1 -q
  assert_success
  [[ -z "$stderr" ]]
}

@test "host fingerprint: no NVML, no GPUs and a null driver" {
  run --separate-stderr rbench run cpu.stream --quick --reps 1 --json
  assert_success
  jq -e -s 'all(.host.gpus == [] and .host.gpu_driver == null)' <<<"$output"
}

@test "host fingerprint: the GPUs and driver NVML reports (fake NVML)" {
  fake="$RKIT_BUILD_DIR/tests/fakes/libfake_nvml.so"
  [[ -f "$fake" ]] || fail "$fake is missing: build the fake_nvml target (tests on)"
  RKIT_NVML_LIBRARY=$fake run --separate-stderr rbench run cpu.stream --quick --reps 1 --json
  assert_success
  jq -e -s 'all(.host.gpu_driver == "999.99-fake")' <<<"$output"
  jq -e -s 'all(.host.gpus | map(.name) == ["FAKE NVML GPU 0", "FAKE NVML GPU 1"])' <<<"$output"
  jq -e -s 'all(.host.gpus | map(.index) == [0, 1] and all(.uuid != null and .pci_bus_id != null and .memory_bytes > 0))' \
    <<<"$output"
}

@test "the plug-in: a CUDA build's rbench loads it, a build without CUDA looks for none" {
  plugin=$RKIT_BUILD_DIR/tools/rbench/rbench_gpu.so
  if build_has_cuda; then
    [[ -f "$plugin" ]] || fail "$plugin is missing from a CUDA build"
    # Found beside rbench, and named by RKIT_BENCH_GPU_PLUGIN: loaded, CUDA says why not.
    for named in "" "$plugin"; do
      RKIT_BENCH_GPU_PLUGIN=$named run rbench list --json
      assert_success
      jq -e -s '[.[] | select(.suite | startswith("gpu."))] | length == 4 and
                all(.reason | test("cudaGetDeviceCount"))' <<<"$output"
    done
  else
    run rbench list --json  # even a plug-in left there from an earlier CUDA build is not loaded
    assert_success
    jq -e -s '[.[] | select(.suite | startswith("gpu."))] | length == 4 and
              all(.reason | startswith("built without CUDA"))' <<<"$output"
  fi
}

# Each branch checks what only an install shows: where the plug-in lands (or that none
# does) and that the installed rbench runs from PREFIX.
@test "installed: a CUDA build's rbench finds the plug-in in PREFIX/lib/rkit, a build without CUDA installs none" {
  cmake --install "$RKIT_BUILD_DIR" --prefix "$BATS_TEST_TMPDIR/prefix" >/dev/null
  run "$BATS_TEST_TMPDIR/prefix/bin/rbench" list --json
  assert_success
  if build_has_cuda; then
    assert_file_exist "$BATS_TEST_TMPDIR/prefix/lib/rkit/rbench_gpu.so"
    jq -e -s '[.[] | select(.suite | startswith("gpu."))] | length == 4 and
              all(.reason | test("cudaGetDeviceCount"))' <<<"$output"
  else
    assert_file_not_exist "$BATS_TEST_TMPDIR/prefix/lib/rkit/rbench_gpu.so"
    jq -e -s '[.[] | select(.suite | startswith("gpu."))] | length == 4 and
              all(.reason | startswith("built without CUDA"))' <<<"$output"
  fi
}

@test "RKIT_BENCH_GPU_PLUGIN=/nonexistent: the gpu suites are listed, unavailable, the reason names the plug-in" {
  export RKIT_BENCH_GPU_PLUGIN=/nonexistent/rbench_gpu.so
  run rbench list
  assert_success
  for s in $GPU_SUITES; do
    assert_line --regexp "^${s//./\\.} +no .*GPU plug-in not found: /nonexistent/rbench_gpu.so"
  done
  assert_line --regexp '^cpu\.stream +yes '
  run --separate-stderr rbench run gpu.gemm
  assert_failure 69
  [[ "$stderr" == "rbench: warning: gpu.gemm is unavailable: GPU plug-in not found: /nonexistent/rbench_gpu.so"* ]]
}

@test "a plug-in whose CUDA libraries are missing: 'CUDA libraries not found' and the loader's first line" {
  fake="$RKIT_BUILD_DIR/tests/fakes/libfake_gpu_plugin.so"
  [[ -f "$fake" ]] || fail "$fake is missing: build the fake_gpu_plugin target (tests on)"
  RKIT_BENCH_GPU_PLUGIN=$fake run rbench list --json
  assert_success
  for s in $GPU_SUITES; do
    jq -e -s --arg s "$s" --arg fake "$fake" '.[] | select(.suite == $s) | .available == false and .reason ==
      "CUDA libraries not found: libfake_cudart.so: cannot open shared object file: No such file or directory (loading \($fake))"' \
      <<<"$output"
  done
}

@test "the gpu suites have the same names and descriptions whether the plug-in loads or not" {
  # Without CUDA there is no plug-in: both lists would be kGpuSuites' stand-ins.
  build_has_cuda || skip "a build without CUDA has no plug-in to compare kGpuSuites with"
  gpu_suites='[.[] | select(.suite | startswith("gpu."))]'
  loaded=$(rbench list --json | jq -c -s "$gpu_suites")
  missing=$(RKIT_BENCH_GPU_PLUGIN=/nonexistent rbench list --json | jq -c -s "$gpu_suites")
  # The first list is the plug-in's own suites (they name CUDA's error), the second the stand-ins.
  jq -e 'length == 4 and all(.reason | test("cudaGetDeviceCount"))' <<<"$loaded"
  jq -e 'length == 4 and all(.reason | startswith("GPU plug-in not found"))' <<<"$missing"
  plugin_names=$(jq -c 'map({suite, description})' <<<"$loaded")
  stand_in_names=$(jq -c 'map({suite, description})' <<<"$missing")
  [[ "$plugin_names" == "$stand_in_names" ]] ||
    fail "plug-in: $plugin_names; stand-ins (gpu_plugin.hpp's kGpuSuites): $stand_in_names"
}

@test "the plug-in loads with a libnccl.so.2 older than 2.28, which has no ncclAlltoAll (a weak reference)" {
  build_has_cuda || skip "a build without CUDA has no plug-in"
  plugin=$RKIT_BUILD_DIR/tools/rbench/rbench_gpu.so
  run nm -D "$plugin"
  assert_success
  if ! grep -qE '^ +U ncclCommInitAll$' <<<"$output"; then skip "the plug-in was built without NCCL"; fi
  assert_line --regexp '^ +w ncclAlltoAll$'
  # A stand-in libnccl.so.2 with every other NCCL function the plug-in calls.
  nm -D --undefined-only "$plugin" | awk '$1 == "U" && $2 ~ /^nccl/ { print "int " $2 "(void) { return 0; }" }' >stub.c
  cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o libnccl.so.2 stub.c
  LD_LIBRARY_PATH=$PWD run rbench list --json
  assert_success
  jq -e -s '[.[] | select(.suite | startswith("gpu."))] | length == 4 and all(.reason | test("cudaGetDeviceCount"))' \
    <<<"$output"
}

@test "rbench itself needs no CUDA library (readelf -d); only its plug-in does" {
  rbench=$RKIT_BUILD_DIR/tools/rbench/rbench
  run readelf -d "$rbench"
  assert_success
  assert_output --partial "(NEEDED)"
  refute_output --regexp 'libcuda|libcublas|libnccl|libnvidia'
  if build_has_cuda; then
    run readelf -d "$RKIT_BUILD_DIR/tools/rbench/rbench_gpu.so"
    assert_success
    assert_output --regexp 'NEEDED.*libcudart\.so'
    assert_output --regexp 'NEEDED.*libcublas\.so'
  fi
}
