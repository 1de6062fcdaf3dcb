#!/usr/bin/env bats
# rtop serve scraped by a real Prometheus (Debian's 2.42, started here on a free loopback
# port, scraping every second; prometheus/bats_prometheus.bash), the values read back
# through Prometheus's HTTP query API: node CPUs and memory against this machine, the rsub
# queue per tenant against jobs submitted here (a private state folder, a daemon of its
# own), the cost rate of a running job against the price sheet, and the FAKE NVML's GPUs
# (tests/fakes: no GPU here), counters through rate(). Everything is stopped by pid.
bats_require_minimum_version 1.5.0

setup_file() {
  load ../cli/helpers
  load ../cli/rtop_serve
  load prometheus/bats_prometheus
  cd "$BATS_FILE_TMPDIR"
  export RKIT_STATE_DIR=$BATS_FILE_TMPDIR/state
  export RKIT_CONFIG=$BATS_FILE_TMPDIR/rkit.toml
  export RKIT_NVML_LIBRARY=$RKIT_BUILD_DIR/tests/fakes/libfake_nvml.so
  [[ -f $RKIT_NVML_LIBRARY ]] || { echo "$RKIT_NVML_LIBRARY is missing: build with tests on" >&2; return 1; }
  cat >prices.toml <<'EOF'
currency = "EUR"
[backends.local]
cpu_hour = 0.5
memory_gib_hour = 0.25
gpu_hour = { default = 2.0, H100 = 3.0 }
EOF
  cat >"$RKIT_CONFIG" <<'EOF'
[local]
cpus = 2
gpus = 2
memory = "4G"
[rcost]
prices = "prices.toml"
EOF
  # desk-a: 3 held jobs of 1 GPU; desk-b: 2 held jobs and one running with 1 core, 1 GPU
  # and 2 GiB, which costs 0.5 + 2 × 0.25 + 2.0 = 3 EUR an hour.
  for _ in 1 2 3; do rsub -q --hold -t desk-a -g 1 -- true >/dev/null; done
  for _ in 1 2; do rsub -q --hold -t desk-b -- true >/dev/null; done
  RUNNING_JOB=$(rsub -t desk-b -g 1 --mem 2G -- sleep 300)
  wait_state "$RUNNING_JOB" RUNNING
  start_serve --interval 1s
  prom_start "127.0.0.1:$SERVE_PORT"
  prom_wait_up
  export SERVE_PID SERVE_URL SERVE_PORT RUNNING_JOB
}

teardown_file() {
  load ../cli/helpers
  load ../cli/rtop_serve
  load prometheus/bats_prometheus
  prom_stop
  stop_serve
  stop_rsub
}

setup() {
  load ../cli/helpers
  load ../cli/rtop_serve
  load prometheus/bats_prometheus
  cd "$BATS_FILE_TMPDIR"
}

@test "prometheus: the rtop target is up and its scrapes have no error" {
  run prom_target
  assert_output "up "
  prom_wait 'up{job="rtop"}' 1
  [[ $(prom_query 'scrape_samples_scraped{job="rtop"}') -gt 30 ]]
  # Prometheus warns of samples it drops (duplicates, bad timestamps, ...): none.
  run grep -iE 'level=(warn|error).*(scrape|ingest|sample)' "$PROM_DIR/prometheus.log"
  assert_failure 1
}

@test "prometheus: node CPUs and memory read back equal this machine's" {
  prom_wait 'rkit_node_cpus' "$(getconf _NPROCESSORS_ONLN)"
  prom_wait 'rkit_node_memory_total_bytes' "$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)"
  # busy + idle CPU seconds grow by one second per CPU per second. (Once the series is
  # 10 s old: rate() over a window the series does not fill comes out low.)
  prom_wait 'count_over_time(rkit_node_cpus[10s]) >= bool 9' 1 20
  prom_wait 'count(rate(rkit_node_cpu_seconds_total[10s]))' 2
  rate=$(prom_query 'sum(rate(rkit_node_cpu_seconds_total[10s]))')
  awk -v r="$rate" -v n="$(getconf _NPROCESSORS_ONLN)" 'BEGIN { exit !(r > 0.75 * n && r < 1.25 * n) }' ||
    fail "CPU seconds per second: $rate for $(getconf _NPROCESSORS_ONLN) CPUs"
  util=$(prom_query 'rkit_node_cpu_utilization_ratio')
  awk -v u="$util" 'BEGIN { exit !(u != "" && u >= 0 && u <= 1) }' || fail "utilization '$util'"
}

@test "prometheus: the queue per tenant equals what was submitted, and the cost rate the price sheet's" {
  prom_wait 'rkit_queue_up' 1
  prom_wait 'rkit_queue_jobs{tenant="desk-a",state="pending"}' 3
  prom_wait 'rkit_queue_jobs{tenant="desk-a",state="running"}' 0
  prom_wait 'rkit_queue_gpus{tenant="desk-a",state="pending"}' 3
  prom_wait 'rkit_queue_jobs{tenant="desk-b",state="pending"}' 2
  prom_wait 'rkit_queue_jobs{tenant="desk-b",state="running"}' 1
  prom_wait 'rkit_queue_gpus{tenant="desk-b",state="running"}' 1
  prom_wait 'rkit_tenant_cost_per_hour{tenant="desk-b",currency="EUR"}' 3
  prom_wait 'rkit_tenant_cost_per_hour{tenant="desk-a",currency="EUR"}' 0
  prom_wait 'sum(rkit_queue_jobs)' 6
  age=$(prom_query 'rkit_queue_oldest_pending_age_seconds{tenant="desk-a"}')
  awk -v a="$age" 'BEGIN { exit !(a > 0 && a < 600) }' || fail "age '$age'"
  # A job submitted now is counted at the next scrapes.
  rsub -q --hold -t desk-a -- true >/dev/null
  prom_wait 'rkit_queue_jobs{tenant="desk-a",state="pending"}' 4 10
  prom_wait 'rkit_scrape_errors_total{source="queue"}' 0
}

@test "prometheus: the fake NVML's GPUs, and the energy counter's rate is their power" {
  prom_wait 'rkit_nvml_up' 1
  prom_wait 'count(rkit_gpu_power_watts)' 2
  prom_wait 'rkit_gpu_power_watts{gpu="0",uuid="GPU-fake-0000",model="FAKE NVML GPU 0"}' 312.5
  prom_wait 'rkit_gpu_utilization_ratio{gpu="1"}' 0.37
  prom_wait 'rkit_gpu_memory_used_bytes{gpu="1"}' $((20 << 30))
  prom_wait 'rkit_gpu_memory_free_bytes{gpu="1"}' $((60 << 30))
  # The fake's counter grows at 312.5 W: joules per second through rate() are its watts.
  prom_wait 'count_over_time(rkit_nvml_up[10s]) >= bool 9' 1 20
  prom_wait 'count(rate(rkit_gpu_energy_joules_total[10s]))' 2
  watts=$(prom_query 'rate(rkit_gpu_energy_joules_total{gpu="0"}[10s])')
  awk -v w="$watts" 'BEGIN { exit !(w > 312.5 * 0.9 && w < 312.5 * 1.1) }' || fail "rate of energy: $watts W"
}

@test "prometheus: when rtop serve stops, its target goes down" {
  kill -TERM "$SERVE_PID"
  for _ in $(seq 50); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.1; done
  refute_alive "$SERVE_PID"
  prom_wait 'up{job="rtop"}' 0 10
  run prom_target
  assert_output --regexp '^down .*connection refused'
}
