#!/usr/bin/env bats
# rtop serve end to end over HTTP on loopback: the exposition (checked by promtool, the
# Prometheus project's own linter), node values against /proc, GPU values from the FAKE
# NVML, the rsub queue and cost per tenant from jobs submitted here, a broken queue,
# bad --listen, a port in use, and stopping on signals; then hostile clients: a 1 GB
# body, slow clients, a flood of connections, and where it listens. A real Prometheus
# scrapes it in tests/integration/rtop_prometheus.bats.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  load rtop_serve
  cd "$BATS_TEST_TMPDIR"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state
  export RKIT_CONFIG=$BATS_TEST_TMPDIR/rkit.toml
  printf '[local]\ncpus = 2\ngpus = 2\nmemory = "4G"\n' >"$RKIT_CONFIG"
  export RKIT_NVML_LIBRARY=$BATS_TEST_TMPDIR/no-such-libnvml.so
  unset RKIT_FAKE_NVML_GPUS RKIT_FAKE_NVML_DENY RKIT_FAKE_NVML_NO_ENERGY RKIT_RSUB
  FAKE_NVML=$RKIT_BUILD_DIR/tests/fakes/libfake_nvml.so
}

teardown() {
  [[ -z ${SLOW_PID:-} ]] || kill "$SLOW_PID" 2>/dev/null || true
  # The server first: a scrape's `rsub ls` may start a daemon until it has ended.
  stop_serve
  # Then every rsub daemon that an rsub command run here started, whichever state
  # directory it used (RKIT_STATE_DIR, or the rsub.state_dir of a test's configuration):
  # stop_rsub ends the daemon of $RKIT_STATE_DIR/rsub by the pid it wrote. A daemon just
  # started writes its pid once it has probed the machine; its log comes first.
  local dir
  while IFS= read -r dir; do
    for _ in $(seq 50); do [[ -e $dir/daemon.pid ]] && break; sleep 0.1; done
    RKIT_STATE_DIR=${dir%/rsub} stop_rsub
  done < <(find "$BATS_TEST_TMPDIR" \( -path '*/rsub/daemon.pid' -o -path '*/rsub/daemon.log' \) -printf '%h\n' 2>/dev/null |
    sort -u)
}

@test "serve prints its URL and serves the text format that promtool accepts" {
  start_serve
  run http_head "$SERVE_URL"
  assert_output "200 text/plain; version=0.0.4; charset=utf-8"
  run -0 http_get "$SERVE_URL"
  body=$output
  run promtool check metrics <<<"$body"
  assert_success
  assert_output ""
  # Each family once, HELP before TYPE before its samples; every sample has both.
  for name in $(grep -v '^#' <<<"$body" | sed 's/[{ ].*//' | sort -u); do
    [[ $(grep -c "^# HELP $name " <<<"$body") -eq 1 ]] || fail "$name: not one HELP line"
    [[ $(grep -c "^# TYPE $name " <<<"$body") -eq 1 ]] || fail "$name: not one TYPE line"
    first=$(grep -n "^$name[{ ]" <<<"$body" | head -1 | cut -d: -f1)
    help=$(grep -n "^# HELP $name " <<<"$body" | cut -d: -f1)
    type=$(grep -n "^# TYPE $name " <<<"$body" | cut -d: -f1)
    ((help < type && type < first)) || fail "$name: HELP, TYPE and samples out of order"
  done
  # Counters end in _total and only they do; every name has the rkit_ prefix.
  while read -r _ _ name type; do
    [[ $name == rkit_* ]] || fail "$name: no rkit_ prefix"
    if [[ $name == *_total ]]; then want=counter; else want=gauge; fi
    [[ $type == "$want" ]] || fail "$name is a $type"
  done < <(grep '^# TYPE ' <<<"$body")
  # Compressed for a scraper that accepts gzip, as Prometheus does.
  run -0 python3 -c '
import gzip, sys, urllib.request
r = urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers={"Accept-Encoding": "gzip"}), timeout=20)
body = r.read()
print(r.headers.get("Content-Encoding"), gzip.decompress(body).decode().splitlines()[0])' "$SERVE_URL"
  assert_output "gzip # HELP rkit_build_info The rtop that serves these metrics: version and git revision; always 1."
  run http_get "${SERVE_URL%metrics}"
  assert_output "rtop serve: Prometheus metrics are at /metrics"
  run http_head "${SERVE_URL%metrics}nothing-here"
  assert_output --regexp '^404 '
}

