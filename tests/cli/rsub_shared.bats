#!/usr/bin/env bats
# rsub as a shared service, attacked: a root daemon (rsub daemon --foreground, as the
# systemd unit runs it) owns the store in a directory of its own and listens on a socket
# in another; two unprivileged users, made for this file and removed after it, submit
# through it and try what a hostile user of a shared machine would. Every attack must be
# refused or contained, and the victim's jobs must run and finish untouched. Needs root.
bats_require_minimum_version 1.5.0

ALICE=rkit-t-alice BOB=rkit-t-bob BGROUP=rkit-t-bgrp

setup_file() {
  load helpers
  [[ $(id -u) -eq 0 ]] || { echo "rsub_shared.bats needs root (it makes users and a root daemon)" >&2; return 1; }
  for u in "$ALICE" "$BOB"; do userdel "$u" 2>/dev/null || true; done
  groupdel "$BGROUP" 2>/dev/null || true
  groupadd "$BGROUP"
  useradd --no-create-home --shell /bin/sh --user-group "$ALICE"
  useradd --no-create-home --shell /bin/sh --user-group -G "$BGROUP" "$BOB"
  export SHARED=$(mktemp -d /tmp/rsub-shared.XXXXXX)
  chmod 755 "$SHARED"
  mkdir -p "$SHARED/etc" "$SHARED/home/$ALICE" "$SHARED/home/$BOB"
  chown "$ALICE:" "$SHARED/home/$ALICE"
  chown "$BOB:" "$SHARED/home/$BOB"
  chmod 700 "$SHARED/home/$ALICE" "$SHARED/home/$BOB"
  cat >"$SHARED/etc/rkit.toml" <<EOF
[local]
cpus = 2
gpus = 0
memory = "4G"
[rsub]
state_dir = "$SHARED/state/rsub"
socket = "$SHARED/run/rsub.sock"
kill_grace = "1s"
[rsub.limits]
max_pids_per_job = 64
[rsub.users]
$ALICE = "desk-a"
$BOB = "desk-b"
[rsub.tenants.desk-a]
users = ["$ALICE"]
[rsub.tenants.desk-b]
groups = ["$BGROUP"]
[rsub.backends.gke]
kind = "kubernetes"
kubectl = "$SHARED/bin/kubectl"
image = "registry.example/ml:1"
queues = { desk-a = "desk-a-queue" }
refresh = "0s"
submit_retry = "1s"
EOF
  # The FAKE kubectl (tests/fakes/fake_kubectl) as each user's own kubeconfig would make
  # it: root, the daemon, sees the cluster in kube/; any other user another, empty one
  # (kube-other/). Every call is logged with its uid in kube/uids.
  mkdir -p "$SHARED/bin" "$SHARED/kube" "$SHARED/kube-other"
  cp "$RKIT_ROOT/tests/fakes/fake_kubectl" "$SHARED/bin/fake_kubectl"
  cat >"$SHARED/bin/kubectl" <<WRAPPER
#!/bin/sh
dir=$SHARED/kube-other
[ "\$(id -u)" -eq 0 ] && dir=$SHARED/kube
echo "\$(id -u) \$*" >>$SHARED/kube/uids
FAKE_KUBE_DIR=\$dir exec $SHARED/bin/fake_kubectl "\$@"
WRAPPER
  chmod 755 "$SHARED/bin" "$SHARED/bin/kubectl" "$SHARED/bin/fake_kubectl"
  for d in kube kube-other; do
    echo '{"items": []}' >"$SHARED/$d/jobs.json"
    touch "$SHARED/$d/calls" "$SHARED/$d/applied.json"
    chmod 666 "$SHARED/$d"/*
    chmod 777 "$SHARED/$d"
  done
  touch "$SHARED/kube/uids"
  chmod 666 "$SHARED/kube/uids"
  # The daemon's own environment holds a secret no job may see.
  DAEMON_SECRET=hunter2 rsub --config "$SHARED/etc/rkit.toml" daemon --foreground >"$SHARED/daemon.log" 2>&1 &
  echo $! >"$SHARED/daemon.pid"
  for _ in $(seq 100); do [[ -S $SHARED/run/rsub.sock ]] && break; sleep 0.05; done
  [[ -S $SHARED/run/rsub.sock ]]
}

teardown_file() {
  local pid
  pid=$(cat "$SHARED/daemon.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  pkill -KILL -u "$ALICE" 2>/dev/null || true
  pkill -KILL -u "$BOB" 2>/dev/null || true
  userdel "$ALICE" 2>/dev/null || true
  userdel "$BOB" 2>/dev/null || true
  groupdel "$BGROUP" 2>/dev/null || true
  rm -rf "$SHARED"
}

setup() {
  load helpers
  export RKIT_CONFIG=$SHARED/etc/rkit.toml
}

# as USER CMD...: runs CMD as USER (its groups from the group database), from its home,
# with a plain environment that names the shared configuration.
as() {
  local user=$1
  shift
  (cd "$SHARED/home/$user" && setpriv --reuid="$user" --regid="$user" --init-groups \
    env -i PATH="$PATH" HOME="$SHARED/home/$user" RKIT_CONFIG="${USER_CONFIG:-$RKIT_CONFIG}" \
    XDG_CONFIG_HOME=/nonexistent "$@")
}

# A raw client: sends the JSON request $2 (or the file @$2 holds) to the socket $1 as the
# protocol frames it, prints what comes back on stdout and stderr, exits with the
# daemon's code.
raw_client() {
  python3 - "$@" <<'PY'
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
body = open(sys.argv[2][1:], "rb").read() if sys.argv[2].startswith("@") else sys.argv[2].encode()
s.sendall(b"q" + struct.pack("<I", len(body)) + body)
def exact(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: sys.exit(99)
        b += c
    return b
while True:
    kind, n = struct.unpack("<cI", exact(5))
    data = exact(n)
    if kind == b"x": sys.exit(struct.unpack("<i", data)[0])
    (sys.stdout if kind == b"o" else sys.stderr).buffer.write(data)
PY
}

job_state() { rsub show "$1" --json | jq -r .state; }

@test "shared: a job runs as its submitter, with the submitter's environment, never the daemon's" {
  id=$(as "$ALICE" env MY_VAR=mine rsub -- sh -c 'echo "uid=$(id -u) var=$MY_VAR secret=${DAEMON_SECRET-unset} job=$RSUB_JOB_ID"')
  run -0 as "$ALICE" rsub wait "$id"
  run -0 as "$ALICE" rsub logs "$id"
  assert_output "uid=$(id -u "$ALICE") var=mine secret=unset job=$id"
  rsub show "$id" --json | jq -e --arg u "$ALICE" '.user == $u and .tenant == "desk-a"'
  # The output is the user's: 0600, theirs, in the daemon's private directory.
  log=$SHARED/state/rsub/logs/$id/task-0.out
  [[ $(stat -c '%U %a' "$log") == "$ALICE 600" ]]
  [[ $(stat -c '%U %a' "$SHARED/state/rsub") == "root 700" ]]
}

@test "shared: nothing in the state or socket directory can be read, written, replaced or locked by a user" {
  id=$(as "$ALICE" rsub -- true)
  run -0 as "$ALICE" rsub wait "$id"
  dir=$SHARED/state/rsub
  run as "$BOB" ls "$dir"
  assert_failure
  run as "$BOB" sh -c "echo x >$dir/jobs.db"
  assert_failure
  run as "$BOB" sqlite3 "$dir/jobs.db" "UPDATE jobs SET uid = 0"
  assert_failure
  run as "$BOB" flock -n "$dir/daemon.lock" true
  assert_failure
  run as "$BOB" ln -s /etc/shadow "$dir/logs/$id/task-0.out.2"
  assert_failure
  run as "$BOB" mv "$SHARED/state" "$SHARED/home/$BOB/stolen"
  assert_failure
  # The socket: nobody else may remove it or bind one in its place.
  run as "$BOB" rm -f "$SHARED/run/rsub.sock"
  assert_failure
  run as "$BOB" python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('$SHARED/run/other.sock')"
  assert_failure
  # The socket is still the root daemon's.
  [[ $(stat -c %U "$SHARED/run/rsub.sock") == root ]]
  assert_equal "$(job_state "$id")" COMPLETED
}

@test "shared: identity is the kernel's; a request naming root or another user runs as its sender" {
  uid=$(id -u "$ALICE")
  req=$(jq -cn --arg cwd "$SHARED/home/$ALICE" '{cmd: "submit", user: "root", uid: 0,
    spec: {name: "forged", user: "root", uid: 0, tenant: "desk-a", command: ["sh", "-c", "id -u"], workdir: $cwd},
    environ: ["PATH=/usr/bin:/bin"]}')
  run -0 as "$ALICE" bash -c "$(declare -f raw_client); raw_client '$SHARED/run/rsub.sock' '$req'"
  id=$output
  run -0 as "$ALICE" rsub wait "$id"
  run -0 as "$ALICE" rsub logs "$id"
  assert_output "$uid"
  rsub show "$id" --json | jq -e --arg u "$ALICE" --argjson uid "$uid" '.user == $u and .uid == $uid'
  # Garbage, an oversized frame and a silent connection are refused without harm.
  run as "$ALICE" python3 -c "
import socket, struct
for data in [b'garbage', b'q' + struct.pack('<I', 1 << 30), b'q' + struct.pack('<I', 5) + b'{oops']:
    s = socket.socket(socket.AF_UNIX); s.connect('$SHARED/run/rsub.sock'); s.sendall(data); s.settimeout(10)
    try: s.recv(100)
    except Exception: pass
"
  run -0 as "$ALICE" rsub ls
  # Asking the daemon to store or build too much is refused before it does.
  big=$SHARED/home/$ALICE/big.json
  python3 -c "
import json
print(json.dumps({'cmd': 'submit', 'spec': {'name': 'big', 'command': ['true'] + ['A' * 65536] * 4,
  'workdir': '/tmp', 'hold': True, 'array': {'indices': list(range(100000))}}}))" >"$big"
  chown "$ALICE" "$big"
  run --separate-stderr as "$ALICE" bash -c "$(declare -f raw_client); raw_client '$SHARED/run/rsub.sock' '@$big'"
  assert_failure 65
  [[ $stderr == *"would store"* ]]
  python3 -c "print('[' * 100000 + ']' * 100000)" >"$big"
  run --separate-stderr as "$ALICE" bash -c "$(declare -f raw_client); raw_client '$SHARED/run/rsub.sock' '@$big'"
  assert_failure 65
  [[ $stderr == *"nested deeper"* ]]
  run -0 as "$ALICE" rsub show "$id" $(printf "$id %.0s" $(seq 500)) --json
  assert_equal "${#lines[@]}" 1  # each job once, however often named
}

@test "shared: another user's logs, env, cancel, hold and release are refused, also with a hostile --config" {
  victim=$(as "$BOB" rsub --hold -e TOKEN=bobs -- sh -c 'echo victim ran')
  cat >"$SHARED/home/$ALICE/hostile.toml" <<EOF
[rsub]
socket = "$SHARED/run/rsub.sock"
admins = ["$ALICE"]
EOF
  chown "$ALICE" "$SHARED/home/$ALICE/hostile.toml"
  for config in "$RKIT_CONFIG" "$SHARED/home/$ALICE/hostile.toml"; do
    export USER_CONFIG=$config
    for verb in cancel hold release; do
      run --separate-stderr as "$ALICE" rsub "$verb" "$victim"
      assert_failure 77
      assert_one_line_stderr
      [[ $stderr == *"belongs to $BOB"* ]]
    done
    run --separate-stderr as "$ALICE" rsub logs "$victim"
    assert_failure 77
  done
  unset USER_CONFIG
  as "$ALICE" rsub show "$victim" --json | jq -e '.env == null'
  as "$BOB" rsub show "$victim" --json | jq -e '.env == {"TOKEN": "bobs"}'
  # The victim's job runs and finishes untouched.
  as "$BOB" rsub release "$victim"
  run -0 as "$BOB" rsub wait "$victim"
  run -0 as "$BOB" rsub logs "$victim"
  assert_output "victim ran"
}

@test "shared: a remote job is changed as its user, read as the daemon; another user's view of the backend decides nothing" {
  id=$(as "$ALICE" rsub --backend gke -- sleep 99)
  name=${id#gke:}
  # The cluster the daemon reads runs it.
  jq --arg n "$name" '.items += [{"metadata": {"name": $n, "labels": {"rkit.io/backend": "gke"}}, "spec": {},
    "status": {"active": 1, "startTime": "2026-11-30T10:00:00Z"}}]' "$SHARED/kube/jobs.json" >"$SHARED/kube/j"
  cat "$SHARED/kube/j" >"$SHARED/kube/jobs.json"
  # Bob's kubectl lists another, empty cluster: had the states been read as him, his
  # `rsub ls` would have made Alice's job LOST.
  run -0 as "$BOB" rsub ls --all
  run -0 as "$ALICE" rsub show "$id" --json
  jq -e '.state == "RUNNING"' <<<"$output"
  uid=$(id -u "$ALICE")
  grep -q "^$uid .*create -f -" "$SHARED/kube/uids"
  grep -q '^0 .*get jobs' "$SHARED/kube/uids"
  run -1 grep -e '^[1-9][0-9]* .*get jobs' "$SHARED/kube/uids"  # no user's `get jobs`
  run -0 as "$ALICE" rsub cancel "$id"
  grep -q "^$uid .*delete .*job/$name" "$SHARED/kube/uids"
  run -0 as "$ALICE" rsub show "$id" --json
  jq -e '.state == "CANCELLED"' <<<"$output"
}

@test "shared: a tenant not theirs is refused with 77; the default comes from rsub.users; groups grant tenants" {
  run --separate-stderr as "$ALICE" rsub --tenant desk-b -- true
  assert_failure 77
  assert_one_line_stderr
  [[ $stderr == *"tenant desk-b"* ]]
  run --separate-stderr as "$ALICE" rsub --tenant nobodys -- true
  assert_failure 77
  id=$(as "$BOB" rsub --tenant desk-b -- true)  # through its group
  rsub show "$id" --json | jq -e '.tenant == "desk-b"'
  id=$(as "$ALICE" rsub -- true)
  rsub show "$id" --json | jq -e '.tenant == "desk-a"'
}

@test "shared: the client refuses a listener of another user, and a daemon that is down is 69 with nothing done" {
  rogue=$SHARED/home/$BOB/rogue.sock
  as "$BOB" python3 -c "
import socket, os
s = socket.socket(socket.AF_UNIX); s.bind('$rogue'); os.chmod('$rogue', 0o777); s.listen(8)
open('$rogue.ready', 'w').close()
while True: s.accept()[0].close()
" &
  rogue_pid=$!
  for _ in $(seq 100); do [[ -e $rogue.ready ]] && break; sleep 0.05; done
  chmod 711 "$SHARED/home/$BOB"
  printf '[rsub]\nsocket = "%s"\n' "$rogue" >"$SHARED/etc/rogue.toml"
  USER_CONFIG=$SHARED/etc/rogue.toml run --separate-stderr as "$ALICE" rsub -- true
  kill "$rogue_pid"
  chmod 700 "$SHARED/home/$BOB"
  assert_failure 77
  assert_one_line_stderr
  [[ $stderr == *"runs as uid $(id -u "$BOB")"* ]]
  before=$(rsub ls --all --json | wc -l)
  printf '[rsub]\nsocket = "%s/run/none.sock"\n' "$SHARED" >"$SHARED/etc/down.toml"
  USER_CONFIG=$SHARED/etc/down.toml run --separate-stderr as "$ALICE" rsub -- true
  assert_failure 69
  assert_one_line_stderr
  assert_equal "$(rsub ls --all --json | wc -l)" "$before"
  [[ ! -e $SHARED/run/none.sock ]]
}

@test "shared: limits hold: cores, memory, a setsid child past the time limit, a fork bomb; the victim finishes" {
  victim=$(as "$BOB" rsub -- sh -c 'sleep 4; echo victim ok')
  # Cores: a one-core job cannot widen its affinity to the machine's.
  cores=$(as "$ALICE" rsub -c 1 -- sh -c 'taskset -pc 0-1 $$ >/dev/null 2>&1; grep Cpus_allowed_list /proc/self/status')
  # Memory: 20 MiB allowed, 300 MiB touched.
  mem=$(as "$ALICE" rsub --mem 20M -- python3 -c 'x = bytearray(300 << 20); print("survived")')
  # Time: a child that leaves the job's session and process group dies with the job.
  timed=$(as "$ALICE" rsub --time 2s -- sh -c 'setsid sleep 600 & echo started; sleep 600')
  # Pids: forks beyond the job's limit (64) fail; the bomb ends with the job.
  bomb=$(as "$ALICE" rsub --time 3s -- python3 -c '
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(600); os._exit(0)
        n += 1
except OSError:
    print("forks", n, flush=True)
time.sleep(600)')
  run -0 as "$ALICE" rsub wait "$cores"
  run -0 as "$ALICE" rsub logs "$cores"
  [[ $output =~ ^Cpus_allowed_list:[[:space:]]+[0-9]+$ ]]
  run as "$ALICE" rsub wait "$mem"
  rsub show "$mem" --json | jq -e '.state == "OUT_OF_MEMORY" and .memory_peak_bytes <= 20 * 1048576'
  run -0 as "$ALICE" rsub logs "$mem"
  refute_output --partial survived
  run as "$ALICE" rsub wait "$timed" "$bomb"
  assert_equal "$(job_state "$timed")" TIMEOUT
  assert_equal "$(job_state "$bomb")" TIMEOUT
  run -0 as "$ALICE" rsub logs "$bomb"
  [[ $output =~ ^forks\ ([0-9]+)$ ]]
  ((BASH_REMATCH[1] < 64))
  # Nothing of alice's jobs is alive (the dead may wait a moment for init to reap them).
  assert_equal "$(ps -u "$ALICE" -o stat= | grep -cv '^Z')" 0
  run -0 as "$BOB" rsub wait "$victim"
  run -0 as "$BOB" rsub logs "$victim"
  assert_output "victim ok"
  rsub show "$victim" --json | jq -e '.cpu_used_s >= 0 and .memory_peak_bytes > 0'
}
