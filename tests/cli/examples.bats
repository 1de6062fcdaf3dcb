#!/usr/bin/env bats
# The shipped examples are accepted by the tools: examples/rkit.toml as it is (its active
# settings are the built-in defaults, so it changes nothing), and with each of its
# commented-out site examples ("#key = value") uncommented, every key of which a tool
# must read (given a value of the wrong type, it exits 78 naming that line), so that the
# examples cannot rot; examples/prices.toml, jobs/*.toml and train.toml along the way.
# Slurm and kubectl are never asked: the uncommented backends point at stubs that record
# each call and fail.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  load rtop_serve
  cd "$BATS_TEST_TMPDIR"
  export RKIT_STATE_DIR=$BATS_TEST_TMPDIR/state
  EXAMPLE=$RKIT_ROOT/examples/rkit.toml
  CALLS=$BATS_TEST_TMPDIR/calls
  # Two NUMA nodes of two cores: pack and spread place two ranks differently.
  TOPO="pack:1 numa:2 core:2 pu:1"
}

teardown() {
  stop_serve
  stop_rsub
}

# site_config: writes site/rkit.toml, examples/rkit.toml with every "#key = value" and
# "#[table]" line uncommented, and site/prices.toml beside it (rsub.auto.prices and
# rcost.prices are relative to the file's folder). rsub.state_dir is this test's, and the
# Slurm bin_dir and the kubectl are stubs that append their command line to $CALLS.
site_config() {
  mkdir -p site stub
  for c in sbatch sacct squeue scancel scontrol kubectl; do
    printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 1\n' "$c" "$CALLS" >"stub/$c"
    chmod +x "stub/$c"
  done
  cp "$RKIT_ROOT/examples/prices.toml" site/
  sed -E 's/^#([^[:space:]#!])/\1/' "$EXAMPLE" >site/rkit.toml
  sed -i -E -e "s|^state_dir = .*|state_dir = \"$RKIT_STATE_DIR/rsub\"|" \
    -e "s|^socket = .*|socket = \"$BATS_TEST_TMPDIR/run/rsub.sock\"|" \
    -e "s|^bin_dir = .*|bin_dir = \"$BATS_TEST_TMPDIR/stub\"|" \
    -e "s|^kubectl = .*|kubectl = \"$BATS_TEST_TMPDIR/stub/kubectl\"|" site/rkit.toml
  for k in state_dir socket bin_dir kubectl; do grep -q "^$k = \"$BATS_TEST_TMPDIR/" site/rkit.toml; done
  SITE=$BATS_TEST_TMPDIR/site/rkit.toml
}

# site_daemon: the site's shared rsub daemon (its socket is rsub.socket), as its service
# manager would run it; teardown's stop_rsub ends it by pid.
site_daemon() {
  rsub --config "$SITE" daemon --foreground >"$BATS_TEST_TMPDIR/site-daemon.log" 2>&1 &
  for _ in $(seq 100); do [[ -S $BATS_TEST_TMPDIR/run/rsub.sock ]] && break; sleep 0.05; done
  [[ -S $BATS_TEST_TMPDIR/run/rsub.sock ]]
}

# toml_json FILE: the TOML file as JSON (Python's own TOML parser, not the tools').
toml_json() {
  /usr/bin/python3 -c 'import json, sys, tomllib; print(json.dumps(tomllib.load(open(sys.argv[1], "rb"))))' "$1"
}

# toml_keys FILE: the dotted keys of FILE, one a line, sorted; the names of tenants,
# users and backends (which the example chooses) shown as NAME, USER and TENANT.
toml_keys() {
  /usr/bin/python3 - "$1" <<'EOF'
import re, sys, tomllib
def walk(t, path):
    for k, v in t.items():
        p = path + [k]
        if isinstance(v, dict) and not re.fullmatch(r"rsub\.backends\.[^.]+\.(accounts|queues)", ".".join(p)):
            yield from walk(v, p)
        else:
            yield p
names = {("rsub", "tenants"): "NAME", ("rsub", "backends"): "NAME", ("rsub", "users"): "USER", ("rcost", "budgets"): "TENANT"}
keys = set()
for p in walk(tomllib.load(open(sys.argv[1], "rb")), []):
    if len(p) > 2 and tuple(p[:2]) in names:
        p[2] = names[tuple(p[:2])]
    keys.add(".".join(p))
print("\n".join(sorted(keys)))
EOF
}