@test "serve: node CPUs, memory and CPU time agree with /proc" {
  start_serve --interval 200ms
  # Once a CPU window has passed, the utilisation is there.
  for _ in $(seq 100); do
    run -0 http_get "$SERVE_URL"
    body=$output
    [[ -n $(sample_value rkit_node_cpu_utilization_ratio <<<"$body") ]] && break
    sleep 0.05
  done
  assert_equal "$(sample_value rkit_node_cpus <<<"$body")" "$(getconf _NPROCESSORS_ONLN)"
  assert_equal "$(sample_value rkit_node_memory_total_bytes <<<"$body")" \
    "$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)"
  avail=$(sample_value rkit_node_memory_available_bytes <<<"$body")
  ((avail > 0 && avail <= $(sample_value rkit_node_memory_total_bytes <<<"$body")))
  # CPU seconds: /proc/stat's aggregate line in USER_HZ ticks, busy + idle = their sum.
  busy=$(sample_value 'rkit_node_cpu_seconds_total{mode="busy"}' <<<"$body")
  idle=$(sample_value 'rkit_node_cpu_seconds_total{mode="idle"}' <<<"$body")
  proc=$(awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%.2f\n", ($2+$3+$4+$5+$6+$7+$8+$9) / hz; exit }' /proc/stat)
  awk -v b="$busy" -v i="$idle" -v p="$proc" 'BEGIN { exit !(b > 0 && i > 0 && b + i <= p + 0.01 && b + i > p - 60) }' ||
    fail "busy $busy + idle $idle against /proc/stat's $proc"
  util=$(sample_value rkit_node_cpu_utilization_ratio <<<"$body")
  awk -v u="$util" 'BEGIN { exit !(u != "" && u >= 0 && u <= 1) }' || fail "utilization '$util'"
  # Load averages as /proc/loadavg has them (they change only every 5 s).
  [[ -n $(sample_value rkit_node_load1 <<<"$body") && -n $(sample_value rkit_node_load15 <<<"$body") ]]
  # Counters grow between scrapes (once /proc/stat has counted another tick), and never fall.
  for _ in $(seq 100); do
    body2=$(http_get "$SERVE_URL")
    busy2=$(sample_value 'rkit_node_cpu_seconds_total{mode="busy"}' <<<"$body2")
    idle2=$(sample_value 'rkit_node_cpu_seconds_total{mode="idle"}' <<<"$body2")
    awk -v a="$busy" -v b="$busy2" -v c="$idle" -v d="$idle2" 'BEGIN { exit !(b + d > a + c) }' && break
    sleep 0.05
  done
  awk -v a="$busy" -v b="$busy2" -v c="$idle" -v d="$idle2" 'BEGIN { exit !(b >= a && d >= c && b + d > a + c) }'
}

@test "serve: the fake NVML's GPUs with DCGM's meanings in base units; energy counts up" {
  [[ -f $FAKE_NVML ]] || fail "$FAKE_NVML is missing: build the fake_nvml target (tests on)"
  export RKIT_NVML_LIBRARY=$FAKE_NVML
  start_serve --no-queue
  run -0 http_get "$SERVE_URL"
  body=$output
  g0='{gpu="0",uuid="GPU-fake-0000",model="FAKE NVML GPU 0"}'
  g1='{gpu="1",uuid="GPU-fake-0001",model="FAKE NVML GPU 1"}'
  assert_equal "$(sample_value rkit_nvml_up <<<"$body")" 1
  assert_equal "$(sample_value "rkit_gpu_utilization_ratio$g0" <<<"$body")" 0.37
  assert_equal "$(sample_value "rkit_gpu_utilization_ratio$g1" <<<"$body")" 0.37
  assert_equal "$(sample_value "rkit_gpu_memory_used_bytes$g0" <<<"$body")" $((20 << 30))
  assert_equal "$(sample_value "rkit_gpu_memory_free_bytes$g0" <<<"$body")" $((60 << 30))
  assert_equal "$(sample_value "rkit_gpu_memory_total_bytes$g1" <<<"$body")" $((80 << 30))
  assert_equal "$(sample_value "rkit_gpu_power_watts$g1" <<<"$body")" 312.5
  run promtool check metrics <<<"$body"
  assert_success
  # The fake's counter: (index + 1) × 10^6 J at its start, then 312.5 W.
  e1=$(sample_value "rkit_gpu_energy_joules_total$g1" <<<"$body")
  # The counter grows at 312.5 W: half a second's worth shows within a few seconds'.
  t1=$EPOCHREALTIME
  for _ in $(seq 200); do
    e2=$(http_get "$SERVE_URL" | sample_value "rkit_gpu_energy_joules_total$g1")
    awk -v a="$e1" -v b="$e2" 'BEGIN { exit !(b - a >= 312.5 * 0.5) }' && break
    sleep 0.05
  done
  awk -v a="$e1" -v b="$e2" -v t="$(awk -v a="$t1" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" \
    'BEGIN { d = b - a; exit !(a >= 2e6 && a < 2e6 + 1000 && d >= 312.5 * 0.5 && d < 312.5 * (t + 1)) }' ||
    fail "energy $e1 then $e2"
  stop_serve

  # A GPU NVML refuses is left out and the indices count the others, as in rtop --json;
  # a GPU without an energy counter (before Volta) has no energy series.
  RKIT_FAKE_NVML_GPUS=3 RKIT_FAKE_NVML_DENY=1 RKIT_FAKE_NVML_NO_ENERGY=1 start_serve --no-queue
  run -0 http_get "$SERVE_URL"
  body=$output
  run grep -c '^rkit_gpu_power_watts' <<<"$body"
  assert_output 2
  assert_equal "$(sample_value 'rkit_gpu_power_watts{gpu="1",uuid="GPU-fake-0002",model="FAKE NVML GPU 2"}' <<<"$body")" 312.5
  run grep -c energy <<<"$body"
  assert_output 0
  stop_serve

  start_serve --no-queue --no-nvml
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value rkit_nvml_up <<<"$body")" 0
  run grep -c '^rkit_gpu_' <<<"$body"
  assert_output 0
}

