#!/usr/bin/env bats
# rkit(7) documents every record schema the tools print, with each of its fields: the
# records come from running the tools (tests/cli/check_records_doc.py compares them).
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  rsub_sandbox
  printf '\n[rsub.backends.slurm]\nkind = "slurm"\n' >>"$RKIT_CONFIG"
}

teardown() {
  stop_rsub
}

@test "every record the tools print is in rkit(7), each field in its schema's section" {
  out=$BATS_TEST_TMPDIR/records.jsonl
  prices=$RKIT_ROOT/examples/prices.toml
  {
    rtop --json
    rtop --input "$FIXTURES/dgx_like.xml" matrix --json
    rtop --input "$FIXTURES/dgx_like.xml" place --ranks 4 --gpus-per-rank 1 --json
    rtop sample --count 2 --interval 100ms --json >samples.jsonl && cat samples.jsonl

    # rtrain's checkpoints (step 10 and 20) are the archives rckpt works on.
    rtrain run --steps 20 --rows 2000 --log-every 10 --eval-every 10 --ckpt-every 10 --ckpt-dir ck --json >train.jsonl
    cat train.jsonl
    rtrain launch --nproc-per-node 1 --events - -- true
    rtrain run --steps 2 --rows 2000 --strategy zero1 --trace tr --json -q
    zcat tr/rank-0.trace.json.gz | jq -c .otherData
    rtrain trace merge tr -o merged.json.gz --json
    rtrain plan --ranks 8 --machine "$RKIT_ROOT/examples/h200x8.toml" --json
    rtrain plan --ranks 2 --machine "$RKIT_ROOT/examples/h200x8.toml" --json | rcost perf --prices "$prices" --json -
    zcat merged.json.gz | jq -c .otherData
    rckpt unpack ck/step-20.rkpt -C step-20 --json
    rckpt pack step-20 -o again.rkpt --base ck/step-10.rkpt --json
    rckpt verify again.rkpt --json
    rckpt ls again.rkpt --json
    rckpt ls again.rkpt --tensors --json
    rckpt diff ck/step-10.rkpt ck/step-20.rkpt --json || (($? == 1))
    rckpt gc ck --keep-last 1 --dry-run --json
    rckpt log ck/step-20.rkpt --json
    rckpt model register m ck/step-20.rkpt --json

    # The run store: the run above, its metrics, a comparison and a reproduction.
    id=$(rtrain runs ls --last 1 --json | jq -r .id)
    rtrain runs ls --json
    rtrain runs metrics "$id" --json
    rtrain runs compare "$id" "$id" --json
    rtrain runs reproduce "$id" -q --json

    rbench list --json
    rbench -q run cpu.gemm --quick --json >bench.jsonl && cat bench.jsonl
    rbench compare bench.jsonl bench.jsonl --json

    rsub wait "$(rsub -n done -- true)" >/dev/null
    held=$(rsub --hold -n held -- true)
    rsub ls --all --json
    rsub status --json
    rsub why "$held" --json
    rsub submit --dry-run --backend slurm --json -- true

    rsub ls --all --json | rcost --prices "$prices" report --json - samples.jsonl
    cat bench.jsonl train.jsonl | rcost --prices "$prices" perf --json -
    rcost --prices "$prices" prices --json
  } >"$out"
  # Every schema string in the sources, but the archive's own manifest (rkit.ckpt.v1, inside
  # each .rkpt, not printed), must have been printed above.
  mapfile -t schemas < <(grep -rhoE '"rkit\.[a-z_.]+\.v[0-9]+"' "$RKIT_ROOT/tools" "$RKIT_ROOT/libcommon" |
    tr -d '"' | sort -u | grep -vxF rkit.ckpt.v1)
  [ "${#schemas[@]}" -ge 20 ]
  run /usr/bin/python3 "$RKIT_ROOT/tests/cli/check_records_doc.py" "$RKIT_ROOT/man/rkit.7" "$out" "${schemas[@]}"
  assert_success
  assert_output ""
}

@test "the checker fails on a field or a schema rkit(7) does not document" {
  printf '%s\n' '{"schema":"rkit.sample.v1","host":"h","no_such_field":1}' '{"schema":"rkit.nothing.v1"}' >r.jsonl
  run -1 /usr/bin/python3 "$RKIT_ROOT/tests/cli/check_records_doc.py" "$RKIT_ROOT/man/rkit.7" r.jsonl rkit.sample.v1 rkit.gone.v1
  assert_output $'rkit.gone.v1: no record of it was printed\nrkit.nothing.v1: no .SS section in rkit(7)\nrkit.sample.v1: field no_such_field is not in its rkit(7) section'
}