@test "examples/rkit.toml as it is: only built-in defaults are active, and they change nothing" {
  run -0 toml_json "$EXAMPLE"
  echo "$output" | jq -e '. == {
    rtop: {policy: "pack"},
    rsub: {default_time_limit: "0", kill_grace: "10s", policy: "pack",
           priority: {weight_fairshare: 10000, weight_age: 1000, weight_priority: 1,
                      max_age: "7d", half_life: "1h", gpu_weight: 10}}}'
  # The same placement and the same job record as with no configuration at all.
  run -0 rtop --synthetic "$TOPO" place --ranks 2 --cpus-per-rank 1 --json
  expected=$output
  run -0 rtop --config "$EXAMPLE" --synthetic "$TOPO" place --ranks 2 --cpus-per-rank 1 --json
  assert_output "$expected"
  run -0 rtop --config "$EXAMPLE" --synthetic "$TOPO" place --ranks 2 --cpus-per-rank 1 --json --policy spread
  refute_output "$expected"  # the comparison can tell the policies apart
  run -0 rsub --dry-run --json -- true
  expected=$(echo "$output" | jq -c 'del(.submit_unix_s)')
  run -0 rsub --config "$EXAMPLE" --dry-run --json -- true
  assert_equal "$(echo "$output" | jq -c 'del(.submit_unix_s)')" "$expected"
}

@test "every tool accepts examples/rkit.toml as it is; rtrain runs examples/train.toml" {
  run -0 rtop --config "$EXAMPLE" place --ranks 1
  run -0 rsub --config "$EXAMPLE" status
  run -0 rsub --config "$EXAMPLE" --dry-run -- true
  for spec in sim train; do
    run -0 rsub --config "$EXAMPLE" submit --dry-run --json "$RKIT_ROOT/examples/jobs/$spec.toml"
    echo "$output" | jq -e --arg n "$spec" '.name == $n and .state == "PENDING"'
  done
  run -0 rcost --config "$EXAMPLE" prices --prices "$RKIT_ROOT/examples/prices.toml"
  run -0 rcost --config "$EXAMPLE" report --prices "$RKIT_ROOT/examples/prices.toml" --json - </dev/null
  echo "$output" | jq -e '.budgets == []'
  run -0 rbench --config "$EXAMPLE" list
  mkdir ckpt && echo weights >ckpt/a.bin
  run -0 rckpt --config "$EXAMPLE" pack ckpt -o ckpt.rkpt -q
  run -0 rtrain --config "$EXAMPLE" run "$RKIT_ROOT/examples/train.toml" --steps 2 --rows 2000 --json
  echo "$output" | jq -se 'map(select(.event == "summary")) | length == 1 and .[0].steps == 2'
  echo "$output" | jq -se 'any(.event == "eval")'
}

@test "examples/rkit.toml documents every key the tools read, each as a site example when not active" {
  site_config
  run -0 toml_keys "$SITE"
  assert_output "local.cpus
local.gpus
local.memory
rcost.budgets.TENANT
rcost.prices
rsub.admins
rsub.auto.backends
rsub.auto.prices
rsub.backends.NAME.accounts
rsub.backends.NAME.assumed_wait
rsub.backends.NAME.bin_dir
rsub.backends.NAME.context
rsub.backends.NAME.gpu_label
rsub.backends.NAME.gpu_resource
rsub.backends.NAME.image
rsub.backends.NAME.kind
rsub.backends.NAME.kubectl
rsub.backends.NAME.log_dir
rsub.backends.NAME.namespace
rsub.backends.NAME.partition
rsub.backends.NAME.priority_class
rsub.backends.NAME.qos
rsub.backends.NAME.queues
rsub.backends.NAME.refresh
rsub.backends.NAME.slurm_conf
rsub.backends.NAME.submit_retry
rsub.default_time_limit
rsub.kill_grace
rsub.limits.max_pids_per_job
rsub.limits.max_running_jobs_per_user
rsub.policy
rsub.priority.gpu_weight
rsub.priority.half_life
rsub.priority.max_age
rsub.priority.weight_age
rsub.priority.weight_fairshare
rsub.priority.weight_priority
rsub.socket
rsub.state_dir
rsub.tenants.NAME.groups
rsub.tenants.NAME.max_cpus
rsub.tenants.NAME.max_gpus
rsub.tenants.NAME.max_job_cost
rsub.tenants.NAME.shares
rsub.tenants.NAME.users
rsub.users.USER
rtop.policy"
  # Both kinds of backend are there, each with only keys of its kind (else rsub exits 78).
  toml_json "$SITE" | jq -e '[.rsub.backends[].kind] | sort == ["kubernetes", "slurm"]'
}

