#!/usr/bin/env bash
# A real single-node Slurm (Debian 12's 22.05) that benchmarks and integration tests start
# and stop themselves, as root and without systemd:
#
#   tests/integration/slurm/slurm.sh start DIR [--accounting]
#   source DIR/env.sh                  # exports SLURM_CONF; then sbatch, squeue, sacct ...
#   tests/integration/slurm/slurm.sh stop DIR
#
# One node named `hostname -s` with all its CPUs (nproc), 95% of MemTotal and two fake GPUs
# (gpu:2, gres.conf File= symlinks to /dev/null: `--gres=gpu:1` sets CUDA_VISIBLE_DEVICES).
# munged, slurmctld, slurmd and with --accounting a private MariaDB and slurmdbd (so that
# sacct answers) all keep their config, key, sockets, state, logs and pid files in DIR and
# listen on free ports found at start: a system-wide /etc/slurm, /etc/munge or MariaDB is
# never read or touched, and two instances can run side by side.
# Packages (not installed here): slurmctld slurmd slurm-client munge; for --accounting
# also slurmdbd mariadb-server.
# Starting again in the same DIR after a stop keeps Slurm's state (job ids go on, finished
# jobs are remembered) and the database; a fresh DIR is a fresh cluster.
set -euo pipefail

die() { echo "slurm.sh: error: $*" >&2; exit 1; }
usage() { die "usage: slurm.sh start DIR [--accounting] | slurm.sh stop DIR"; }

# Daemons carry RKIT_SLURM_SH=DIR in their environment: stop kills a pid only when it
# carries the mark (a stale pid file must never hit a stranger).
marked() { grep -qzx "RKIT_SLURM_SH=$dir" "/proc/$1/environ" 2>/dev/null; }
# What a dead or stopped slurmd leaves behind: slurmstepds (they rewrite their environment
# for their process title, but keep slurmd's log in DIR open) and job tasks (Slurm sets
# SLURM_CONF and SLURM_JOB_ID in their environment).
leftover() {
  if [[ $(cat "/proc/$1/comm" 2>/dev/null) == slurmstepd ]]; then
    find "/proc/$1/fd" -lname "$dir/*" -print -quit 2>/dev/null | grep -q .
  else
    grep -qzx "SLURM_CONF=$dir/etc/slurm.conf" "/proc/$1/environ" 2>/dev/null &&
      grep -qz '^SLURM_JOB_ID=' "/proc/$1/environ" 2>/dev/null
  fi
}

# launch NAME CMD...: runs CMD in the background (it must not fork: each daemon runs in
# the foreground) and records its pid in DIR/run/NAME.pid.
launch() {
  local name=$1; shift
  RKIT_SLURM_SH=$dir "$@" </dev/null >>"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/run/$name.pid"
}

