#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the tests and for trying `arlarena sweep
# --executor slurm` on a laptop (a real cluster never needs it).
#   launch/slurm_local.sh start|stop|status [STATE_DIR]     (default STATE_DIR: /tmp/arlarena-slurm)
# `start` writes STATE_DIR/slurm.conf (node `localhost`: the cores of `nproc`, the memory of
# `free`; one partition `local`; free TCP ports), starts a private munged (its own key and socket
# under STATE_DIR), slurmctld and slurmd as the current user, waits until `sinfo` shows the node
# idle, and prints `export SLURM_CONF=...` for the client tools (sbatch, squeue, scontrol).
# It is idempotent: a running cluster is left as it is. `stop` ends the daemons (the state stays).
# Needs the Debian/Ubuntu package slurm-wlm (slurmctld, slurmd, the clients, munge); no cgroups.
set -euo pipefail

action="${1:-}"
state="${2:-/tmp/arlarena-slurm}"
timeout_s="${SLURM_LOCAL_TIMEOUT:-60}"
case "$action" in start | stop | status) ;; *)
  echo "usage: $0 start|stop|status [STATE_DIR]" >&2
  exit 2
  ;;
esac
mkdir -p "$state"
state="$(cd "$state" && pwd)"
conf="$state/slurm.conf"
export SLURM_CONF="$conf"
daemons=(munged slurmctld slurmd)

pid_of() { # the live pid of daemon $1 (from its pid file), else nothing
  local pid
  pid="$(cat "$state/run/$1.pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

stop_all() { # cancel the jobs (their processes outlive slurmd), then end the daemons
  local name pid pids=() alive
  if [ -n "$(pid_of slurmctld)" ]; then
    scancel --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 40); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for name in slurmd slurmctld munged; do
    pid="$(pid_of "$name")"
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$state/run/$name.pid"
  done
  for _ in $(seq 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return 0
    sleep 0.2
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_conf() {
  local user cpus mem ctld_port slurmd_port
  user="$(id -un)"
  cpus="$(nproc)"
  mem="$(free -m | awk '/^Mem:/ {print int($2 * 0.9)}')"
  ctld_port="$(free_port)"
  slurmd_port="$(free_port)"
  while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port="$(free_port)"; done
  mkdir -p "$state"/{ctld,spool,log,run,tmp,munge}
  cat >"$conf" <<EOF
# written by launch/slurm_local.sh: a single-node cluster on localhost
ClusterName=arlarena-local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$state/munge/munge.socket,cred_expire=10
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
TmpFS=$state/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
KillWait=10
MinJobAge=60
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  [ -n "$(pid_of munged)" ] && return 0
  command -v munged >/dev/null || {
    echo "slurm_local.sh: munged not found (apt-get install munge)" >&2
    exit 1
  }
  chmod 700 "$state/munge"
  [ -s "$state/munge/munge.key" ] || {
    dd if=/dev/urandom of="$state/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$state/munge/munge.key"
  }
  munged --force --socket="$state/munge/munge.socket" --key-file="$state/munge/munge.key" \
    --pid-file="$state/run/munged.pid" --log-file="$state/log/munged.log" \
    --seed-file="$state/munge/munged.seed"
}

wait_idle() {
  local deadline=$((SECONDS + timeout_s)) node
  while [ "$SECONDS" -lt "$deadline" ]; do
    node="$(sinfo -h -N -n localhost -o %t 2>/dev/null || true)"
    case "$node" in idle* | mix* | alloc*) return 0 ;; esac
    sleep 0.5
  done
  echo "slurm_local.sh: the node is not idle after ${timeout_s}s (sinfo: '${node:-none}');" \
    "see $state/log/" >&2
  return 1
}

start() {
  for cmd in slurmctld slurmd sinfo; do
    command -v "$cmd" >/dev/null || {
      echo "slurm_local.sh: $cmd not found (apt-get install slurm-wlm)" >&2
      exit 1
    }
  done
  if [ -z "$(pid_of slurmctld)" ] || [ -z "$(pid_of slurmd)" ] || [ ! -s "$conf" ]; then
    stop_all
    write_conf
    start_munge
    slurmctld -f "$conf"
    slurmd -f "$conf" -N localhost
  fi
  if ! wait_idle; then
    stop_all
    exit 1
  fi
  echo "export SLURM_CONF=$conf"
}

case "$action" in
start) start ;;
stop) stop_all ;;
status)
  up=0
  for name in "${daemons[@]}"; do
    pid="$(pid_of "$name")"
    if [ -n "$pid" ]; then echo "$name: running (pid $pid)"; else echo "$name: stopped"; fi
    [ -n "$pid" ] || up=1
  done
  [ "$up" -eq 0 ] && sinfo -N -n localhost 2>/dev/null
  echo "export SLURM_CONF=$conf"
  exit "$up"
  ;;
esac
