#!/usr/bin/env bats
# The exit-code and stderr contract of every tool, kept as data in exit_codes.txt (in the
# manner of zstd's cli-tests): each case is a command line, the code it must exit with
# and a glob for the one line it prints on stderr. This file runs the cases, each from a
# fresh scratch directory holding the fixtures below, and checks that every code a man
# page lists in its EXIT STATUS section has a case, or an exemption with its reason.
bats_require_minimum_version 1.5.0

CASES=$BATS_TEST_DIRNAME/exit_codes.txt
CASE_TIMEOUT=60  # seconds one case may take (all of them together take a few)

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  # A private rsub (its daemon is started by the first rsub case, stopped in teardown)
  # and configuration: [local] of 2 cores and no GPU, whatever the machine has.
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  printf '[local]\ncpus = 2\ngpus = 0\n' >"$RKIT_CONFIG"
  # No GPU suite of rbench can run, on a machine with GPUs too: its plug-in is missing.
  export RKIT_BENCH_GPU_PLUGIN=$BATS_TEST_TMPDIR/no-such-rbench_gpu.so
  make_fixtures "$BATS_TEST_TMPDIR/fixtures"
  hold_port
}

teardown() {
  stop_rsub
  if [[ -n ${holder_pid-} ]]; then
    kill "$holder_pid" 2>/dev/null || true
    wait "$holder_pid" 2>/dev/null || true
  fi
}

# make_fixtures DIR: what the cases read and write, copied into each case's directory.
make_fixtures() {
  local dir=$1 at
  mkdir -p "$dir" && cd "$dir" || return 1
  # Checkpoints: ck/ and a changed copy ck2/, their archives, a copy of a.rkpt with one
  # bit flipped inside its first frame, a truncated one, and random bytes.
  mkdir -p ck
  printf '{"step": 100}\n' >ck/trainer_state.json
  head -c 65536 /dev/urandom >ck/blob.bin
  cp -a ck ck2
  printf '{"step": 200}\n' >ck2/trainer_state.json
  rckpt pack ck -o a.rkpt -q
  rckpt pack ck2 -o b.rkpt -q
  cp a.rkpt bad.rkpt
  at=$(tar -xOf a.rkpt .rkpt/manifest.json | jq '.frames[0].offset + 100')
  /usr/bin/python3 -c '
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x10]))' bad.rkpt "$at"
  head -c 1000 a.rkpt >cut.rkpt
  head -c 4096 /dev/urandom >random.bin
  # Configuration files: a TOML syntax error, values of the wrong kind, a budget, an
  # rsub whose state directory no one may create (/sys), a Slurm backend whose client
  # is not there, a job spec and a training run that are wrong.
  printf 'x = \n' >bad.toml
  printf '[rtop]\npolicy = "sideways"\n' >bad-policy.toml
  printf '[local]\ncpus = "many"\n' >cpus-many.toml
  printf '[rcost.budgets]\nalpha = 0.01\nbeta = 1e9\n' >budgets.toml
  printf '[rcost.budgets]\nalpha = "lots"\n' >budget-bad.toml
  printf '[local]\ncpus = 2\ngpus = 0\n[rsub]\nstate_dir = "/sys/rkit-exit-codes-state"\n' >no-perm-state.toml
  printf '[local]\ncpus = 2\ngpus = 0\n[rsub.backends.hpc]\nkind = "slurm"\nbin_dir = "/nonexistent/bin"\nsubmit_retry = "0s"\n' >slurm.toml
  printf 'command = ["true"]\n[resources]\ntasks = 0\n' >bad-spec.toml
  printf '[train]\nstepz = 3\n' >bad-run.toml
  # Data: results and records of the repository's fixtures, one not JSON, one empty, job
  # records with a bad one at line 12, sacct text without AllocTRES, a NaN.
  cp "$FIXTURES/bench/base.jsonl" "$FIXTURES/bench/worse.jsonl" .
  cp "$FIXTURES/rcost/prices.toml" "$FIXTURES/rcost/synthetic.jsonl" .
  printf 'not json\n' >not-json.jsonl
  : >empty.jsonl
  { cat synthetic.jsonl; echo '{"schema":"rkit.job.v1","id":"x"}'; } >mixed.jsonl
  sed '1s/|AllocTRES//; 2,$s/|[^|]*|\([^|]*\)$/|\1/' "$FIXTURES/rcost/sacct.txt" >no-tres.txt
  printf '1,2\nnan,4\n3,4\n' >nan.csv
  # Run secrets of rtrain launch: a private one and one others may read.
  (umask 077 && head -c 32 /dev/urandom | base64 >secret)
  cp secret open-secret && chmod 644 open-secret
  # Inputs that cannot be read, even by root: /proc/sys/vm/drop_caches is mode 0200 and
  # procfs checks that mode for root as well. (Outputs that cannot be written are put
  # under /sys, where no one may create a file; the cases name it themselves.)
  local ext
  for ext in jsonl csv rkpt xml; do ln -s /proc/sys/vm/drop_caches "unreadable.$ext"; done
  if cat unreadable.jsonl >/dev/null 2>&1; then
    echo "/proc/sys/vm/drop_caches is readable here: the 77 cases cannot work" >&2
    return 1
  fi
  mkdir adir
  cd "$BATS_TEST_TMPDIR" || return 1
}