@test "serve: without NVML, no GPU series and rkit_nvml_up 0" {
  start_serve --no-queue
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value rkit_nvml_up <<<"$body")" 0
  run grep -c '^rkit_gpu_' <<<"$body"
  assert_output 0
}

@test "serve: the rsub queue per tenant, held jobs as pending, and the cost rate of running jobs" {
  cat >prices.toml <<'EOF'
currency = "EUR"
[backends.local]
cpu_hour = 0.5
memory_gib_hour = 0.25
gpu_hour = { default = 2.0, H100 = 3.0 }
EOF
  for _ in 1 2 3; do rsub -q --hold -t desk-a -g 1 -- true >/dev/null; done
  rsub -q --hold -t 'desk "b"' -c 2 -- true >/dev/null
  # One running job of desk-b: 1 core, 1 GiB, 1 GPU of any type = 0.5 + 0.25 + 2.0 an hour.
  id=$(rsub -t 'desk "b"' -g 1 --mem 1G -- sleep 60)
  wait_state "$id" RUNNING
  start_serve --prices prices.toml
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value rkit_queue_up <<<"$body")" 1
  assert_equal "$(sample_value 'rkit_queue_jobs{tenant="desk-a",state="pending"}' <<<"$body")" 3
  assert_equal "$(sample_value 'rkit_queue_jobs{tenant="desk-a",state="running"}' <<<"$body")" 0
  assert_equal "$(sample_value 'rkit_queue_gpus{tenant="desk-a",state="pending"}' <<<"$body")" 3
  # The tenant's name, quotes and space included, escaped as the format says.
  assert_line 'rkit_queue_jobs{tenant="desk \"b\"",state="pending"} 1'
  assert_line 'rkit_queue_jobs{tenant="desk \"b\"",state="running"} 1'
  assert_line 'rkit_queue_cpus{tenant="desk \"b\"",state="pending"} 2'
  assert_line 'rkit_queue_gpus{tenant="desk \"b\"",state="running"} 1'
  assert_line 'rkit_tenant_cost_per_hour{tenant="desk \"b\"",currency="EUR"} 2.75'
  assert_equal "$(sample_value 'rkit_tenant_cost_per_hour{tenant="desk-a",currency="EUR"}' <<<"$body")" 0
  age=$(sample_value 'rkit_queue_oldest_pending_age_seconds{tenant="desk-a"}' <<<"$body")
  awk -v a="$age" 'BEGIN { exit !(a > 0 && a < 120) }' || fail "age $age"
  # No user label anywhere: users are not a bounded label set.
  refute_line --partial 'user='
  run promtool check metrics <<<"$body"
  assert_success

  # The job ends: its tenant's cost falls to 0 at the next scrape.
  rsub cancel "$id" >/dev/null
  wait_state "$id" CANCELLED
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_line 'rkit_tenant_cost_per_hour{tenant="desk \"b\"",currency="EUR"} 0'
  assert_line 'rkit_queue_jobs{tenant="desk \"b\"",state="running"} 0'
}

