# Helpers for the tests of `rtop serve` (tests/cli/rtop_serve.bats and
# tests/integration/rtop_prometheus.bats): start it on a free loopback port, fetch over
# HTTP with python3 (curl is not among the test dependencies), stop it by pid.

# start_serve [ARGS...]: starts `rtop serve --listen 127.0.0.1:0 ARGS` in the background
# and sets SERVE_PID, SERVE_URL (the metrics URL it prints first) and SERVE_PORT. Fails
# when no URL comes within 10 s. Its stderr goes to $BATS_TEST_TMPDIR/serve.err.
start_serve() {
  local dir=${BATS_TEST_TMPDIR:-$BATS_FILE_TMPDIR}
  local out=$dir/serve.out
  : >"$out"
  rtop serve --listen 127.0.0.1:0 "$@" >"$out" 2>"$dir/serve.err" 3>&- &
  SERVE_PID=$!
  for _ in $(seq 100); do
    [[ -s $out ]] && break
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.1
  done
  SERVE_URL=$(head -n 1 "$out")
  if [[ ! $SERVE_URL =~ ^http://127\.0\.0\.1:([0-9]+)/metrics$ ]]; then
    echo "rtop serve did not start: $(cat "$dir/serve.err")" >&2
    return 1
  fi
  SERVE_PORT=${BASH_REMATCH[1]}
}

# stop_serve: SIGTERM to the server started by start_serve, then waits for it (5 s at
# most, then SIGKILL). Sets SERVE_STATUS to its exit status.
stop_serve() {
  [[ -n ${SERVE_PID:-} ]] || return 0
  kill -TERM "$SERVE_PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SERVE_PID" 2>/dev/null || true
  SERVE_STATUS=0
  wait "$SERVE_PID" 2>/dev/null || SERVE_STATUS=$?
  SERVE_PID=
}

# http_get URL: the body on stdout; exit 1 (the status on stderr) unless it is 200.
http_get() {
  python3 - "$1" <<'EOF'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as r:
        sys.stdout.write(r.read().decode("utf-8"))
except urllib.error.HTTPError as e:
    sys.exit(f"HTTP {e.code}")
EOF
}

# http_head URL: "STATUS CONTENT-TYPE" of a GET.
http_head() {
  python3 - "$1" <<'EOF'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as r:
        print(r.status, r.headers.get("Content-Type"))
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("Content-Type"))
EOF
}

# sample_value SERIES: the value of the sample line whose series (name and labels, as
# written; label values may hold spaces) is SERIES, in the exposition on stdin; nothing
# when there is none.
sample_value() { awk -v s="$1" '/^[^#]/ { i = match($0, / [^ ]+$/); if (i && substr($0, 1, i - 1) == s) print substr($0, i + 1) }'; }
