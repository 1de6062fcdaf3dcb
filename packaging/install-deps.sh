#!/usr/bin/env bash
# Installs the Debian 12 packages that rkit's build, tests, benchmarks and demo need.
# Idempotent: when everything is present it prints nothing and exits 0.
# Usage: packaging/install-deps.sh [--check] [GROUP...]
#   GROUP: build tests bench package demo (the default: all five) or fuzz (clang, libFuzzer)
#   --check: list what is missing, exit 1 if any
set -euo pipefail

# One list, grouped by purpose; DESIGN.md explains each choice.
build=(
  cmake make gcc g++ pkg-config git
  libcli11-dev libfmt-dev libtomlplusplus-dev nlohmann-json3-dev
  libhwloc-dev
  libzstd-dev libarchive-dev libxxhash-dev zlib1g-dev
  libopenblas-dev libgloo-dev
  libsqlite3-dev
  libsimdjson-dev libcpp-httplib-dev  # rcost reads millions of records; rtop serve's /metrics
  libsodium-dev  # rtrain: the per-run secret and HMAC challenge of its store
)
tests=(
  libgtest-dev googletest
  bats bats-assert bats-support bats-file
  jq hwloc zsh fish groff-base
  python3 python3-numpy python3-xxhash python3-torch zstd sqlite3  # torch: rtrain's DDP client
  chromium
  slurmctld slurmd slurm-client munge slurmdbd mariadb-server  # tests/integration: a real Slurm with sacct
  prometheus  # tests/integration: a real Prometheus scrapes rtop serve
  dpkg-dev file  # tests/cli/package.bats builds the .deb as make package does
  clang-format  # tests/cli/layout.bats: the C++ layout of .clang-format
  snakemake  # tests/cli/rsub_snakemake.bats: Snakemake 7 runs workflows through rkit's profile
)
bench=(hyperfine bsdextrautils time zstd python3 python3-numpy fio likwid python3-torch libopenblas0
  slurmctld slurmd slurm-client munge  # bench/rsub.sh starts a single-node Slurm
  python3-pandas  # bench/rcost.sh: the same report computed with pandas
  sqlite3)  # bench/runs.sh: the raw read of the run store beside rtrain runs ls
package=(dpkg-dev file)   # CPack's .deb generator runs dpkg-shlibdeps
demo=(jq snakemake python3-numpy)  # make demo: the tools, jq for the records it shows, the pipeline
fuzz=(clang libclang-rt-14-dev)

check_only=0
if [[ "${1:-}" == "--check" ]]; then check_only=1; shift; fi
groups=("$@")
[[ ${#groups[@]} -gt 0 ]] || groups=(build tests bench package demo)
wanted=()
for group in "${groups[@]}"; do
  case "$group" in
    build) wanted+=("${build[@]}") ;;
    tests) wanted+=("${tests[@]}") ;;
    bench) wanted+=("${bench[@]}") ;;
    package) wanted+=("${package[@]}") ;;
    demo) wanted+=("${demo[@]}") ;;
    fuzz) wanted+=("${build[@]}" "${fuzz[@]}") ;;
    *) echo "install-deps: error: unknown group '$group' (build, tests, bench, package, demo, fuzz)" >&2; exit 64 ;;
  esac
done

missing=()
# A package several groups want is installed (and named) once.
mapfile -t wanted < <(printf '%s\n' "${wanted[@]}" | awk '!seen[$0]++')
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $check_only -eq 1 ]]; then
  printf 'missing: %s\n' "${missing[*]}"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: error: missing Debian packages: ${missing[*]}" >&2
  echo "install-deps: hint: run 'sudo make deps' (or: sudo apt-get install ${missing[*]})" >&2
  exit 77
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