# hold_port: a listener on 127.0.0.1:$BUSY_PORT (pid $holder_pid) until teardown, for the
# cases of an address already in use.
hold_port() {
  /usr/bin/python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(600)' >"$BATS_TEST_TMPDIR/busy.port" 2>/dev/null 3>&- &
  holder_pid=$!
  for _ in $(seq 100); do [[ -s $BATS_TEST_TMPDIR/busy.port ]] && break; sleep 0.05; done
  BUSY_PORT=$(cat "$BATS_TEST_TMPDIR/busy.port")
  [[ -n $BUSY_PORT ]] || { echo "the port holder did not start" >&2; return 1; }
  export BUSY_PORT
}

# cases: prints each case as LINE<TAB>TOOL<TAB>CODE<TAB>GLOB<TAB>ARGS (LINE: its line in
# exit_codes.txt); comment and blank lines are skipped.
cases() {
  awk -F'\t' '/^[[:space:]]*(#|$)/ {next} {print NR "\t" $0}' "$CASES"
}

# exemptions: prints TOOL<TAB>CODE<TAB>REASON of each "# exempt TOOL CODE: REASON" line.
exemptions() {
  sed -nE 's/^#[[:space:]]*exempt[[:space:]]+([a-z]+)[[:space:]]+([0-9]+):[[:space:]]*(.*[^[:space:]])[[:space:]]*$/\1\t\2\t\3/p' "$CASES"
}