# A zombie has exited: its parent (init, once start has returned) reaps it in its own time.
alive() { [[ -r /proc/$1/stat && $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# terminate SIGNAL PID...: sends SIGNAL, waits up to 20 s for them to exit, then SIGKILL.
terminate() {
  local signal=$1 i p; shift
  local pids=("$@")
  ((${#pids[@]})) || return 0
  kill "-$signal" "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    local left=()
    for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
    ((${#left[@]})) || return 0
    pids=("${left[@]}")
    sleep 0.1
  done
  echo "slurm.sh: SIGKILL to ${pids[*]} (still there 20 s after SIG$signal)" >&2
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

stop_daemons() {  # NAME...: together, each by the pid in DIR/run/NAME.pid
  local name file pids=()
  for name; do
    file=$dir/run/$name.pid
    [[ -s $file ]] && marked "$(<"$file")" && pids+=("$(<"$file")")
  done
  terminate TERM "${pids[@]}"
  for name; do rm -f "$dir/run/$name.pid"; done
}

logs_tail() {  # each daemon's stderr (slurm's -D copies its log there) and MariaDB's log
  local f
  for f in "$dir"/log/*.out "$dir"/log/mariadb.log; do
    [[ -s $f ]] && { echo "--- $f"; tail -n 12 "$f"; }
  done >&2
  return 0
}

# wait_for WHAT SECONDS CMD...: polls CMD every 0.1 s; on timeout, or when a daemon we
# started has died, prints the logs' tails, stops everything and fails.
wait_for() {
  local what=$1 secs=$2 deadline f; shift 2
  deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    for f in "$dir"/run/*.pid; do
      [[ -s $f ]] && ! kill -0 "$(<"$f")" 2>/dev/null && fail "$(basename "$f" .pid) died while waiting for $what"
    done
    (($(date +%s) < deadline)) || fail "timed out after $secs s waiting for $what"
    sleep 0.1
  done
}
fail() { echo "slurm.sh: error: $*; logs:" >&2; logs_tail; stop; exit 1; }

free_ports=()  # pick_port: the first port from 6817 that nothing listens on and we have not taken
pick_port() {
  local p=6817 listening
  listening=$(awk 'NR > 1 && $4 == "0A" {sub(/.*:/, "", $2); print $2}' /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    while read -r hex; do echo $((16#$hex)); done)
  while grep -qx "$p" <<<"$listening" || [[ " ${free_ports[*]} " == *" $p "* ]]; do ((p++)); done
  free_ports+=("$p")
  port=$p
}

node_idle() { [[ $(sinfo -h -N -n "$node" -o %T) == idle ]]; }
# slurmctld's first scheduling pass comes about 3 s after it starts: until then jobs pend.
scheduling() { (($(sdiag | awk '/^Main schedule/ {m = 1} m && /Total cycles:/ {print $3; exit}') > 0)); }
munge_ok() { munge -n -S "$dir/munge/munge.socket.2" | unmunge -S "$dir/munge/munge.socket.2"; }
db() { mariadb --defaults-file="$dir/etc/my.cnf" -u root "$@"; }

start_munge() {
  mkdir -p "$dir/munge"
  [[ -s $dir/munge/munge.key ]] || mungekey --create --keyfile="$dir/munge/munge.key"
  # munged runs as user munge and insists on owning its key (mode 400) and directory.
  chown -R munge:munge "$dir/munge"
  chmod 755 "$dir/munge" && chmod 400 "$dir/munge/munge.key"
  setpriv --reuid=munge --regid=munge --clear-groups test -r "$dir/munge/munge.key" ||
    die "user munge cannot reach $dir/munge: a folder above $dir is closed to others (chmod o+x it)"
  launch munged setpriv --reuid=munge --regid=munge --init-groups munged --foreground \
    --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
  wait_for munged 10 munge_ok
}

start_database() {  # a private MariaDB for slurmdbd: datadir, socket and port in DIR
  local port; pick_port; db_port=$port
  # Small InnoDB files and no fsync per commit: a throwaway test database.
  cat >"$dir/etc/my.cnf" <<EOF
[client]
socket=$dir/run/mysqld.sock
[mariadbd]
datadir=$dir/mysql
socket=$dir/run/mysqld.sock
port=$db_port
bind-address=127.0.0.1
skip-name-resolve
pid-file=$dir/run/mariadb.pid
log-error=$dir/log/mariadb.log
user=root
innodb_buffer_pool_size=64M
innodb_log_file_size=16M
innodb_flush_log_at_trx_commit=2
EOF
  if [[ ! -d $dir/mysql/mysql ]]; then
    mariadb-install-db --defaults-file="$dir/etc/my.cnf" --auth-root-authentication-method=socket \
      --skip-test-db >>"$dir/log/mariadb-install.out" 2>&1 || { logs_tail; die "mariadb-install-db failed"; }
  fi
  launch mariadb mariadbd --defaults-file="$dir/etc/my.cnf"
  wait_for MariaDB 60 db -e 'SELECT 1'
  db -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

write_slurm_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.95)}' /proc/meminfo)  # slurmd drains a node claiming more than it has
  mkdir -p "$dir/gpu"
  ln -sfn /dev/null "$dir/gpu/nvidia0" && ln -sfn /dev/null "$dir/gpu/nvidia1"
  # A Count=-only line is dropped (the node then drains) and a plain file is refused.
  echo "NodeName=$node Name=gpu File=$dir/gpu/nvidia[0-1]" >"$dir/etc/gres.conf"
  cat >"$dir/etc/slurm.conf" <<EOF
# Written by tests/integration/slurm/slurm.sh; the why of each line is in DESIGN.md.
ClusterName=rkit
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire=10: else a requeued job waits 120 s.
AuthInfo=cred_expire=10,socket=$dir/munge/munge.socket.2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
# No cgroups here: limits are scheduled, not enforced.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Without DefMemPerCPU every job takes the whole node's memory.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((mem_mb / cpus))
# Else 1-3 s from submit to start.
SchedulerParameters=batch_sched_delay=0,sched_interval=5,bf_interval=5
# Else impossible jobs pend forever.
EnforcePartLimits=ALL
MailProg=/bin/true
MinJobAge=3600
ReturnToService=2
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb Gres=gpu:2 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  if ((accounting)); then
    cat >>"$dir/etc/slurm.conf" <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$dbd_port
# The munge socket for talking to slurmdbd (AuthInfo's is not used for that).
AccountingStoragePass=$dir/munge/munge.socket.2
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
EOF
    (umask 077 && cat >"$dir/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
DbdHost=localhost
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
    )
  fi
  echo "export SLURM_CONF=$dir/etc/slurm.conf" >"$dir/env.sh"
}

start() {
  local t0=$EPOCHREALTIME f port
  for f in "$dir"/run/*.pid; do
    [[ -s $f ]] && marked "$(<"$f")" && die "already running in $dir ($(basename "$f" .pid)); stop it first"
  done
  rm -f "$dir"/run/*.pid  # left by a run that was never stopped: those daemons are gone
  mkdir -p "$dir"/{etc,run,log,state,spool}
  chmod 711 "$dir"  # user munge must reach its key and socket
  ((${#dir} < 80)) || die "DIR too long for a unix socket path: $dir"
  export SLURM_CONF=$dir/etc/slurm.conf
  start_munge
  pick_port; ctld_port=$port
  pick_port; slurmd_port=$port
  if ((accounting)); then
    pick_port; dbd_port=$port
    start_database
  fi
  write_slurm_conf
  if ((accounting)); then
    launch slurmdbd slurmdbd -D
    wait_for slurmdbd 60 sacctmgr -n list cluster
    # slurmctld registers its cluster only when sacctmgr has added it.
    [[ -n $(sacctmgr -n -P list cluster rkit format=cluster) ]] || sacctmgr -i add cluster rkit >/dev/null
  fi
  launch slurmctld slurmctld -D
  launch slurmd slurmd -D
  wait_for "node $node idle in sinfo" 60 node_idle
  wait_for "slurmctld's first scheduling pass" 30 scheduling
  echo "slurm.sh: ready in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s; source $dir/env.sh" >&2
}

stop() {
  local ids=() pid pids=() i
  export SLURM_CONF=$dir/etc/slurm.conf
  # Cancel jobs first: slurmd leaves its slurmstepds and their tasks running when it stops.
  if [[ -s $dir/run/slurmctld.pid ]] && marked "$(<"$dir/run/slurmctld.pid")"; then
    mapfile -t ids < <(timeout 15 squeue -h -o %i 2>/dev/null || true)
    if ((${#ids[@]})); then
      timeout 15 scancel "${ids[@]}" 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do
        [[ -z $(timeout 15 squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.1
      done
    fi
  fi
  # slurmctld sends its last job records to slurmdbd, which stores them in MariaDB, and
  # all of them authenticate through munged; each of those stops once its clients have.
  stop_daemons slurmd slurmctld
  stop_daemons slurmdbd
  stop_daemons mariadb munged
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    ((pid != $$)) && { marked "$pid" || leftover "$pid"; } && pids+=("$pid")
  done
  terminate KILL "${pids[@]}"  # orphans of a cluster that is gone (slurmstepd ignores SIGTERM)
}

[[ $# -ge 2 ]] || usage
cmd=$1; dir=$2; shift 2
accounting=0
case "$cmd:${1:-}" in
  start:--accounting) accounting=1 ;;
  start: | stop:) ;;
  *) usage ;;
esac
[[ $dir != *[[:space:]]* ]] || die "DIR must not contain spaces (slurm.conf cannot quote them)"
[[ $(id -u) -eq 0 ]] || die "must run as root (the daemons run as root, munged as user munge)"
node=$(hostname -s)
if [[ $cmd == start ]]; then
  mkdir -p "$dir"
  dir=$(realpath "$dir")
  start
else
  [[ -d $dir ]] || die "no such directory: $dir"
  dir=$(realpath "$dir")
  stop
fi
