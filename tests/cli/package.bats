#!/usr/bin/env bats
# make package's .deb and .tar.gz (CPack, from the tested build): what they hold, and the
# .deb installed with dpkg into a fresh root, where every tool runs.
bats_require_minimum_version 1.5.0

tools=(rtop rsub rckpt rbench rtrain rcost)

setup_file() {
  # The same cpack call as `make package`, on the build the other tests use (about 7 s).
  local dist=$BATS_FILE_TMPDIR/dist
  (cd "$RKIT_BUILD_DIR" && cpack -B "$dist" -G "DEB;TGZ" >"$BATS_FILE_TMPDIR/cpack.log" 2>&1) ||
    { cat "$BATS_FILE_TMPDIR/cpack.log" >&2; return 1; }
}

setup() {
  load helpers
  dist=$BATS_FILE_TMPDIR/dist
  deb=$(echo "$dist"/rkit_*_amd64.deb)
  gpu_deb=$dist/rkit-gpu_$(dpkg-deb -f "$deb" Version)_amd64.deb
  version=$(rtop --version | awk '{print $2}')
}

# The files of a package, one per line, without the leading "." and without directories.
deb_files() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $6}' | sort; }

@test ".deb: the tools, man pages, completions in three shells, example configs and rsub's unit" {
  run -0 dpkg-deb -f "$deb" Package Version Architecture
  assert_output $'Package: rkit\nVersion: '"$version"$'\nArchitecture: amd64'
  files=$(deb_files "$deb")
  for t in "${tools[@]}"; do
    for f in /usr/bin/$t /usr/share/man/man1/$t.1 /usr/share/bash-completion/completions/$t \
      /usr/share/zsh/vendor-completions/_$t /usr/share/fish/vendor_completions.d/$t.fish; do
      grep -qxF "$f" <<<"$files" || { echo "missing from the .deb: $f"; return 1; }
    done
  done
  for f in /usr/share/man/man7/rkit.7 /usr/lib/systemd/system/rsub.service /usr/share/doc/rkit/examples/rkit.toml \
    /usr/share/doc/rkit/examples/prices.toml /usr/share/doc/rkit/examples/train.toml /usr/share/doc/rkit/examples/jobs/train.toml \
    /usr/share/doc/rkit/examples/pipeline/Snakefile /usr/share/doc/rkit/examples/pipeline/pipeline.py \
    /usr/share/rkit/snakemake/rkit/config.yaml /usr/share/rkit/snakemake/rkit/rsub-smk-job.py \
    /usr/share/rkit/snakemake/rkit/rsub-smk-status /usr/share/rkit/snakemake/rkit/rsub-smk-sidecar \
    /usr/share/rkit/python/rkit_track.py; do
    grep -qxF "$f" <<<"$files" || { echo "missing from the .deb: $f"; return 1; }
  done
  # Nothing of the build or the tests leaks in.
  run -1 grep -E 'test|fake|fuzz|demo\.sh|\.a$|\.hpp$' <<<"$files"
}

@test ".deb: this Debian 12 system satisfies every dependency dpkg-shlibdeps named" {
  deps=$(dpkg-deb -f "$deb" Depends)
  [[ $deps == *libc6* && $deps == *libhwloc* ]]
  while read -r dep; do
    name=${dep%% *}
    installed=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null) || { echo "$name: not installed"; return 1; }
    if [[ $dep =~ \((\>=|=|\<=)\ ([^\)]+)\) ]]; then
      op=${BASH_REMATCH[1]} want=${BASH_REMATCH[2]}
      case $op in '>=') op=ge ;; '=') op=eq ;; '<=') op=le ;; esac
      dpkg --compare-versions "$installed" "$op" "$want" || { echo "$name $installed does not satisfy $dep"; return 1; }
    fi
  done < <(tr ',' '\n' <<<"$deps" | sed 's/^ *//')
}

