# Sourced by tests/integration/rtop_prometheus.bats: one real Prometheus (Debian's
# `prometheus`, 2.42) per test file, on a free loopback port, with its TSDB in a folder of
# its own, scraping one target every second; stopped by pid at the end. Prometheus needs
# no root.
#   prom_start TARGET      TARGET as HOST:PORT; exports PROM_URL, PROM_PID, PROM_DIR
#   prom_wait_up [SECONDS] until the target's health is "up" (30 s by default)
#   prom_query EXPR        the value of the one series EXPR gives now, or nothing
#   prom_wait EXPR WANT [SECONDS]   until prom_query EXPR equals WANT (as numbers)
#   prom_stop

# A TCP port that nothing listens on now.
prom_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

prom_start() {
  command -v prometheus >/dev/null || { echo "prometheus is not installed (packaging/install-deps.sh tests)" >&2; return 1; }
  PROM_DIR=$(mktemp -d /tmp/rkit-prometheus.XXXXXX)
  local port
  port=$(prom_free_port)
  cat >"$PROM_DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: rtop
    static_configs:
      - targets: ["$1"]
EOF
  prometheus --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/data" \
    --web.listen-address="127.0.0.1:$port" >"$PROM_DIR/prometheus.log" 2>&1 3>&- &
  PROM_PID=$!
  PROM_URL=http://127.0.0.1:$port
  export PROM_URL PROM_PID PROM_DIR
  local deadline=$((SECONDS + 30))
  until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/-/ready", timeout=2)' "$PROM_URL" 2>/dev/null; do
    if ! kill -0 "$PROM_PID" 2>/dev/null || ((SECONDS > deadline)); then
      echo "prometheus did not start:" >&2
      tail -20 "$PROM_DIR/prometheus.log" >&2
      return 1
    fi
    sleep 0.2
  done
}

prom_stop() {
  if [[ -n ${PROM_PID:-} ]]; then
    kill -TERM "$PROM_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$PROM_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PROM_PID" 2>/dev/null || true
    wait "$PROM_PID" 2>/dev/null || true
  fi
  [[ -n ${PROM_DIR:-} ]] && rm -rf "$PROM_DIR"
  PROM_PID= PROM_DIR=
}

# prom_api PATH [EXPR]: the JSON Prometheus answers at PATH (EXPR as its query parameter).
prom_api() {
  python3 - "$PROM_URL" "$1" "${2:-}" <<'EOF'
import sys, urllib.parse, urllib.request
url = sys.argv[1] + sys.argv[2]
if sys.argv[3]:
    url += "?" + urllib.parse.urlencode({"query": sys.argv[3]})
with urllib.request.urlopen(url, timeout=10) as r:
    sys.stdout.write(r.read().decode())
EOF
}

# The scrape health of the one target: "up", "down" or "unknown", and its last error.
prom_target() {
  prom_api /api/v1/targets | jq -r '.data.activeTargets[0] | "\(.health) \(.lastError)"'
}

prom_wait_up() {
  local deadline=$((SECONDS + ${1:-30})) t
  while ((SECONDS < deadline)); do
    t=$(prom_target)
    [[ $t == "up "* ]] && return 0
    sleep 0.2
  done
  echo "the target is not up: $t" >&2
  return 1
}

# The value of the one series an instant query gives; nothing when it gives none; an
# error when it gives several, or Prometheus refuses the query.
prom_query() {
  local json
  json=$(prom_api /api/v1/query "$1") || return 1
  jq -e '.status == "success"' <<<"$json" >/dev/null || { echo "query $1: $json" >&2; return 1; }
  case $(jq '.data.result | length' <<<"$json") in
    0) return 0 ;;
    1) jq -r '.data.result[0].value[1]' <<<"$json" ;;
    *) echo "query $1 gives several series: $json" >&2; return 1 ;;
  esac
}

prom_wait() {
  local deadline=$((SECONDS + ${3:-15})) v=
  while ((SECONDS < deadline)); do
    v=$(prom_query "$1")
    [[ -n $v ]] && awk -v a="$v" -v b="$2" 'BEGIN { exit !(a + 0 == b + 0) }' && return 0
    sleep 0.25
  done
  echo "$1 = '$v', not $2" >&2
  return 1
}
