#!/usr/bin/env bats
# rtrain's network surfaces under attack: the agents' rendezvous (rtrain launch --nnodes)
# and the workers' store (rtrain run's rank 0). Hostile peers are Python clients (below):
# strangers without the secret, garbage, huge lengths, silence, floods, a claimed slot, a
# rogue listener, absurd counts. Each attack is refused and the real run still completes,
# in its normal time, with its normal result. Also: two default runs on one machine at
# once, and a heartbeat folder prepared by someone else.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  (umask 077 && head -c 32 /dev/urandom | base64 >secret)
}

# A port free now.
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# hostile COMMAND PORT [ARG...]: a hostile peer of the store at 127.0.0.1:PORT.
#   wait-port P SECONDS         returns once something listens on P (fails after SECONDS)
#   join P                      the old agents' protocol: "join 1 1", then holds on; prints closed|held
#   garbage P                   4 KiB of random bytes; prints closed|held
#   huge P                      the old store's set with a 256 MiB value, streamed; prints closed|held
#   silent P SECONDS            says nothing for SECONDS; prints connected, then closed|held
#   flood P MIB PID             MIB MiB without a newline (reconnecting when cut), as fast as it
#                               can; prints how much PID's VmRSS grew meanwhile, in MiB (the most)
#   rogue P SECONDS             listens on P as a store that cannot prove the secret; prints
#                               what the clients that came sent
#   join-as P SECRET_FILE NODE COUNT   a peer WITH the secret (the protocol written anew in
#                               Python): creates node/NODE = COUNT, then holds on until closed
hostile() { /usr/bin/python3 -c "$HOSTILE_PY" "$@"; }
HOSTILE_PY=$(cat <<'EOF'
import hashlib, hmac, os, socket, struct, sys, time

cmd, port = sys.argv[1], int(sys.argv[2])

def connect(deadline_s=10):
    end = time.time() + deadline_s
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.time() > end:
                raise
            time.sleep(0.02)

def closed_within(s, seconds):
    """Whether the other end closes the connection within `seconds` (what it sent is dropped)."""
    end = time.time() + seconds
    s.settimeout(0.2)
    while time.time() < end:
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False

def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0

def recv_exact(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise EOFError
        out += b
    return out

if cmd == "wait-port":
    connect(float(sys.argv[3])).close()
elif cmd == "join":
    s = connect()
    s.sendall(b"join 1 1\n")
    print("closed" if closed_within(s, 3) else "held")
elif cmd == "garbage":
    s = connect()
    try:
        s.sendall(os.urandom(4096))
    except OSError:
        pass
    print("closed" if closed_within(s, 3) else "held")
elif cmd == "huge":
    s = connect()
    try:
        s.sendall(b"S" + struct.pack("<I", 4) + b"keyx" + struct.pack("<I", (256 << 20) - 1))
        for _ in range(64):
            s.sendall(b"v" * (1 << 20))
    except OSError:
        pass
    print("closed" if closed_within(s, 3) else "held")
elif cmd == "silent":
    s = connect()
    print("connected", flush=True)
    print("closed" if closed_within(s, float(sys.argv[3])) else "held")
elif cmd == "flood":
    limit, pid = int(sys.argv[3]) << 20, int(sys.argv[4])
    base, grew, sent = rss_mib(pid), 0.0, 0
    chunk = b"x" * (1 << 20)
    end = time.time() + 20
    while sent < limit and time.time() < end:
        try:
            s = connect()
            while sent < limit:
                sent += s.send(chunk)
                grew = max(grew, rss_mib(pid) - base)
        except OSError:
            pass  # cut off: again, on a new connection
    grew = max(grew, rss_mib(pid) - base)
    print(f"{grew:.0f}")
elif cmd == "rogue":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port))
    l.listen(8)
    l.settimeout(float(sys.argv[3]))
    try:
        while True:
            c, _ = l.accept()
            try:
                c.sendall(b"RKS1" + os.urandom(32))
                c.settimeout(5)
                got = c.recv(4096)
                if got:  # (not wait-port's probe)
                    c.sendall(b"RKOK" + os.urandom(32))  # a proof it cannot make
                    print(f"got {len(got)} bytes: {got[:4]!r}", flush=True)
            except OSError:
                pass
            c.close()
    except socket.timeout:
        pass