@test ".deb installs with dpkg into a fresh root, and every tool runs from there" {
  root=$BATS_TEST_TMPDIR/root
  mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
  : >"$root/var/lib/dpkg/status"
  # The fresh root has none of the libraries: they come from this system's /usr/lib.
  run -0 dpkg --root="$root" --log="$root/var/dpkg.log" --force-depends --force-not-root -i "$deb"
  run -0 dpkg --root="$root" -s rkit
  assert_line "Status: install ok installed"
  for t in "${tools[@]}"; do
    bin=$root/usr/bin/$t
    # A clean environment: only the fresh root's tools, the system's PATH, no build tree.
    run -0 env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin RKIT_CONFIG="$FIXTURES/empty.toml" "$bin" --version
    assert_output --regexp "^$t $version "
    run -0 env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin RKIT_CONFIG="$FIXTURES/empty.toml" "$bin" --help
    assert_line --index 1 --regexp "^Usage: $t "
    # No run path into the build tree.
    run -1 bash -c "readelf -d '$bin' | grep -E 'RPATH|RUNPATH'"
  done
  # rsub workflow finds the packaged Snakemake profile (snakemake --profile it --version).
  run -0 env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin RKIT_CONFIG="$FIXTURES/empty.toml" \
    "$root/usr/bin/rsub" workflow --version
  assert_output --regexp '^7\.[0-9]+'
  # The man pages render as packaged (unpacked with dpkg-deb, which, unlike dpkg, applies
  # no path-exclude a minimal system may set for /usr/share/man).
  dpkg-deb -x "$deb" "$BATS_TEST_TMPDIR/unpacked"
  for page in "$BATS_TEST_TMPDIR"/unpacked/usr/share/man/man[17]/*.[17]; do
    run -0 groff -man -Tutf8 -ww -z "$page"
    assert_output ""
  done
  # dpkg removes every file it installed.
  run -0 dpkg --root="$root" --log="$root/var/dpkg.log" --force-not-root -r rkit
  run find "$root" -path "$root/var" -prune -o -type f -print
  assert_output ""
}

@test "with CUDA, rkit-gpu's .deb puts rbench's GPU plug-in where the installed rbench finds it; without, there is none" {
  if [[ ! -f $gpu_deb ]]; then
    # Without nvcc there is no plug-in and no package; rbench then says it was built so.
    run -0 rbench list --json
    jq -e -s '[.[] | select(.suite == "gpu.gemm")][0].reason | test("built without CUDA")' <<<"$output"
    return 0
  fi
  root=$BATS_TEST_TMPDIR/root
  mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
  : >"$root/var/lib/dpkg/status"
  run -0 dpkg --root="$root" --log="$root/var/dpkg.log" --force-depends --force-not-root -i "$deb"
  run -0 env -i PATH=/usr/bin:/bin "$root/usr/bin/rbench" list --json
  # rkit alone: the plug-in is not there, and rbench says where it looked.
  jq -e -s '[.[] | select(.suite == "gpu.gemm")][0].reason | test("GPU plug-in not found")' <<<"$output"
  run -0 dpkg --root="$root" --log="$root/var/dpkg.log" --force-depends --force-not-root -i "$gpu_deb"
  run -0 env -i PATH=/usr/bin:/bin "$root/usr/bin/rbench" list --json
  jq -e -s '[.[] | select(.suite == "gpu.gemm")][0].reason // "" | test("plug-in not found") | not' <<<"$output"
}

@test ".tar.gz holds the files of both .deb packages" {
  tar_files=$(tar -tzf "$dist"/rkit-*-Linux.tar.gz | grep -v '/$' | sed 's|^rkit-[^/]*/|/usr/|' | sort)
  debs=$(deb_files "$deb")
  [[ -f $gpu_deb ]] && debs=$(sort <(echo "$debs") <(deb_files "$gpu_deb"))
  diff <(echo "$debs") <(echo "$tar_files")
}