@test "serve: the price sheet comes from rcost.prices; without one there is no cost metric" {
  mkdir etc
  printf 'currency = "CHF"\n[backends.local]\ncpu_hour = 1\n' >etc/prices.toml
  printf '[local]\ncpus = 2\ngpus = 2\n[rcost]\nprices = "prices.toml"\n' >etc/rkit.toml
  rsub --config etc/rkit.toml -q --hold -t desk-a -- true >/dev/null
  start_serve --config etc/rkit.toml
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value 'rkit_tenant_cost_per_hour{tenant="desk-a",currency="CHF"}' <<<"$body")" 0
  stop_serve
  start_serve
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value 'rkit_queue_jobs{tenant="desk-a",state="pending"}' <<<"$body")" 1
  run grep -c rkit_tenant_cost_per_hour <<<"$body"
  assert_output 0
}

@test "serve reads rsub.state_dir, never asks a remote backend, and counts only local jobs" {
  # A Kubernetes backend through the FAKE kubectl (tests/fakes), which records each call.
  export FAKE_KUBE_DIR=$BATS_TEST_TMPDIR/kube
  mkdir -p "$FAKE_KUBE_DIR"
  cat >"$RKIT_CONFIG" <<EOF
[local]
cpus = 2
gpus = 2
[rsub]
state_dir = "$BATS_TEST_TMPDIR/elsewhere/rsub"
[rsub.backends.gke]
kind = "kubernetes"
kubectl = "$RKIT_ROOT/tests/fakes/fake_kubectl"
context = "gke-prod"
namespace = "research"
image = "registry.example/ml:1"
queues = { desk-r = "desk-r-queue" }
refresh = "0s"
submit_retry = "1s"
EOF
  rsub -q --hold -t desk-x -- true >/dev/null
  rsub -q --backend gke -t desk-r -g 1 -- true >/dev/null
  [[ -f elsewhere/rsub/jobs.db ]]
  touch kube/down  # kubectl fails from now on, as with no API server
  rm kube/calls
  run -0 --separate-stderr rsub ls --json
  assert_equal "$(jq -s -c 'map([.backend, .tenant, .state])' <<<"$output")" \
    '[["local","desk-x","PENDING"],["gke","desk-r","PENDING"]]'
  [[ -s kube/calls ]]  # rsub ls asked kubectl
  rm kube/calls
  start_serve
  run -0 http_get "$SERVE_URL"
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value 'rkit_queue_jobs{tenant="desk-x",state="pending"}' <<<"$body")" 1
  assert_equal "$(sample_value 'rkit_queue_up' <<<"$body")" 1
  run grep -c 'desk-r' <<<"$body"
  assert_output 0
  [[ ! -e kube/calls ]] || fail "rtop serve made rsub call kubectl: $(cat kube/calls)"
  run cat "$BATS_TEST_TMPDIR/serve.err"
  assert_output ""
}