@test "examples/rkit.toml with its site examples uncommented is accepted, and asks neither Slurm nor kubectl to print a job" {
  site_config
  site_daemon
  # What Slurm would get, without calling it: the backend's partition, QOS, account and log folder.
  run -0 rsub --config "$SITE" submit "$RKIT_ROOT/examples/jobs/sim.toml" -t desk-a -b slurm --dry-run
  assert_line '#!/bin/sh'
  assert_line '#SBATCH --partition=batch'
  assert_line '#SBATCH --qos=normal'
  assert_line '#SBATCH --account=desk_a'
  assert_line --regexp '^#SBATCH --array=0,1,2,.*,99%10$'
  assert_line --regexp '^#SBATCH --output=/shared/rsub/logs/'
  # What Kubernetes would get: the namespace, the tenant's queue, the default image.
  run -0 rsub --config "$SITE" submit "$RKIT_ROOT/examples/jobs/train.toml" -t desk-a -b cloud --dry-run
  jq -e '.kind == "List" and all(.items[]; .metadata.namespace == "research")' <<<"$output"
  jq -e '.items[] | select(.kind == "Job") | .metadata.labels["kueue.x-k8s.io/queue-name"] == "desk-a-queue"' <<<"$output"
  jq -e '.items[] | select(.kind == "Job") | .spec.template.spec.containers[0].image == "registry.example/ml:1"' <<<"$output"
  [[ ! -e $CALLS ]]
  # --backend auto, from another folder: the price sheet is found beside the file; Slurm
  # (a stub that fails) is not eligible, and 4 GPUs do not fit [local]'s 2.
  mkdir elsewhere && cd elsewhere
  run -0 --separate-stderr rsub --config "$SITE" --dry-run -b auto -t desk-a -g 4 -- true
  [[ ${stderr%%$'\n'*} =~ ^rsub:\ --backend\ auto\ chose\ cloud:.*costs\ [0-9.]+\ USD ]]
  jq -e '.kind == "List" and .items[0].kind == "Job"' <<<"$output"
  run -0 rsub --config "$SITE" status
  assert_output --partial 'backend cloud: Kubernetes, kubectl context gke-prod, namespace research'
  # rcost: rcost.prices (relative to the file) and the budgets.
  run -0 rcost --config "$SITE" prices --json
  echo "$output" | jq -se 'map(.backend) | unique == ["cloud", "cloud-spot", "local", "onprem", "slurm"]'
  run -0 rcost --config "$SITE" report --json - </dev/null
  echo "$output" | jq -e '[.budgets[].tenant] == ["desk-a", "desk-b"] and .currency == "USD"'
  run -0 rtop --config "$SITE" place --ranks 1
  # rtop serve: rsub.state_dir for the queue, rcost.prices (it must price local jobs).
  start_serve --config "$SITE"
  run -0 http_get "$SERVE_URL"
  assert_line 'rkit_queue_up 1'
  stop_serve
  [[ $SERVE_STATUS -eq 143 || $SERVE_STATUS -eq 0 ]]
}

@test "every key of examples/rkit.toml is read: its tool exits 78 on a value of the wrong type there" {
  site_config
  site_daemon
  # As it is, each command accepts it: a 78 below is the one line's doing.
  run -0 rtop --config "$SITE" --synthetic "$TOPO" place --ranks 1
  run -0 rcost --config "$SITE" report --json - </dev/null
  run -0 rsub --config "$SITE" status
  local n=0 line table="" tried=0 cmd
  while IFS= read -r line; do
    n=$((n + 1))
    if [[ $line =~ ^\[([^]]+)\] ]]; then table=${BASH_REMATCH[1]}; continue; fi
    [[ $line =~ ^[A-Za-z0-9_-]+\ = ]] || continue
    case $table in
      rtop*) cmd=(rtop --synthetic "$TOPO" place --ranks 1) ;;
      rcost*) cmd=(rcost report --json -) ;;
      *) cmd=(rsub status) ;;
    esac
    # The one line gets an array of a number: no key takes that.
    awk -v n="$n" 'NR == n { sub(/=.*/, "= [0]") } { print }' "$SITE" >site/broken.toml
    run "${cmd[@]}" --config site/broken.toml </dev/null
    if [[ $status -ne 78 || $output != *"site/broken.toml:$n:"* ]]; then
      echo "line $n ($line, [$table]): ${cmd[*]} exited $status, not 78 naming line $n: $output" >&2
      return 1
    fi
    tried=$((tried + 1))
  done <"$SITE"
  ((tried >= 45)) || { echo "only $tried keys tried" >&2; return 1; }
}
