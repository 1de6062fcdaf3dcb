# Helpers for the tests of `rtop serve` (tests/cli/rtop_serve.bats and
# tests/integration/rtop_prometheus.bats): start it on a free loopback port, fetch over
# HTTP with python3 (curl is not among the test dependencies), stop it by pid.

# start_serve [ARGS...]: starts `rtop serve --listen ${SERVE_LISTEN:-127.0.0.1:0} ARGS`
# in the background and sets SERVE_PID, SERVE_URL (the metrics URL it prints first) and
# SERVE_PORT. Fails when no URL comes within 10 s. Its stderr goes to
# $BATS_TEST_TMPDIR/serve.err.
start_serve() {
  local dir=${BATS_TEST_TMPDIR:-$BATS_FILE_TMPDIR}
  local out=$dir/serve.out
  : >"$out"
  rtop serve --listen "${SERVE_LISTEN:-127.0.0.1:0}" "$@" >"$out" 2>"$dir/serve.err" 3>&- &
  SERVE_PID=$!
  for _ in $(seq 100); do
    [[ -s $out ]] && break
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.1
  done
  SERVE_URL=$(head -n 1 "$out")
  if [[ ! $SERVE_URL =~ ^http://[^/]+:([0-9]+)/metrics$ ]]; then
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

# wait_until SECONDS COMMAND...: runs COMMAND every 0.05 s until it succeeds; fails when
# SECONDS pass first.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || { echo "not within the time: $*" >&2; return 1; }
    sleep 0.05
  done
}

# serve_status FIELD: a field of the server's /proc/PID/status, its number only (VmRSS
# and VmHWM in kB, Threads).
serve_status() { awk -v f="$1:" '$1 == f { print $2 }' "/proc/$SERVE_PID/status"; }

# serve_sockets: how many sockets the server has open; serve_has_sockets N: at least N.
serve_sockets() { find "/proc/$SERVE_PID/fd" -lname 'socket:*' 2>/dev/null | wc -l; }
serve_has_sockets() { (($(serve_sockets) >= $1)); }

# The attack clients (python3 sockets) of the tests of serve's limits; each prints one
# line of `key=value` results. Times are seconds since the client started.
#
# attack_big_body PORT METHOD: a head with Content-Length 1 GB (METHOD chunked: a POST
# whose body has no length, Transfer-Encoding: chunked; METHOD head: a GET whose head
# never ends, one header line of 1 GB), then 1 MiB of it at a time while watching for an
# answer: status= (of the answer; none when none came), how= (answer, reset or eof),
# sent= (bytes of the body, or the line, that went out), after=.
attack_big_body() {
  python3 - "$@" <<'PY'
import select, socket, sys, time
port, method = int(sys.argv[1]), sys.argv[2]
start = time.monotonic()
s = socket.create_connection(("127.0.0.1", port))
chunk = b"a" * (1 << 20)
if method == "head":
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: rtop\r\nX-Long: ")
elif method == "chunked":
    s.sendall(b"POST /metrics HTTP/1.1\r\nHost: rtop\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
else:
    s.sendall(f"{method} /metrics HTTP/1.1\r\nHost: rtop\r\nContent-Length: 1000000000\r\n\r\n".encode())
s.setblocking(False)
pending, sent, answer, how = b"", 0, b"", "none"
while time.monotonic() - start < 30:
    readable, writable, _ = select.select([s], [s] if sent < 10**9 else [], [], 1)
    try:
        if readable:
            data = s.recv(65536)
            if not data:
                how = "eof"
                break
            answer += data
            if b"\r\n\r\n" in answer:
                how = "answer"
                break
        if writable:
            pending = pending if len(pending) else memoryview(chunk)
            n = s.send(pending)
            pending, sent = pending[n:], sent + n
    except BlockingIOError:
        pass
    except (BrokenPipeError, ConnectionResetError):
        how = "reset"
        break
status = answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/") else "none"
print(f"status={status} how={how} sent={sent} after={time.monotonic() - start:.2f}")
PY
}

# attack_slow PORT N SECONDS READY: N connections that each send the start of a GET and
# then one byte every 0.5 s, for SECONDS at most; READY is created once all N have
# sent their first bytes. Then: closed= (how many the server closed), answered= (how
# many got any answer), first= and last= (when the server closed them, since each one's
# connect).
attack_slow() {
  python3 - "$@" <<'PY'
import os, select, socket, sys, time
port, n, limit, ready = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
start = time.monotonic()
conns = {}
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: rtop\r\nX-Slow: ")
    conns[s] = time.monotonic()
open(ready, "w").close()
closed, answered, next_byte = [], 0, time.monotonic() + 0.5
while conns and time.monotonic() - start < limit:
    readable, _, _ = select.select(list(conns), [], [], max(0, next_byte - time.monotonic()))
    for s in readable:
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if data:
            answered += 1  # no request ever ends: any answer is a refusal
            continue
        closed.append(time.monotonic() - conns.pop(s))
    if time.monotonic() >= next_byte:
        for s in list(conns):
            try:
                s.send(b"a")
            except OSError:
                closed.append(time.monotonic() - conns.pop(s))
        next_byte += 0.5
print(f"closed={len(closed)} answered={answered} first={min(closed, default=-1):.2f} last={max(closed, default=-1):.2f}")
PY
}

# attack_flood PORT N: N connections at once that send nothing, then a scrape while
# they are held: refused= (how many the server closed within 1 s of the last connect),
# busy= (of those, how many with a 503), scrape= (its status), scrape_s= (its time),
# left= (connections still open after the scrape), threads= (the server's, then).
attack_flood() {
  python3 - "$@" "$SERVE_PID" <<'PY'
import select, socket, sys, time, urllib.request
port, n, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
refused, busy, until = set(), 0, time.monotonic() + 1
while time.monotonic() < until:
    readable, _, _ = select.select([s for s in conns if s not in refused], [], [], 0.05)
    for s in readable:
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        busy += data.startswith(b"HTTP/1.1 503 ")
        refused.add(s)
start = time.monotonic()
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        status = r.status
except Exception as e:
    status = getattr(e, "code", "none")
took = time.monotonic() - start
threads = next(l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("Threads:"))
print(f"refused={len(refused)} busy={busy} scrape={status} scrape_s={took:.2f} left={n - len(refused)} threads={threads}")
PY
}

# timed_scrape URL: "STATUS SECONDS" of one GET.
timed_scrape() {
  python3 - "$1" <<'PY'
import sys, time, urllib.request
start = time.monotonic()
with urllib.request.urlopen(sys.argv[1], timeout=20) as r:
    r.read()
    print(r.status, f"{time.monotonic() - start:.3f}")
PY
}