elif cmd == "join-as":
    secret = open(sys.argv[3], "rb").read().rstrip(b"\n")
    node, count = sys.argv[4], sys.argv[5].encode()
    key = hashlib.blake2b(secret, digest_size=32, key=b"rkit.rtrain.agents.v1").digest()
    mac = lambda k, *parts: hmac.new(k, b"".join(parts), hashlib.sha512).digest()[:32]
    s = connect()
    hello = recv_exact(s, 36)
    assert hello[:4] == b"RKS1"
    ns, nc = hello[4:], os.urandom(32)
    s.sendall(b"RKC1" + nc + mac(key, b"rtrain.store.client.1", ns, nc))
    answer = recv_exact(s, 36)
    assert answer[:4] == b"RKOK" and answer[4:] == mac(key, b"rtrain.store.host.1", ns, nc), answer[:4]
    k_out = hashlib.blake2b(b"rtrain.store.to-host.1" + ns + nc, digest_size=32, key=key).digest()
    name = f"node/{node}".encode()
    payload = b"C" + struct.pack("<I", len(name)) + name + struct.pack("<I", len(count)) + count + b"\x01"
    s.sendall(struct.pack("<I", len(payload)) + payload + mac(k_out, struct.pack("<QI", 0, len(payload)), payload))
    head = recv_exact(s, 4)
    reply = recv_exact(s, struct.unpack("<I", head)[0] + 32)
    print("created" if reply[:2] == b"\x00\x01" else "refused", flush=True)
    closed_within(s, 30)
EOF
)

@test "the agents' rendezvous: a stranger claiming node 1's slot, garbage, huge lengths, a wrong secret are refused; the run completes" {
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" -- sh -c 'echo "rank $RANK/$WORLD_SIZE"' >node0.out 2>&1 &
  node0=$!
  hostile wait-port "$port" 10
  run -0 hostile join "$port"  # the old protocol's way to take node 1's place
  assert_output closed
  run -0 hostile garbage "$port"
  assert_output closed
  run -0 hostile huge "$port"
  assert_output closed
  # An agent with another run's secret: refused at once (77), by the store's handshake.
  (umask 077 && echo "the-secret-of-another-run-entirely" >wrong)
  run --separate-stderr rtrain launch --nnodes 2 --node-rank 1 --secret-file wrong --master-port "$port" -- true
  assert_equal "$status" 77
  assert_one_line_stderr
  [[ $stderr == *"refused this client's run secret"* ]]
  # The real node 1 is still welcome, and the run ends well on both.
  run -0 rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- sh -c 'echo "rank $RANK/$WORLD_SIZE"'
  assert_line "[1]: rank 1/2"
  wait "$node0"
  grep -qx '\[0\]: rank 0/2' node0.out
}

@test "the agents' rendezvous: a silent connection held open delays nobody" {
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" -- true >node0.out 2>&1 &
  node0=$!
  hostile wait-port "$port" 10
  hostile silent "$port" 20 >silent.out &
  silent=$!
  for _ in $(seq 100); do grep -q connected silent.out && break; sleep 0.05; done
  grep -q connected silent.out
  start=$SECONDS
  run -0 rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- true
  wait "$node0"
  ((SECONDS - start < 5))  # the old rendezvous waited 10 s on each connection's first line
  wait "$silent"
  [[ $(tail -1 silent.out) == closed ]]  # dropped: at its handshake deadline, or when node 0 ended
}

@test "a flood of bytes without a newline to the agents' port: node 0's memory stays bounded; the run completes" {
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" -- sh -c 'echo "rank $RANK"' >node0.out 2>&1 &
  node0=$!
  hostile wait-port "$port" 10
  run -0 hostile flood "$port" 512 "$node0"
  echo "node 0's VmRSS grew by $output MiB" >&2
  ((output < 16))
  run -0 rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- sh -c 'echo "rank $RANK"'
  wait "$node0"
  grep -qx '\[0\]: rank 0' node0.out
}