@test "serve: a queue that cannot be read is rkit_queue_up 0 and counted; the rest is served" {
  export RKIT_RSUB=/bin/false
  start_serve
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value rkit_queue_up <<<"$body")" 0
  assert_equal "$(sample_value 'rkit_scrape_errors_total{source="queue"}' <<<"$body")" 1
  run grep -c '^rkit_queue_jobs' <<<"$body"
  assert_output 0
  [[ -n $(sample_value rkit_node_cpus <<<"$body") ]]
  run -0 http_get "$SERVE_URL"
  body=$output
  assert_equal "$(sample_value 'rkit_scrape_errors_total{source="queue"}' <<<"$body")" 2
  # One warning for the same error, however many scrapes meet it.
  run cat "$BATS_TEST_TMPDIR/serve.err"
  assert_output "rtop: warning: queue: rsub ls: exit 1"
  stop_serve
  # -q: no warning.
  start_serve -q
  http_get "$SERVE_URL" >/dev/null
  run cat "$BATS_TEST_TMPDIR/serve.err"
  assert_output ""
}

@test "serve: a queue that does not answer costs no more than the scraper's timeout allows" {
  export RKIT_RSUB=$BATS_TEST_TMPDIR/rsub-that-hangs
  printf '#!/bin/sh\nexec sleep 30\n' >"$RKIT_RSUB"
  chmod +x "$RKIT_RSUB"
  start_serve
  # Prometheus says its scrape timeout in this header; rtop waits for rsub less than that.
  run -0 python3 -c '
import sys, time, urllib.request
t = time.monotonic()
r = urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers={"X-Prometheus-Scrape-Timeout-Seconds": "1.5"}), timeout=20)
body = r.read().decode()
print(round(time.monotonic() - t, 1) < 1.5, "rkit_queue_up 0" in body.splitlines())' "$SERVE_URL"
  assert_output "True True"
  run cat "$BATS_TEST_TMPDIR/serve.err"
  assert_output --regexp '^rtop: warning: queue: rsub ls: no answer within (0\.9|1\.0) s$'
}

@test "serve --no-queue: no queue metrics and rsub is not run" {
  export RKIT_RSUB=$BATS_TEST_TMPDIR/rsub-that-records
  printf '#!/bin/sh\ntouch "%s/rsub-ran"\n' "$BATS_TEST_TMPDIR" >"$RKIT_RSUB"
  chmod +x "$RKIT_RSUB"
  start_serve --no-queue
  run -0 http_get "$SERVE_URL"
  body=$output
  run grep -c 'rkit_queue\|source="queue"' <<<"$body"
  assert_output 0
  [[ ! -e $BATS_TEST_TMPDIR/rsub-ran ]]
  stop_serve
  start_serve
  http_get "$SERVE_URL" >/dev/null
  [[ -e $BATS_TEST_TMPDIR/rsub-ran ]]
}

@test "serve: a bad --listen is a usage error; a port in use is 69, each one line" {
  for bad in 9464 127.0.0.1 127.0.0.1:65536 127.0.0.1:http ::1:9464 '[::1]' ''; do
    run --separate-stderr rtop serve --listen "$bad"
    assert_failure 64
    assert_one_line_stderr
    [[ $stderr == "rtop: error: --listen $bad: "* ]] || fail "$bad: $stderr"
  done
  run --separate-stderr rtop serve --listen 192.0.2.1:0  # TEST-NET-1: no address of this machine
  assert_failure 64
  assert_one_line_stderr
  start_serve
  run --separate-stderr rtop serve --listen "127.0.0.1:$SERVE_PORT"
  assert_failure 69
  assert_one_line_stderr
  assert_equal "$stderr" "rtop: error: --listen 127.0.0.1:$SERVE_PORT: address already in use (hint: another program listens there: choose another port, or port 0 for any free one)"
  # The first one still serves.
  http_get "$SERVE_URL" >/dev/null
}

