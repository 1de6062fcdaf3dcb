# Shared setup for the Bats tests: the built tools on PATH, bats-assert loaded.
bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

RKIT_BUILD_DIR=${RKIT_BUILD_DIR:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)/build}
RKIT_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
FIXTURES=$RKIT_ROOT/tests/fixtures
for dir in "$RKIT_BUILD_DIR"/tools/*/; do PATH="$dir:$PATH"; done
export PATH RKIT_ROOT FIXTURES RKIT_BUILD_DIR
# The tools must not read the configuration of whoever runs the tests, nor write their
# state (rsub's jobs, rtrain's run records) where theirs is.
export RKIT_CONFIG=$FIXTURES/empty.toml XDG_CONFIG_HOME=$FIXTURES/no-such-dir
# A file's setup_file may have chosen one for all its tests (a daemon it started uses it).
export RKIT_STATE_DIR=${RKIT_STATE_DIR:-${BATS_TEST_TMPDIR:-$BATS_FILE_TMPDIR}/state}
unset RKIT_PROJECT_DIR RKIT_EXPERIMENT RKIT_TRACK RKIT_RUN_RECORD RKIT_METRICS_FILE

# Asserts that stderr (captured by `run --separate-stderr`) is exactly one line.
assert_one_line_stderr() {
  local n
  n=$(printf '%s' "$stderr" | grep -c '' || true)
  [[ "$n" -eq 1 ]] || { echo "expected one line on stderr, got $n: $stderr" >&2; return 1; }
}

# wait_state ID STATE [SECONDS]: waits until rsub job ID is in STATE (at most SECONDS, 10
# by default); prints the job and fails when it is not.
wait_state() {
  local deadline=$((SECONDS + ${3:-10}))
  while ((SECONDS < deadline)); do
    [[ $(rsub show "$1" --json | jq -r .state) == "$2" ]] && return 0
    sleep 0.1
  done
  rsub show "$1" >&2
  return 1
}

# worker_of LAUNCHER R: prints the pid of rtrain launch LAUNCHER's worker of rank R (its
# child whose environment holds RANK=R); fails when there is none.
worker_of() {
  local pid
  for pid in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$pid"; return 0; }
  done
  echo "no worker of rank $2 under launcher $1" >&2
  return 1
}

# refute_alive PID...: fails, naming it, when any of the processes still exists.
refute_alive() {
  local pid
  for pid in "$@"; do
    if kill -0 "$pid" 2>/dev/null; then echo "process $pid still runs" >&2; return 1; fi
  done
}

# Runs headless Chromium with a throwaway profile and home under the test's directory,
# stderr to chromium.log, and leaves no process behind: helpers that outlive the browser
# (crashpad) are found by the profile's unique path in their command line, stopped by pid.
chromium_run() {
  local profile="$BATS_TEST_TMPDIR/chromium.$$" rc=0 pids
  mkdir -p "$profile/home"
  HOME="$profile/home" XDG_CONFIG_HOME="$profile/home/.config" XDG_CACHE_HOME="$profile/home/.cache" \
    timeout -k 5 60 chromium --headless --no-sandbox --disable-gpu --disable-extensions --no-first-run \
    --disable-crash-reporter --hide-scrollbars --force-device-scale-factor=1 --user-data-dir="$profile/data" \
    "$@" 2>>"$BATS_TEST_TMPDIR/chromium.log" || rc=$?
  pids=$(pgrep -f -- "$profile" || true)
  if [[ -n "$pids" ]]; then
    kill $pids 2>/dev/null || true
    sleep 0.5
    kill -9 $pids 2>/dev/null || true
  fi
  rm -rf "$profile"
  return "$rc"
}

# chart_boxes PAGE: prints JSON {height, charts: [{kind, x, y, w, h}]}: where headless
# Chromium lays out each <svg class="chart"> of PAGE. A copy of the page with a probe
# script (and without the policy that forbids scripts) writes the boxes into the DOM
# that Chromium dumps.
chart_boxes() {
  { sed -e '/Content-Security-Policy/d' -e '/^<\/body>$/d' -e '/^<\/html>$/d' "$1"
    cat <<'EOF'
<script>
const out = {height: document.documentElement.scrollHeight, charts: []};
for (const s of document.querySelectorAll("svg.chart")) {
  const r = s.getBoundingClientRect();
  out.charts.push({kind: s.dataset.kind, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height});
}
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>
</body>
</html>
EOF
  } >"$BATS_TEST_TMPDIR/probe.html"
  chromium_run --window-size=1000,1000 --dump-dom "file://$BATS_TEST_TMPDIR/probe.html" >"$BATS_TEST_TMPDIR/dom.html" || return 1
  sed -n 's|.*<pre id="probe">\(.*\)</pre>.*|\1|p' "$BATS_TEST_TMPDIR/dom.html"
}

# stop_rsub: ends the rsub of $RKIT_STATE_DIR: its job supervisors first (they end
# their tasks on SIGTERM), then the daemon, waiting up to 5 s for it.
stop_rsub() {
  local dir=$RKIT_STATE_DIR/rsub lock pid
  for lock in "$dir"/run/*.lock; do
    [[ -e $lock ]] || continue
    pid=$(cat "$lock" 2>/dev/null)
    [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
  done
  if [[ -f $dir/daemon.pid ]]; then
    pid=$(cat "$dir/daemon.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
}

# The tools that were built, one name per line.
tools() { for d in "$RKIT_BUILD_DIR"/tools/*/; do basename "$d"; done; }
# Subcommands that `TOOL [SUB] --help` lists (hidden ones, like rsub's _launcher, are not listed).
subcommands() { "$@" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF {print $1}'; }
# Long options that `TOOL [SUB] --help` lists, sorted.
options_of() { "$@" --help | grep -oE '^ +(-[a-zA-Z],)?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u; }

# rsub_sandbox: a private rsub for the test (state and configuration under its directory,
# [local]: 2 cores, no GPU); pair it with stop_rsub in teardown.
rsub_sandbox() {
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  printf '[local]\ncpus = 2\ngpus = 0\n' >"$RKIT_CONFIG"
}

# kill_and_resume NAME NPROC RANK STEP LAST ARGS...: `rtrain run ARGS` under rtrain launch
# on NPROC ranks twice, the second time with rank RANK killed (kill -9) once the
# checkpoint of step STEP exists. Passes when that run restarted once, resumed from step
# STEP or later (before LAST) and wrote the reference run's very bytes. Files NAME-*:
# NAME-ref/ and NAME-ck/ (checkpoints), NAME-launch.jsonl, NAME-run.jsonl; the victim's pid
# is left in $victim.
kill_and_resume() {
  local name=$1 nproc=$2 rank=$3 step=$4 last=$5 launcher n
  shift 5
  run -0 rtrain launch --nproc-per-node "$nproc" --master-port 0 --ckpt-dir "$name-ref" -- \
    rtrain run "$@" --output "$name-ref.safetensors"
  rtrain launch --nproc-per-node "$nproc" --master-port 0 --max-restarts 3 --ckpt-dir "$name-ck" \
    --events "$name-launch.jsonl" -- rtrain run "$@" --output "$name-out.safetensors" --events "$name-run.jsonl" \
    2>"$name-launch.err" &
  launcher=$!
  for ((n = 0; n < 600; n++)); do [[ -e $name-ck/step-$step.rkpt ]] && break; sleep 0.05; done
  victim=$(worker_of "$launcher" "$rank")
  kill -9 "$victim"
  wait "$launcher"
  jq -e -s 'map(select(.event == "restart")) | length == 1' "$name-launch.jsonl"
  # an archive, or the step folder itself when the kill came before its packing ended
  jq -e -s --argjson s "$step" --argjson l "$last" 'map(select(.event == "resume"))[0] |
    .step >= $s and .step < $l and (.path | test("step-[0-9]+(.rkpt)?$"))' "$name-run.jsonl"
  cmp "$name-ref.safetensors" "$name-out.safetensors"
}
