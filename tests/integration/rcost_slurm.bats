#!/usr/bin/env bats
# rcost over `sacct -P` text from a real Slurm 22.05 with accounting (slurmctld, slurmd,
# munged, slurmdbd over a private MariaDB), started once for this file (slurm.sh start
# --accounting, in a folder of its own) and stopped by pid at the end. The jobs run under
# two accounts and two users, with cores, memory and the node's two fake GPUs; rcost's
# per-tenant totals must equal tests/cli/rcost_check.py's over the same text, to the cent.
# Needs root and the packages of install-deps.sh tests.
bats_require_minimum_version 1.5.0

SACCT_FORMAT=JobID,JobName,User,Account,Partition,State,Submit,Eligible,Start,End,AllocTRES,NodeList

setup_file() {
  load slurm/bats_slurm
  slurm_start --accounting
  source "$SLURM_DIR/env.sh"
  sacctmgr -i add account alpha,beta >/dev/null
  sacctmgr -i add user root,nobody account=alpha,beta >/dev/null
}

teardown_file() {
  load slurm/bats_slurm
  slurm_stop
}

setup() {
  load ../cli/helpers
  source "$SLURM_DIR/env.sh"
  cd "$BATS_TEST_TMPDIR"
  unset SLURM_TIME_FORMAT
  # sacct prints local time, and rcost and the check read it as such: a zone far from UTC
  # (POSIX form, no tzdata needed) makes a reader that took it for UTC miss by 5.5 hours.
  export TZ=IST-5:30
  CHECK=$RKIT_ROOT/tests/cli/rcost_check.py
  PRICES=$FIXTURES/rcost/prices.toml
}

# sacct_epoch FIELD JOBID: a time field of a job, in Unix seconds.
sacct_epoch() { SLURM_TIME_FORMAT=%s sacct -n -X -P -o "$1" -j "$2"; }

# totals_match REPORT CHECK-TOTALS-ARGS...: as in tests/cli/rcost.bats.
totals_match() {
  local report=$1; shift
  python3 "$CHECK" totals "$@" >"$report.expected"
  run python3 "$CHECK" compare --expect "$report.expected" --rcost "$report"
  echo "$output"
  assert_success
}