@test "serve: options that do not apply, bad --interval and bad price sheets" {
  run --separate-stderr rtop serve --json --listen 127.0.0.1:0
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop --synthetic "pack:1 core:2 pu:1" serve --listen 127.0.0.1:0
  assert_failure 64
  assert_one_line_stderr
  run --separate-stderr rtop serve --no-queue --prices x.toml --listen 127.0.0.1:0
  assert_failure 64
  assert_one_line_stderr
  for interval in 0s 2d soon; do
    run --separate-stderr rtop serve --interval "$interval" --listen 127.0.0.1:0
    assert_failure 64
    assert_one_line_stderr
  done
  run --separate-stderr rtop serve --prices missing.toml --listen 127.0.0.1:0
  assert_failure 66
  assert_one_line_stderr
  printf '[backends.slurm]\ncpu_hour = 1\n' >slurm-only.toml
  run --separate-stderr rtop serve --prices slurm-only.toml --listen 127.0.0.1:0
  assert_failure 65
  assert_one_line_stderr
  [[ $stderr == *local* ]] || fail "$stderr"
  printf '[rcost]\nprices = 3\n' >bad.toml
  run --separate-stderr rtop --config bad.toml serve --listen 127.0.0.1:0
  assert_failure 78
  assert_one_line_stderr
}

@test "serve stops on SIGTERM and SIGINT, ending of that signal, and frees its port" {
  start_serve
  port=$SERVE_PORT
  http_get "$SERVE_URL" >/dev/null
  stop_serve
  assert_equal "$SERVE_STATUS" 143
  # The port can be taken again at once.
  run --separate-stderr timeout 5 python3 -c "
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $port)); print('bound')"
  assert_output bound
  start_serve
  kill -INT "$SERVE_PID"
  status=0
  wait "$SERVE_PID" || status=$?
  SERVE_PID=
  assert_equal "$status" 130
}

# --- hostile clients (rtop(1), SECURITY) ------------------------------------------------

@test "serve refuses a 1 GB body (or head) at once, having read little of it, and its memory stays small" {
  start_serve --no-queue
  rss=$(serve_status VmRSS)
  for method in POST GET chunked head; do
    run -0 attack_big_body "$SERVE_PORT" "$method"
    case $method in
      chunked) want=411 ;;  # a body of no stated length
      head) want=400 ;;     # a head beyond 16 KiB
      *) want=413 ;;
    esac
    [[ $output =~ ^status=$want\ how=answer\ sent=([0-9]+)\ after=([0-9.]+)$ ]] || fail "$method: $output"
    # Answered before the client could send 1 GB: it sent no more than the kernel's
    # socket buffers took (a few MiB).
    ((BASH_REMATCH[1] < 64 << 20)) || fail "$method: the client sent ${BASH_REMATCH[1]} bytes before the answer"
    awk -v t="${BASH_REMATCH[2]}" 'BEGIN { exit !(t < 2) }' || fail "$method: the answer took ${BASH_REMATCH[2]} s"
  done
  # The peak of its memory (VmHWM) is within 16 MiB of what it was before.
  hwm=$(serve_status VmHWM)
  ((hwm < rss + 16384)) || fail "peak VmHWM $hwm kB; VmRSS $rss kB before"
  run -0 http_get "$SERVE_URL"
  [[ -n $(sample_value rkit_node_cpus <<<"$output") ]]
}