# man_codes TOOL: the numeric codes of the EXIT STATUS section of man/TOOL.1, one a line:
# those of its entries (the tag line after .TP: ".B 64", or ".BR 130 \", \" 143").
man_codes() {
  awk '/^\.SH / { in_section = ($0 ~ /^\.SH "?EXIT STATUS"?[[:space:]]*$/); tag = 0; next }
       in_section && tag {
         tag = 0
         if ($1 == ".B" || $1 == ".BR")
           for (i = 2; i <= NF; i++) { w = $i; gsub(/"/, "", w); if (w ~ /^[0-9]+$/) print w }
         next
       }
       in_section && /^\.TP/ { tag = 1 }' "$RKIT_ROOT/man/$1.1" | sort -un
}

@test "exit_codes.txt is well formed: four fields, a built tool, a code, a safe glob; exemptions have reasons" {
  local problems=() n line tool code glob args
  while IFS= read -r line; do
    n=${line%%$'\t'*} line=${line#*$'\t'}
    IFS=$'\t' read -r tool code glob args <<<"$line"
    [[ $(awk -F'\t' '{print NF}' <<<"$line") -eq 4 ]] || problems+=("line $n: not four tab-separated fields: $line")
    [[ -x $RKIT_BUILD_DIR/tools/$tool/$tool ]] || problems+=("line $n: no built tool '$tool'")
    [[ $code =~ ^[0-9]+$ && $code -le 255 ]] || problems+=("line $n: code '$code' is not 0 to 255")
    [[ $glob != *[*?+@!]\(* ]] || problems+=("line $n: glob '$glob' has an extglob group, which [[ == ]] would read as one")
    [[ -n $args ]] || problems+=("line $n: no ARGS")
  done < <(cases)
  # A line that looks like an exemption but does not parse would be silently ignored.
  while IFS= read -r line; do
    n=${line%%:*}
    [[ ${line#*:} =~ ^#[[:space:]]*exempt[[:space:]]+[a-z]+[[:space:]]+[0-9]+:[[:space:]]*[^[:space:]] ]] ||
      problems+=("line $n: an exemption must read '# exempt TOOL CODE: REASON': ${line#*:}")
  done < <(grep -n -E '^#[[:space:]]*exempt' "$CASES")
  if ((${#problems[@]})); then printf '%s\n' "${problems[@]}" >&2; return 1; fi
}

@test "every code of every man page's EXIT STATUS has a case in exit_codes.txt, or an exemption with a reason" {
  local missing=() t code covered exempt tool reason
  covered=$(cases | cut -f2,3 | sort -u)
  exempt=$(exemptions | cut -f1,2 | sort -u)
  [[ -n $(tools) ]] || { echo "no tools built under $RKIT_BUILD_DIR" >&2; return 1; }
  for t in $(tools); do
    [[ -f $RKIT_ROOT/man/$t.1 ]] || { missing+=("$t: no man/$t.1"); continue; }
    [[ -n $(man_codes "$t") ]] || missing+=("$t: man/$t.1 lists no code under EXIT STATUS")
    for code in $(man_codes "$t"); do
      grep -qxF "$t"$'\t'"$code" <<<"$covered" && continue
      grep -qxF "$t"$'\t'"$code" <<<"$exempt" && continue
      missing+=("$t $code: listed in man/$t.1 (EXIT STATUS), but no case and no exemption")
    done
  done
  # An exemption is for a code that has no case, and that the man page lists.
  while IFS=$'\t' read -r tool code reason; do
    [[ -n $tool ]] || continue
    grep -qxF "$tool"$'\t'"$code" <<<"$covered" && missing+=("$tool $code: exempt ($reason), yet it has a case")
    [[ -f $RKIT_ROOT/man/$tool.1 ]] && man_codes "$tool" | grep -qxF "$code" ||
      missing+=("$tool $code: exempt, but man/$tool.1 does not list it")
  done < <(exemptions)
  if ((${#missing[@]})); then printf '%s\n' "${missing[@]}" >&2; return 1; fi
}

@test "every case of exit_codes.txt: its exit code and its one line of stderr" {
  local failures=() n line tool code glob args dir start elapsed count problem
  while IFS= read -r line; do
    n=${line%%$'\t'*} line=${line#*$'\t'}
    IFS=$'\t' read -r tool code glob args <<<"$line"
    dir=$BATS_TEST_TMPDIR/case.$n
    mkdir "$dir" && cp -a "$BATS_TEST_TMPDIR/fixtures/." "$dir/"
    cd "$dir"
    start=$SECONDS
    # bash evaluates the line (a case may run a tool in the background, signal it, wait);
    # timeout stops one that hangs, which the elapsed time then tells from its own code.
    run --separate-stderr timeout -k 5 "$CASE_TIMEOUT" bash -c "$tool $args" </dev/null
    elapsed=$((SECONDS - start))
    cd "$BATS_TEST_TMPDIR"
    problem=
    if ((elapsed >= CASE_TIMEOUT)); then
      problem="timed out after ${elapsed}s"
    elif [[ $status -ne $code ]]; then
      problem="exit code $status, expected $code"
    elif [[ $glob == '""' ]]; then
      [[ -z $stderr ]] || problem="stderr should be empty"
    else
      count=$(printf '%s' "$stderr" | grep -c '' || true)
      if [[ $count -ne 1 ]]; then
        problem="$count lines on stderr, expected one"
      elif [[ $stderr != $glob ]]; then
        problem="stderr does not match the glob"
      fi
    fi
    if [[ -n $problem ]]; then
      failures+=("exit_codes.txt:$n: $problem
  command:  $tool $args
  expected: exit $code, stderr ${glob}
  actual:   exit $status, stderr: ${stderr:-(empty)}")
    fi
  done < <(cases)
  echo "# $(cases | wc -l) cases, ${#failures[@]} failed" >&3
  if ((${#failures[@]})); then printf '%s\n\n' "${failures[@]}" >&2; return 1; fi
}
