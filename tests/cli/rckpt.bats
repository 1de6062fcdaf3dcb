#!/usr/bin/env bats
# rckpt end to end: round trips, the archive format seen by other tools, exit codes,
# and the faults of a cluster (flipped bits, truncation, full disks, kill -9, hostile
# archives).
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  PY=/usr/bin/python3
  cd "$BATS_TEST_TMPDIR"
  mkdir -p ck/sub ck/deep/er
  "$PY" "$FIXTURES/write_safetensors.py" ck/model.safetensors --kind small
  head -c 300000 /dev/urandom > ck/deep/er/blob.bin
  printf '{"step": 100}\n' > ck/trainer_state.json
  : > ck/sub/empty
  chmod 600 ck/trainer_state.json
  ln -s ../trainer_state.json ck/sub/state-link
}

# Starts a pack slow enough to be caught mid-way (48 MiB of random data at zstd level 19
# on one thread) into archive $1 in the background, stderr to $2 (default: none), and
# returns once its temporary exists; its pid is in $pid.
start_slow_pack() {
  head -c $((48 << 20)) /dev/urandom > ck/big.bin
  rckpt pack ck -o "$1" -q --level 19 --threads 1 2> "${2:-/dev/null}" &
  pid=$!
  for _ in $(seq 100); do compgen -G ".$1.tmp.*" >/dev/null && break; sleep 0.05; done
}

# Returns once file $1 (a glob) holds more than $2 bytes: a pack is then mid-way.
wait_for_bytes() {
  for _ in $(seq 600); do
    for f in $1; do [[ -f $f && $(stat -c %s "$f") -gt $2 ]] && return 0; done
    sleep 0.05
  done
  return 1
}

# The manifest of an archive, as JSON.
manifest() { tar -xOf "$1" .rkpt/manifest.json; }

# Flips one bit of byte $2 of file $1.
flip_bit() {
  "$PY" - "$1" "$2" <<'EOF'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x10]))
EOF
}

@test "pack then unpack gives back every file, link, mode and empty file" {
  run --separate-stderr rckpt pack ck -o a.rkpt --frame-size 64K
  assert_success
  assert_output --partial "packed 8 entries"
  assert_file_exists a.rkpt
  run --separate-stderr rckpt unpack a.rkpt -C out
  assert_success
  run diff -r --no-dereference ck out
  assert_success
  [[ $(stat -c %a out/trainer_state.json) == 600 ]]
  [[ $(readlink out/sub/state-link) == ../trainer_state.json ]]
  cmp ck/deep/er/blob.bin out/deep/er/blob.bin
}

@test "an archive is a plain tar whose frames zstd decodes" {
  rckpt pack ck -o a.rkpt -q
  run tar -tf a.rkpt
  assert_success
  assert_line --index 0 .rkpt/format
  assert_line .rkpt/manifest.json
  [[ ${lines[-1]} == .rkpt/index ]]
  # trainer_state.json is a plain file: its one frame decodes to the file itself.
  k=$(manifest a.rkpt | jq -r '.files as $f | .frames | to_entries[] | select($f[.value.file].path == "trainer_state.json") | .key')
  tar -xOf a.rkpt "$(printf 'frames/%08d.zst' "$k")" | zstd -dc > decoded
  cmp decoded ck/trainer_state.json
}

@test "-o - streams the archive to stdout" {
  rckpt pack ck -o - > piped.rkpt
  run rckpt verify piped.rkpt
  assert_success
  rckpt pack ck -o - | cat > catted.rkpt
  run rckpt unpack catted.rkpt -C out -q
  assert_success
  diff -r --no-dereference ck out
}

