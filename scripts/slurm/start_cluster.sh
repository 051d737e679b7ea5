#!/usr/bin/env bash
# Starts a one-node Slurm cluster on loopback for the tests (docs/scale-out.md): munged with its
# own key, slurmctld and slurmd as root, from Debian's slurm-wlm and munge (installed with
# apt-get when missing), with a minimal slurm.conf written into the state directory.
#
#   scripts/slurm/start_cluster.sh [STATE_DIR]     (default $SPECLAB_SLURM_DIR or /tmp/speclab_slurm)
#
# Client commands then need SLURM_CONF=STATE_DIR/slurm.conf (the script prints the line).
# Ports are derived from STATE_DIR, so that two checkouts' clusters do not collide.
# Waits (at most 60 s) until `sinfo` shows the node idle. Exits 0 when the cluster is up, 1
# when it cannot start (with one line saying why, e.g. not root); stop_cluster.sh stops it.
set -euo pipefail

DIR=$(realpath -m "${1:-${SPECLAB_SLURM_DIR:-/tmp/speclab_slurm}}")
say() { echo "start_cluster: $*" >&2; }
fail() { say "$*"; exit 1; }

[[ $(id -u) == 0 ]] || fail "needs root (slurmd runs jobs as any user); not starting"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  say "installing slurm-wlm and munge with apt-get"
  # A fresh machine may have no package index yet: update once if the first try fails.
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null 2>&1; }
  install || { apt-get update -qq >/dev/null 2>&1 && install; } || fail "apt-get install slurm-wlm munge failed"
fi
if [[ -f $DIR/slurmctld.pid ]] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
  say "a cluster is already running from $DIR; stop it first (scripts/slurm/stop_cluster.sh $DIR)"
  echo "export SLURM_CONF=$DIR/slurm.conf"
  exit 0
fi

mkdir -p "$DIR"/{state,spool,log}
chmod 755 "$DIR"
NODE=$(hostname -s)
# Ports from the state directory, so that clusters of several checkouts can run side by side.
PORT=$(( 20000 + $(printf '%s' "$DIR" | cksum | cut -d' ' -f1) % 4000 * 2 ))
CPUS=$(nproc)
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))

# munge: a fresh key and a private socket.
dd if=/dev/urandom of="$DIR/munge.key" bs=1 count=1024 status=none
chmod 400 "$DIR/munge.key"
munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.socket" --pid-file="$DIR/munged.pid" \
  --log-file="$DIR/log/munged.log" --seed-file="$DIR/munged.seed" || fail "munged did not start ($DIR/log/munged.log)"

cat > "$DIR/slurm.conf" <<CONF
# Written by scripts/slurm/start_cluster.sh: one node on loopback, for tests.
ClusterName=speclab
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=600
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$DIR/slurm.conf

slurmctld -f "$SLURM_CONF" -i || fail "slurmctld did not start ($DIR/log/slurmctld.log)"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start ($DIR/log/slurmd.log)"

for _ in $(seq 1 120); do
  state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
  if [[ $state == idle ]]; then
    say "node $NODE idle ($CPUS CPUs); state in $DIR"
    echo "export SLURM_CONF=$DIR/slurm.conf"
    exit 0
  fi
  sleep 0.5
  [[ ! -f $DIR/slurmctld.pid ]] || kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null || fail "slurmctld exited ($DIR/log/slurmctld.log)"
done
fail "node $NODE not idle after 60 s (state '${state:-none}'; logs in $DIR/log)"