@test "serve: 8 clients sending a byte every 0.5 s hold no worker, a scrape answers in under 1 s, and each is cut 5 s after its connect" {
  start_serve --no-queue
  sockets=$(serve_sockets)  # its listener
  attack_slow "$SERVE_PORT" 8 12 "$BATS_TEST_TMPDIR/slow.ready" >"$BATS_TEST_TMPDIR/slow.out" 3>&- &
  SLOW_PID=$!
  wait_until 10 test -e "$BATS_TEST_TMPDIR/slow.ready"
  wait_until 10 serve_has_sockets $((sockets + 8))
  for _ in 1 2 3; do
    run -0 timed_scrape "$SERVE_URL"
    [[ $output =~ ^200\ ([0-9.]+)$ ]] || fail "$output"
    awk -v t="${BASH_REMATCH[1]}" 'BEGIN { exit !(t < 1) }' || fail "a scrape took ${BASH_REMATCH[1]} s beside 8 slow clients"
  done
  wait "$SLOW_PID"
  SLOW_PID=
  # Each was closed at its deadline, 5 s after its connect, without an answer; a timeout
  # per read (5 s) would never have come, with a byte every 0.5 s.
  run cat "$BATS_TEST_TMPDIR/slow.out"
  [[ $output =~ ^closed=8\ answered=0\ first=([0-9.]+)\ last=([0-9.]+)$ ]] || fail "$output"
  awk -v a="${BASH_REMATCH[1]}" -v b="${BASH_REMATCH[2]}" 'BEGIN { exit !(a >= 4.5 && b < 7) }' || fail "$output"
}

@test "serve: a flood of 300 silent connections: the oldest beyond 256 are closed at once with a 503, a scrape still answers, no thread is added" {
  start_serve --no-queue
  threads=$(serve_status Threads)
  run -0 attack_flood "$SERVE_PORT" 300
  [[ $output =~ ^refused=([0-9]+)\ busy=([0-9]+)\ scrape=200\ scrape_s=([0-9.]+)\ left=([0-9]+)\ threads=([0-9]+)$ ]] ||
    fail "$output"
  ((BASH_REMATCH[1] == 44 && BASH_REMATCH[2] == 44 && BASH_REMATCH[4] == 256)) || fail "$output"
  awk -v t="${BASH_REMATCH[3]}" 'BEGIN { exit !(t < 1) }' || fail "the scrape took ${BASH_REMATCH[3]} s: $output"
  assert_equal "${BASH_REMATCH[5]}" "$threads"
  # The clients gone, it holds its listener only, and serves as before.
  wait_until 10 eval '(($(serve_sockets) == 1))'
  run -0 http_get "$SERVE_URL"
}

@test "serve listens only on the address --listen names, and rsub inherits none of its sockets" {
  export RKIT_RSUB=$BATS_TEST_TMPDIR/rsub-that-lists-its-fds
  printf '#!/bin/sh\nls -l /proc/$$/fd >"%s/rsub-fds"\n' "$BATS_TEST_TMPDIR" >"$RKIT_RSUB"
  chmod +x "$RKIT_RSUB"
  SERVE_LISTEN=127.0.0.2:0 start_serve --no-nvml -q
  assert_equal "$SERVE_URL" "http://127.0.0.2:$SERVE_PORT/metrics"
  # /proc/net/tcp: one listener on the port (state 0A), at 127.0.0.2 only.
  tables=(/proc/net/tcp)
  [[ ! -e /proc/net/tcp6 ]] || tables+=(/proc/net/tcp6)
  run awk -v p="$(printf '%04X' "$SERVE_PORT")" '$4 == "0A" && $2 ~ ":" p "$" { print $2 }' "${tables[@]}"
  assert_output "0200007F:$(printf '%04X' "$SERVE_PORT")"
  run -0 http_get "$SERVE_URL"
  run python3 -c "import socket; socket.create_connection(('127.0.0.1', $SERVE_PORT), timeout=5)"
  assert_failure
  assert_output --partial ConnectionRefusedError
  # The scrape ran the stand-in rsub: it had no socket of the server's (a daemon it
  # started would otherwise hold the port after rtop ends).
  [[ -s $BATS_TEST_TMPDIR/rsub-fds ]]
  run grep -c 'socket:' "$BATS_TEST_TMPDIR/rsub-fds"
  assert_output 0
}