@test "ls lists files and tensors; --json carries the manifest's facts" {
  rckpt pack ck -o a.rkpt -q
  run rckpt ls a.rkpt
  assert_success
  assert_line --regexp '^model\.safetensors +file'
  run rckpt ls a.rkpt --json
  assert_success
  [[ $(echo "$output" | jq -s 'length') -eq 8 ]]
  echo "$output" | jq -e -s 'map(select(.path == "model.safetensors"))[0] | .tensors | length > 0'
  run rckpt ls a.rkpt --tensors --json
  assert_success
  echo "$output" | jq -e -s 'all(.schema == "rkit.ckpt.tensor.v1")'
  # The tensors are exactly those of the safetensors header.
  expected=$("$PY" -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; h=json.loads(f.read(n)); print(sorted(k for k in h if k!="__metadata__"))' ck/model.safetensors)
  got=$(echo "$output" | jq -r -s '[.[].tensor] | sort | map("\u0027" + . + "\u0027") | join(", ")')
  [[ "[$got]" == "$expected" ]]
}

@test "cat writes one file, or one tensor's raw bytes, exactly" {
  rckpt pack ck -o a.rkpt -q
  rckpt cat a.rkpt deep/er/blob.bin > blob
  cmp blob ck/deep/er/blob.bin
  rckpt ls a.rkpt --tensors --json > tensors.jsonl
  while read -r name offset bytes; do
    rckpt cat a.rkpt "model.safetensors:$name" > got
    tail -c +$((offset + 1)) ck/model.safetensors | head -c "$bytes" > want
    cmp got want
  done < <(jq -r '"\(.tensor) \(.offset) \(.bytes)"' tensors.jsonl)
  run --separate-stderr rckpt cat a.rkpt model.safetensors:no.such.tensor
  assert_failure 66
  assert_one_line_stderr
  run --separate-stderr rckpt cat a.rkpt nothing/here
  assert_failure 66
}

@test "verify passes a good archive and names every frame with a flipped bit" {
  rckpt pack ck -o a.rkpt -q --frame-size 64K
  run rckpt verify a.rkpt
  assert_success
  assert_output --partial "ok:"
  n=$(manifest a.rkpt | jq '.frames | length')
  [[ $n -ge 5 ]]
  for k in $(seq 0 $((n - 1))); do
    read -r offset bytes < <(manifest a.rkpt | jq -r ".frames[$k] | \"\(.offset) \(.bytes)\"")
    for at in $offset $((offset + bytes / 2)) $((offset + bytes - 1)); do
      cp a.rkpt bad.rkpt
      flip_bit bad.rkpt "$at"
      run --separate-stderr rckpt verify bad.rkpt
      assert_failure 1
      assert_output --partial "corrupt: frame $k ("
    done
  done
}

@test "verify --json reports the damaged frame, file and tensors" {
  rckpt pack ck -o a.rkpt -q
  read -r k offset < <(manifest a.rkpt | jq -r '.files as $f | .frames | to_entries | map(select($f[.value.file].path == "model.safetensors")) | last | "\(.key) \(.value.offset)"')
  flip_bit a.rkpt $((offset + 3))
  run --separate-stderr rckpt verify a.rkpt --json
  assert_failure 1
  echo "$output" | jq -e --argjson k "$k" '.ok == false and .problems[0].frame == $k and .problems[0].file == "model.safetensors" and (.problems[0].tensors | length > 0)'
}

@test "a bit flipped in a tar header is caught by the archive hash" {
  rckpt pack ck -o a.rkpt -q
  flip_bit a.rkpt 600   # inside the first frame entry's header
  run --separate-stderr rckpt verify a.rkpt
  assert_failure 1
  assert_output --partial "tar headers"
}

@test "unpack refuses a corrupt frame: exit 65, the damaged file never appears" {
  rckpt pack ck -o a.rkpt -q
  offset=$(manifest a.rkpt | jq -r '.files as $f | .frames | map(select($f[.file].path == "deep/er/blob.bin"))[0].offset')
  flip_bit a.rkpt $((offset + 100))
  run --separate-stderr rckpt unpack a.rkpt -C out
  assert_failure 65
  assert_one_line_stderr
  assert_file_not_exists out/deep/er/blob.bin
  run find out -name '.rkpt-part*'
  assert_output ""
}

@test "a truncated archive exits 65 with a clear message, wherever it is cut" {
  rckpt pack ck -o a.rkpt -q
  size=$(stat -c %s a.rkpt)
  for keep in 0 100 512 $((size / 2)) $((size - 1600)) $((size - 1)); do
    head -c "$keep" a.rkpt > cut.rkpt
    for cmd in verify ls "unpack -C out"; do
      run --separate-stderr rckpt $cmd cut.rkpt
      assert_failure 65
      assert_one_line_stderr
      [[ "$stderr" == *"truncated"* || "$stderr" == *"not an rckpt archive"* ]]
    done
  done
}

@test "a file that is not an archive, or a missing one, is named" {
  head -c 5000 /dev/urandom > random.bin
  run --separate-stderr rckpt verify random.bin
  assert_failure 65
  [[ "$stderr" == *"not an rckpt archive"* ]]
  run --separate-stderr rckpt ls missing.rkpt
  assert_failure 66
  assert_one_line_stderr
}

@test "a full disk (file size limit) exits 74 and leaves nothing under the final name" {
  run --separate-stderr bash -c 'ulimit -f 200; rckpt pack ck -o a.rkpt -q --level 1'
  assert_failure 74
  assert_one_line_stderr
  assert_file_not_exists a.rkpt
  run find . -maxdepth 1 -name '.a.rkpt.tmp.*'
  assert_output ""
  rckpt pack ck -o a.rkpt -q
  run --separate-stderr bash -c 'ulimit -f 100; rckpt unpack a.rkpt -C out -q'
  assert_failure 74
  assert_file_not_exists out/deep/er/blob.bin
  run find out -name '.rkpt-part*'
  assert_output ""
}

@test "a full tmpfs exits 74 for pack and unpack, with nothing left behind" {
  [[ $(id -u) -eq 0 ]] || skip "mounting a tmpfs needs root"
  mkdir small
  mount -t tmpfs -o size=256k tmpfs small || skip "cannot mount a tmpfs here"
  run --separate-stderr rckpt pack ck -o small/a.rkpt -q
  status_pack=$status
  leftovers=$(ls -A small)
  rckpt pack ck -o a.rkpt -q
  run --separate-stderr rckpt unpack a.rkpt -C small/out -q
  status_unpack=$status
  unpack_err=$stderr
  partial=$(find small -name '.rkpt-part*')
  umount small
  [[ $status_pack -eq 74 ]]
  [[ -z "$leftovers" ]]
  [[ $status_unpack -eq 74 ]]
  [[ "$unpack_err" == *"not enough space"* ]]
  [[ -z "$partial" ]]
}

@test "kill -9 during pack leaves no file under the final name" {
  start_slow_pack big.rkpt
  wait_for_bytes '.big.rkpt.tmp.*' 1024
  kill -9 "$pid"
  wait "$pid" || true
  assert_file_not_exists big.rkpt
  # gc removes what the killed pack left.
  run rckpt gc . --keep-last 1
  assert_success
  run compgen -G '.big.rkpt.tmp.*'
  assert_failure
}

@test "SIGTERM during pack removes the temporary and dies of the signal" {
  start_slow_pack big.rkpt
  wait_for_bytes '.big.rkpt.tmp.*' 1024
  kill -TERM "$pid"
  code=0
  wait "$pid" || code=$?
  [[ $code -eq 143 ]]
  assert_file_not_exists big.rkpt
  run compgen -G '.big.rkpt.tmp.*'
  assert_failure
}

@test "a forged archive in the documented format is accepted" {
  "$PY" "$RKIT_ROOT/tests/cli/rkpt_forge.py" ok.rkpt ok
  run rckpt verify ok.rkpt
  assert_success
  run rckpt unpack ok.rkpt -C out -q
  assert_success
  assert_file_exists out/ok.txt
}

@test "hostile archives are refused and nothing is written outside the target" {
  for case in tarslip absolute symlink_escape symlink_chain below_symlink shared_frame; do
    "$PY" "$RKIT_ROOT/tests/cli/rkpt_forge.py" "$case.rkpt" "$case"
    mkdir -p "t-$case/target"
    run --separate-stderr rckpt unpack "$case.rkpt" -C "t-$case/target"
    assert_failure 65
    assert_one_line_stderr
    run find "t-$case" -mindepth 2
    assert_output ""
  done
  assert_file_not_exists /tmp/rkpt-forge-evil.txt
}

@test "size bombs and short frames are refused: frames must hold what the manifest says" {
  for case in size_bomb short_frame; do
    "$PY" "$RKIT_ROOT/tests/cli/rkpt_forge.py" "$case.rkpt" "$case"
    run --separate-stderr rckpt unpack "$case.rkpt" -C "out-$case"
    assert_failure 65
    assert_one_line_stderr
    assert_file_not_exists "out-$case/bomb.bin"
    assert_file_not_exists "out-$case/short.bin"
    run --separate-stderr rckpt verify "$case.rkpt"
    assert_failure 1
  done
}

@test "an archive of an unknown major version is refused with 65" {
  "$PY" "$RKIT_ROOT/tests/cli/rkpt_forge.py" v2.rkpt v2_schema
  run --separate-stderr rckpt ls v2.rkpt
  assert_failure 65
  [[ "$stderr" == *"rkit.ckpt.v2"* ]]
}

@test "unpack never writes through a symlink already in the target" {
  rckpt pack ck -o a.rkpt -q
  mkdir -p target outside
  ln -s ../outside target/deep
  run --separate-stderr rckpt unpack a.rkpt -C target
  assert_failure 65
  [[ "$stderr" == *"symlink"* ]]
  run ls -A outside
  assert_output ""
}

@test "unpack --only takes files and directories; an unknown path is 66" {
  rckpt pack ck -o a.rkpt -q
  run rckpt unpack a.rkpt -C out --only deep --only trainer_state.json -q
  assert_success
  assert_file_exists out/deep/er/blob.bin
  assert_file_exists out/trainer_state.json
  assert_file_not_exists out/model.safetensors
  run --separate-stderr rckpt unpack a.rkpt -C out2 --only no/such/file
  assert_failure 66
  assert_one_line_stderr
}

@test "incremental pack stores only changed frames and restores the whole" {
  rckpt pack ck -o a.rkpt -q
  cp -r ck ck2
  printf '{"step": 200}\n' > ck2/trainer_state.json
  run rckpt pack ck2 -o b.rkpt --base a.rkpt --json
  assert_success
  echo "$output" | jq -e '.base_frames > 0'
  [[ $(stat -c %s b.rkpt) -lt $(($(stat -c %s a.rkpt) / 2)) ]]
  rckpt unpack b.rkpt -C out -q
  diff -r --no-dereference ck2 out
  run rckpt diff a.rkpt b.rkpt
  assert_failure 1
  assert_line --regexp '^trainer_state\.json +- +changed'
  mv a.rkpt moved.rkpt
  run --separate-stderr rckpt verify b.rkpt
  assert_failure 66
  [[ "$stderr" == *"a.rkpt is missing"* ]]
}

@test "diff: identical archives exit 0; changed tensors show their difference" {
  rckpt pack ck -o a.rkpt -q
  rckpt pack ck -o same.rkpt -q --frame-size 64K
  run rckpt diff a.rkpt same.rkpt
  assert_success
  cp -r ck ck2
  # Add 1.0 to the first element of the first F32 tensor.
  name=$("$PY" - ck2/model.safetensors <<'EOF'
import json, struct, sys
path = sys.argv[1]
with open(path, 'r+b') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    h = json.loads(f.read(n))
    name = sorted(k for k, v in h.items()
                  if k != '__metadata__' and v['dtype'] == 'F32' and v['data_offsets'][1] > v['data_offsets'][0])[0]
    at = 8 + n + h[name]['data_offsets'][0]
    f.seek(at); v = struct.unpack('<f', f.read(4))[0]; f.seek(at); f.write(struct.pack('<f', v + 1.0))
print(name)
EOF
)
  rckpt pack ck2 -o b.rkpt -q
  run rckpt diff a.rkpt b.rkpt --json
  assert_failure 1
  echo "$output" | jq -e -s --arg t "$name" 'map(select(.status != "same")) | length == 1 and .[0].tensor == $t and .[0].max_abs == 1'
  run rckpt diff a.rkpt b.rkpt --all --json
  echo "$output" | jq -e -s 'map(select(.status == "same")) | length > 0'
}

@test "gc keeps the newest archives and every base they need" {
  rckpt pack ck -o c1.rkpt -q
  rckpt pack ck -o c2.rkpt -q
  printf '{"step": 300}\n' > ck/trainer_state.json
  rckpt pack ck -o c3.rkpt -q --base c2.rkpt
  run rckpt gc . --keep-last 1 --dry-run
  assert_success
  assert_file_exists c1.rkpt
  run rckpt gc . --keep-last 1 --json
  assert_success
  echo "$output" | jq -e -s 'map({(.archive | split("/") | last): .action}) | add == {"c1.rkpt": "remove", "c2.rkpt": "keep", "c3.rkpt": "keep"}'
  assert_file_not_exists c1.rkpt
  run rckpt verify c3.rkpt
  assert_success
}

@test "gc leaves alone a temporary that a live pack holds" {
  : > .live.rkpt.tmp.AbC123
  exec {lock}>>.live.rkpt.tmp.AbC123  # held by this shell, as a live pack holds its temporary
  flock "$lock"
  run rckpt gc . --keep-last 1
  exec {lock}>&-
  assert_success
  assert_file_exists .live.rkpt.tmp.AbC123
}

@test "pack skips a symlink that leaves the checkpoint, with a warning" {
  ln -s ../../etc ck/sub/escape
  ln -s /etc/passwd ck/abs
  run --separate-stderr rckpt pack ck -o a.rkpt
  assert_success
  [[ "$stderr" == *"escape -> ../../etc: a link with a target that leaves the root"* ]]
  [[ "$stderr" == *"abs -> /etc/passwd"* ]]
  run rckpt verify a.rkpt
  assert_success
  run rckpt ls a.rkpt
  refute_output --partial escape
}

@test "pack refuses to replace the archive it builds on" {
  rckpt pack ck -o roll.rkpt -q
  printf '{"step": 200}\n' > ck/trainer_state.json
  run --separate-stderr rckpt pack ck -o roll.rkpt --base roll.rkpt
  assert_failure 64
  assert_one_line_stderr
  [[ "$stderr" == *"which the new archive needs"* ]]
  run rckpt verify roll.rkpt
  assert_success
}

@test "a file replaced while it is packed fails the pack (74): no torn checkpoint" {
  start_slow_pack a.rkpt err
  printf '{"step": 101}\n' > new-state && mv new-state ck/trainer_state.json
  code=0
  wait "$pid" || code=$?
  [[ $code -eq 74 ]]
  grep -q "trainer_state.json: changed while being packed" err
  assert_file_not_exists a.rkpt
}

@test "--dereference packs what links point at (a Hugging Face snapshot)" {
  mkdir -p hub/blobs hub/snapshots/abc
  printf 'weights\n' > hub/blobs/1234
  ln -s ../../blobs/1234 hub/snapshots/abc/model.bin
  run --separate-stderr rckpt pack hub/snapshots/abc -o plain.rkpt -q
  assert_success
  [[ "$stderr" == *"model.bin -> ../../blobs/1234"*"skipped"* ]]
  run rckpt pack hub/snapshots/abc -o deref.rkpt -q --dereference
  assert_success
  run rckpt cat deref.rkpt model.bin
  assert_output weights
}

@test "an interrupted pack to stdout leaves no end-of-archive marker" {
  head -c $((48 << 20)) /dev/urandom > ck/big.bin
  rckpt pack ck -o - -q --level 19 --threads 1 > stream.tar &
  pid=$!
  wait_for_bytes stream.tar $((1 << 20))  # a frame or more written
  kill -TERM "$pid"
  wait "$pid" || true
  # The stream ends at a frame, not with tar's two zero blocks.
  [[ $(tail -c 1024 stream.tar | tr -d '\0' | wc -c) -gt 0 ]]
  run --separate-stderr rckpt ls stream.tar
  assert_failure 65
}

@test "gc does not remove an archive another process is reading" {
  rckpt pack ck -o c1.rkpt -q
  rckpt pack ck -o c2.rkpt -q
  exec {lock}<c1.rkpt  # a reader's shared lock, held by this shell
  flock -s "$lock"
  run rckpt gc . --keep-last 1 --json
  exec {lock}<&-
  assert_success
  echo "$output" | jq -e -s 'map(select(.archive | endswith("c1.rkpt")))[0].action == "skip"'
  assert_file_exists c1.rkpt
}

@test "usage errors exit 64 with one line" {
  rckpt pack ck -o a.rkpt -q
  for args in "" "pack" "pack ck" "pack ck -o x.rkpt --frame-size 1K" "pack ck -o x.rkpt --frame-size lots" \
              "pack ck -o x.rkpt --level 0" "pack ck -o - --json" "gc . --keep-last 0" "unpack a.rkpt" \
              "bogus" "pack ck -o x.rkpt --threads -1" "ls -" "pack ck -o x.rkpt --level 20" \
              "pack ck -o x.rkpt --frame-size 65M" "cat a.rkpt model.safetensors:"; do
    run --separate-stderr rckpt $args
    [[ $status -eq 64 ]] || { echo "rckpt $args: exit $status"; false; }
    assert_one_line_stderr
  done
}

@test "missing inputs exit 66 with one line" {
  : > plain-file
  for args in "pack nowhere -o x.rkpt" "pack plain-file -o x.rkpt" "pack ck -o no/such/dir/x.rkpt" \
              "unpack nowhere.rkpt -C out" "gc nowhere --keep-last 1"; do
    run --separate-stderr rckpt $args
    [[ $status -eq 66 ]] || { echo "rckpt $args: exit $status: $stderr"; false; }
    assert_one_line_stderr
  done
}