@test "a rogue listener on node 0's port is detected by node 1's agent (77): it learns a nonce-bound proof, nothing to replay" {
  port=$(free_port)
  hostile rogue "$port" 10 >rogue.out &
  rogue=$!
  hostile wait-port "$port" 10
  run --separate-stderr rtrain launch --nnodes 2 --node-rank 1 --secret-file secret --master-port "$port" -- true
  assert_equal "$status" 77
  assert_one_line_stderr
  [[ $stderr == *"does not prove the run's secret"* ]]
  kill "$rogue"
  wait "$rogue" || true
  grep -q "got 68 bytes: b'RKC1'" rogue.out  # its nonce, our nonce and a proof over both: nothing more
}

@test "absurd process counts: one line, exit 64; a peer with the secret claiming one: one line, exit 65" {
  for args in "--nproc-per-node 99999999999" "--nproc-per-node 65" "--nproc-per-node -1" \
    "--nnodes 99999 --master-port 29400 --secret-file secret" "--nnodes 2 --node-rank 4096 --master-port 29400 --secret-file secret"; do
    run --separate-stderr rtrain launch $args -- true
    assert_equal "$status" 64
    assert_one_line_stderr
  done
  for env in "RANK=0 WORLD_SIZE=99999999999" "RANK=7 WORLD_SIZE=2" "RANK=-1 WORLD_SIZE=2" "RANK=0 WORLD_SIZE=2 LOCAL_RANK=3"; do
    run --separate-stderr env $env rtrain run --steps 1
    assert_equal "$status" 64
    assert_one_line_stderr
  done
  # Node 0 checks what even an agent holding the secret says.
  port=$(free_port)
  rtrain launch --nnodes 2 --node-rank 0 --secret-file secret --master-port "$port" -- true >node0.out 2>node0.err &
  node0=$!
  hostile wait-port "$port" 10
  hostile join-as "$port" secret 1 99999999 >joined.out &
  wait "$node0" || node0_status=$?
  assert_equal "${node0_status:-0}" 65
  [[ $(wc -l <node0.err) == 1 ]]
  grep -q "rendezvous: node 1 joined with '99999999' workers: not 1 to 64" node0.err
  grep -qx created joined.out  # the Python peer spoke the protocol: its secret was the run's
}

# Runs `rtrain launch -- rtrain run` in the background with rank 1 held back until the
# file `release` exists, so that rank 0's store waits with its port open. Sets $launcher.
small=(--layers 32,64,64,1 --rows 20000 --threads 1 --steps 60 --log-every 60 -q)
held_run() {
  local port=$1
  shift
  rtrain launch --nproc-per-node 2 --master-port "$port" -- sh -c '
    if [ "$RANK" = 1 ]; then for i in $(seq 600); do [ -e release ] && break; sleep 0.05; done; fi
    exec "$@"' sh rtrain run "${small[@]}" "$@" >launch.out 2>&1 &
  launcher=$!
}

@test "the workers' store: a rank with a wrong secret, or none, is refused (77); garbage and silence stall nothing; the result is right" {
  run -0 rtrain launch --nproc-per-node 2 -- rtrain run "${small[@]}" --events ref.jsonl
  port=$(free_port)
  held_run "$port" --events ev.jsonl
  hostile wait-port "$port" 30
  hostile silent "$port" 30 >silent.out &
  silent=$!
  for _ in $(seq 100); do grep -q connected silent.out && break; sleep 0.05; done
  grep -q connected silent.out
  run --separate-stderr env RANK=1 WORLD_SIZE=2 MASTER_PORT="$port" RKIT_RUN_SECRET=the-secret-of-another-run rtrain run --steps 1
  assert_equal "$status" 77
  assert_one_line_stderr
  [[ $stderr == *"refused this client's run secret"* ]]
  run --separate-stderr env -u RKIT_RUN_SECRET RANK=1 WORLD_SIZE=2 MASTER_PORT="$port" rtrain run --steps 1
  assert_equal "$status" 77
  [[ $stderr == *"it wants the run's secret"* ]]
  run -0 hostile garbage "$port"
  assert_output closed
  run -0 hostile huge "$port"
  assert_output closed
  start=$SECONDS
  touch release
  wait "$launcher"
  ((SECONDS - start < 10))
  kill "$silent" 2>/dev/null || true
  # The same losses as the run nobody attacked: no stranger's data reached a collective.
  assert_equal "$(jq -c 'select(.event == "summary") | [.world_size, .loss, .eval_loss]' ev.jsonl)" \
    "$(jq -c 'select(.event == "summary") | [.world_size, .loss, .eval_loss]' ref.jsonl)"
}

