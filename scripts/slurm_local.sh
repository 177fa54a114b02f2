#!/usr/bin/env bash
# A real two-node Slurm cluster on this one machine, from Debian's packages (slurm-wlm and
# munge: scripts/setup.sh installs them, and so does `start` where they are missing): its own
# munged, one slurmctld and two slurmd daemons started as the nodes n1 and n2 (Debian's Slurm
# is built with MULTIPLE_SLURMD).
# The examples in examples/slurm/ and the tests of label `slurm` run on it (docs/cluster.md).
#
#   scripts/slurm_local.sh start [--cpus N] [--gpus G]
#                                             N CPUs per node (default 2: a 1-node x 2-task
#                                             job fits on one node), G stand-in GPUs per node
#                                             (default 4, 0: none); a second start finds the
#                                             running cluster and leaves it as it is
#   scripts/slurm_local.sh status             sinfo -N, and the daemons' pids
#   scripts/slurm_local.sh stop               cancels this cluster's jobs, then ends the
#                                             daemons this script started (by their pid files)
#   scripts/slurm_local.sh conf               prints the path of slurm.conf
#
# Clients find the cluster through SLURM_CONF:  export SLURM_CONF=$(scripts/slurm_local.sh conf)
#
# Everything lives in one folder, GRIDNN_SLURM_DIR (default /var/tmp/gridnn-slurm): the
# configuration, the munge key and socket, state, logs and pid files. Nothing under /etc is
# touched. Ports: slurmctld on GRIDNN_SLURM_PORT (default 16817), the nodes on the next two.
# Needs root: slurmd starts each job's tasks as the job's user.
#
# The configuration a test relies on: ProctrackType=proctrack/linuxproc and TaskPlugin=
# task/none (no cgroups needed), select/cons_tres by CPU, SlurmdParameters=config_overrides
# (the nodes may claim more CPUs than the machine has), cred_expire=5 (a requeued job starts
# again after 5 s, not Slurm's default 120), KillWait=5, and finished jobs kept 10 minutes
# for `scontrol show job`. The stand-in GPUs are gres "gpu" backed by character devices that
# are /dev/null (gres.conf): jobs that ask for GPUs (examples/slurm/gpu.sbatch) are scheduled
# and get CUDA_VISIBLE_DEVICES, and must run with --device cpu.
set -euo pipefail

dir=${GRIDNN_SLURM_DIR:-/var/tmp/gridnn-slurm}
port=${GRIDNN_SLURM_PORT:-16817}
conf=$dir/slurm.conf
nodes=(n1 n2)

die() { echo "slurm_local: $*" >&2; exit 1; }
usage() { die "usage: scripts/slurm_local.sh start [--cpus N] [--gpus G] | status | stop | conf"; }

# The pid in pid file $1 when that process is alive and its command line contains $2.
live_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  local cmdline
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ "$cmdline" == *"$2"* ]] || return 1
  echo "$pid"
}
# Each daemon: "name pidfile marker" (the marker is in its command line).
daemons() {
  echo "munged $dir/munge/munged.pid $dir/munge/munge.socket"
  echo "slurmctld $dir/run/slurmctld.pid $conf"
  local n
  for n in "${nodes[@]}"; do echo "slurmd-$n $dir/run/slurmd-$n.pid $conf"; done
}
running_count() {
  local name pidfile marker count=0
  while read -r name pidfile marker; do
    live_pid "$pidfile" "$marker" >/dev/null && count=$((count + 1))
  done < <(daemons)
  echo $count
}

