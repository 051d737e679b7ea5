#!/usr/bin/env bash
# Stops the cluster of scripts/slurm/start_cluster.sh: slurmd, slurmctld and munged, by the pids
# recorded in the state directory (nothing else), then removes the directory.
#
#   scripts/slurm/stop_cluster.sh [STATE_DIR]      (default $SPECLAB_SLURM_DIR or /tmp/speclab_slurm)
set -uo pipefail

DIR=$(realpath -m "${1:-${SPECLAB_SLURM_DIR:-/tmp/speclab_slurm}}")
[[ -d $DIR ]] || { echo "stop_cluster: no cluster state in $DIR" >&2; exit 0; }
if [[ -f $DIR/slurm.conf ]]; then
  SLURM_CONF=$DIR/slurm.conf scancel --quiet --user=root 2>/dev/null || true
fi
for daemon in slurmd slurmctld munged; do
  pidfile=$DIR/$daemon.pid
  [[ -f $pidfile ]] || continue
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || continue
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
done
rm -rf "$DIR"
echo "stop_cluster: stopped ($DIR removed)" >&2