@test "two runs on one machine at the same time, with default options: both finish, each with its own result" {
  # Each rank waits until the same rank of the other run has started: both runs overlap.
  for run in a b; do
    other=$([[ $run == a ]] && echo b || echo a)
    seed=$([[ $run == a ]] && echo 1 || echo 2)
    rtrain launch --nproc-per-node 2 -- sh -c '
      touch "started.$1.$RANK"
      for i in $(seq 600); do [ -e "started.$2.$RANK" ] && break; sleep 0.05; done
      shift 2; exec "$@"' sh "$run" "$other" rtrain run "${small[@]}" --seed "$seed" --events "$run.jsonl" >"$run.out" 2>&1 &
    eval "pid_$run=\$!"
  done
  wait "$pid_a"
  wait "$pid_b"
  # Each alone, for reference: the same results, bit for bit.
  for run in a b; do
    seed=$([[ $run == a ]] && echo 1 || echo 2)
    rtrain launch --nproc-per-node 2 -- rtrain run "${small[@]}" --seed "$seed" --events "$run.ref.jsonl" >/dev/null
    assert_equal "$(jq -c 'select(.event == "summary") | [.world_size, .loss, .eval_loss]' "$run.jsonl")" \
      "$(jq -c 'select(.event == "summary") | [.world_size, .loss, .eval_loss]' "$run.ref.jsonl")"
  done
  [[ $(jq -c 'select(.event == "summary") | .loss' a.jsonl) != $(jq -c 'select(.event == "summary") | .loss' b.jsonl) ]]
}

@test "the heartbeat folder: fresh and private; a folder or a link someone prepared is never used" {
  export TMPDIR=$BATS_TEST_TMPDIR/tmp
  mkdir -p "$TMPDIR"
  echo precious >victim
  # What the old, predictable name would have been for --run-id r9, prepared with a link.
  mkdir "$TMPDIR/rtrain-r9-0"
  ln -s "$PWD/victim" "$TMPDIR/rtrain-r9-0/heartbeat.0"
  run -0 env -u XDG_RUNTIME_DIR rtrain launch --run-id r9 -- sh -c 'echo "$RKIT_HEARTBEAT_FILE $(stat -c "%a %U" "$(dirname "$RKIT_HEARTBEAT_FILE")")"'
  assert_line --regexp "^\[0\]: $TMPDIR/rtrain-r9-0\.[A-Za-z0-9]{6}/heartbeat\.0 700 $(id -un)\$"
  assert_equal "$(cat victim)" precious
  # Under $XDG_RUNTIME_DIR when there is one.
  mkdir -m 700 xdg
  XDG_RUNTIME_DIR=$PWD/xdg run -0 rtrain launch -- sh -c 'echo "$RKIT_HEARTBEAT_FILE"'
  assert_line --regexp "^\[0\]: $PWD/xdg/rtrain-[0-9a-f]+-0\.[A-Za-z0-9]{6}/heartbeat\.0\$"
  # --log-dir is the user's: a link planted there is refused (74), not followed.
  mkdir logs
  ln -s "$PWD/victim" logs/heartbeat.0
  run --separate-stderr rtrain launch --log-dir logs -- true
  assert_equal "$status" 74
  assert_one_line_stderr
  assert_equal "$(cat victim)" precious
}