# Every node answers and is idle (or allocated), up to $1 seconds.
wait_nodes_up() {
  local i states
  for ((i = 0; i < $1 * 2; i++)); do
    states=$(SLURM_CONF=$conf sinfo -h -N -o "%N %t" 2>/dev/null | sort -u) || states=""
    if [[ $(echo "$states" | grep -cE " (idle|alloc|mix)$") -eq ${#nodes[@]} ]]; then return 0; fi
    sleep 0.5
  done
  echo "$states" >&2
  return 1
}

write_conf() {  # $1: CPUs per node, $2: stand-in GPUs per node
  local host
  host=$(hostname -s)
  cat >"$conf" <<EOF
# Written by scripts/slurm_local.sh: a two-node Slurm cluster on one machine ($host).
ClusterName=gridnn-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
StateSaveLocation=$dir/state/slurmctld
SlurmdSpoolDir=$dir/state/slurmd-%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=600
KillWait=5
InactiveLimit=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
EOF
  local gres="" g
  : >"$dir/gres.conf"
  if (($2 > 0)); then
    echo "GresTypes=gpu" >>"$conf"
    gres=" Gres=gpu:$2"
    mkdir -p "$dir/dev"
    for ((g = 0; g < $2; g++)); do
      [[ -c "$dir/dev/gpu$g" ]] || mknod "$dir/dev/gpu$g" c 1 3
      echo "Name=gpu File=$dir/dev/gpu$g" >>"$dir/gres.conf"
    done
  fi
  local i=1 n
  for n in "${nodes[@]}"; do
    echo "NodeName=$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + i)) CPUs=$1$gres State=UNKNOWN" >>"$conf"
    i=$((i + 1))
  done
  echo "PartitionName=local Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP" >>"$conf"
}

start() {
  local cpus=2 gpus=4
  while (($#)); do
    case "$1" in
      --cpus) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--cpus needs a positive integer"; cpus=$2; shift 2 ;;
      --gpus) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--gpus needs an integer >= 0"; gpus=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ $(id -u) -eq 0 ]] || die "needs root: slurmd starts each job's tasks as the job's user (run it with sudo)"
  local bin missing=0
  for bin in munged mungekey slurmctld slurmd sinfo sbatch srun; do
    command -v "$bin" >/dev/null || missing=1
  done
  if ((missing)); then  # a fresh machine: Debian's packages, as scripts/setup.sh installs them
    echo "slurm_local: installing slurm-wlm and munge"
    [[ -n "$(ls /var/lib/apt/lists/*Packages* 2>/dev/null)" ]] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null ||
      die "could not install slurm-wlm and munge with apt-get"
  fi
  local running total
  running=$(running_count)
  total=$(daemons | wc -l)
  if ((running == total)); then
    echo "slurm_local: the cluster in $dir is already running (SLURM_CONF=$conf)"
    wait_nodes_up 20 || die "the daemons run but the nodes are not up; see $dir/log"
    return 0
  fi
  ((running == 0)) || die "$running of its $total daemons run: run 'scripts/slurm_local.sh stop' first"
  local p
  for p in $port $((port + 1)) $((port + 2)); do
    if [[ -n "$(ss -ltnH "sport = :$p" 2>/dev/null)" ]]; then
      die "port $p is in use ($(ss -ltnpH "sport = :$p" | awk '{print $NF}' | head -1)); choose other ports with GRIDNN_SLURM_PORT=BASE (BASE to BASE+2)"
    fi
  done

  rm -rf "$dir/state" "$dir/run"
  mkdir -p "$dir/state/slurmctld" "$dir/run" "$dir/log" "$dir/munge"
  chmod 755 "$dir"
  # munged refuses keys and sockets in folders others can write; it runs as its own user.
  chown munge:munge "$dir/munge"
  chmod 755 "$dir/munge"
  if [[ ! -s "$dir/munge/munge.key" ]]; then
    mungekey --create --keyfile "$dir/munge/munge.key" >/dev/null
  fi
  chown munge:munge "$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
  write_conf "$cpus" "$gpus"

  runuser -u munge -- munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" ||
    die "munged did not start; see $dir/munge/munged.log"
  # -c: a fresh start, without the jobs of an earlier one.
  slurmctld -c -f "$conf" || die "slurmctld did not start; see $dir/log/slurmctld.log"
  local n
  for n in "${nodes[@]}"; do
    slurmd -f "$conf" -N "$n" || die "slurmd -N $n did not start; see $dir/log/slurmd-$n.log"
  done
  wait_nodes_up 30 || die "the nodes did not come up in 30 s; see $dir/log"
  echo "slurm_local: started nodes ${nodes[*]} ($cpus CPUs, $gpus stand-in GPUs each) in $dir; clients: export SLURM_CONF=$conf"
  SLURM_CONF=$conf sinfo -N
}

stop() {
  if [[ -f "$conf" ]] && live_pid "$dir/run/slurmctld.pid" "$conf" >/dev/null; then
    # Jobs first: their tasks run under slurmstepd, which outlives slurmd.
    SLURM_CONF=$conf scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    local i
    for ((i = 0; i < 40; i++)); do
      [[ -z "$(SLURM_CONF=$conf squeue -h -t running,completing 2>/dev/null)" ]] && break
      sleep 0.25
    done
  fi
  local name pidfile marker pid stopped=0
  # The daemons in reverse order: the nodes, the controller, munge last.
  while read -r name pidfile marker; do
    pid=$(live_pid "$pidfile" "$marker") || continue
    kill -TERM "$pid"
    local i
    for ((i = 0; i < 40; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    rm -f "$pidfile"
    stopped=$((stopped + 1))
  done < <(daemons | tac)
  echo "slurm_local: stopped $stopped daemons of $dir"
}

status() {
  local name pidfile marker pid
  while read -r name pidfile marker; do
    pid=$(live_pid "$pidfile" "$marker") || pid="not running"
    echo "$name: $pid"
  done < <(daemons)
  [[ $(running_count) -gt 1 ]] || return 1
  SLURM_CONF=$conf sinfo -N
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) status ;;
  conf) echo "$conf" ;;
  *) usage ;;
esac