@test "sacct text of finished and running jobs: per-tenant totals equal the independent computation, from a file and stdin" {
  t0=$(date +%s)
  ids=()
  ids+=("$(sbatch --parsable -A alpha -c 1 --mem 100M -o /dev/null --wrap 'sleep 2')")
  ids+=("$(sbatch --parsable -A alpha -c 1 --gres=gpu:1 -o /dev/null --wrap 'sleep 2')")
  ids+=("$(sbatch --parsable -A beta -c 2 --mem 300M -o /dev/null --wrap 'sleep 2')")
  ids+=("$(sbatch --parsable -A beta -c 1 --gres=gpu:2 --mem 1G -o /dev/null --wrap 'sleep 1')")
  # Another user, whom rsub.users maps to a tenant of its own (its account is alpha).
  ids+=("$(sbatch --parsable --uid nobody -A alpha -c 1 --mem 200M --chdir /tmp -o /dev/null --wrap 'sleep 1')")
  running=$(sbatch --parsable -A beta -c 1 --mem 50M -o /dev/null --wrap 'sleep 120')
  # Until sacct shows the five COMPLETED and the last one RUNNING (at most 60 s).
  want=$(printf '%s|COMPLETED\n' "${ids[@]}"; echo "$running|RUNNING")
  for _ in $(seq 600); do
    got=$(sacct -n -X -P -o JobID,State -j "$(IFS=,; echo "${ids[*]},$running")" | sort)
    [[ $got == "$(sort <<<"$want")" ]] && break
    sleep 0.1
  done
  assert_equal "$got" "$(sort <<<"$want")"
  sacct -a -X -P --format="$SACCT_FORMAT" -S "$(date +%Y-%m-%dT%H:%M:%S -d "@$((t0 - 5))")" >sacct.txt
  cat sacct.txt
  [[ $(head -1 sacct.txt) == "${SACCT_FORMAT//,/|}" ]]
  [[ $(grep -c . sacct.txt) -eq 7 ]]
  grep -q "^${ids[1]}|.*gres/gpu=1" sacct.txt  # GPUs are accounted (AccountingStorageTRES)
  grep -q "^${ids[4]}|[^|]*|nobody|alpha|" sacct.txt
  printf '[rsub.users]\nnobody = "gamma"\n' >rkit.toml

  # The whole run, then a window that cuts the first job's start and ends inside the running job.
  now=$(date +%s)
  windows=("$((t0 - 60)) $((now + 60))" "$(($(sacct_epoch Start "${ids[0]}") + 1)) $(($(sacct_epoch Start "$running") + 3))")
  for window in "${windows[@]}"; do
    read -r since until <<<"$window"
    ((since < until))
    run --separate-stderr rcost --config rkit.toml --prices "$PRICES" report --since "@$since" --until "@$until" --share-idle none --json sacct.txt
    assert_success
    [[ -z $stderr ]]
    echo "$output" >report.jsonl
    totals_match report.jsonl --config rkit.toml --prices "$PRICES" --since "$since" --until "$until" sacct.txt
    jq -e -s 'last | .bad_records == 0 and .jobs_read == 6' report.jsonl
    # The same text through standard input, as sacct ... | rcost report - would give it.
    run --separate-stderr rcost --config rkit.toml --prices "$PRICES" report --since "@$since" --until "@$until" --share-idle none --json --slurm-backend slurm - <sacct.txt
    assert_success
    echo "$output" >stdin.jsonl
    totals_match stdin.jsonl --config rkit.toml --prices "$PRICES" --since "$since" --until "$until" sacct.txt
  done
  jq -e -s 'map(select(.schema == "rkit.cost.v1") | .tenant) | sort == ["alpha", "beta", "gamma"]' report.jsonl
  # Samples of the node (its two fake GPUs and its cores) over the whole run: every unit-second
  # lands in one bucket, and the unallocated part's cost is shared out in full.
  read -r since until <<<"${windows[0]}"
  node=$(awk -F'|' 'NR == 2 {print $NF}' sacct.txt)
  python3 "$CHECK" samples --host "$node" --start "$since" --end "$until" --interval 1 --gpus 2 --cpus "$(nproc)" >samples.jsonl
  rcost --config rkit.toml --prices "$PRICES" report --since "@$since" --until "@$until" --share-idle none --json sacct.txt samples.jsonl >sampled.jsonl
  totals_match sampled.jsonl --config rkit.toml --prices "$PRICES" --since "$since" --until "$until" sacct.txt samples.jsonl
  python3 "$CHECK" capacity --prices "$PRICES" --since "$since" --until "$until" sacct.txt samples.jsonl >capacity.json
  run python3 "$CHECK" check-capacity --exact --expect capacity.json --rcost sampled.jsonl
  echo "$output"
  assert_success
  rcost --config rkit.toml --prices "$PRICES" report --since "@$since" --until "@$until" --json sacct.txt samples.jsonl >weighted.jsonl
  run python3 "$CHECK" check-idle --share-idle weighted --expect sampled.jsonl.expected --rcost weighted.jsonl
  echo "$output"
  assert_success
  # Without the user map the other user's job is its account's.
  rcost --prices "$PRICES" report --since "@$since" --until "@$until" --share-idle none --json sacct.txt >nomap.jsonl
  totals_match nomap.jsonl --prices "$PRICES" --since "$since" --until "$until" sacct.txt
  jq -e -s 'map(select(.schema == "rkit.cost.v1") | .tenant) | sort == ["alpha", "beta"]' nomap.jsonl
  scancel "$running"
}
