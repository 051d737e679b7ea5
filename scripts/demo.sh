#!/usr/bin/env bash
# The default demo runs two experiments, each printing its summary table and writing its HDF5 file
# and report directory (plots + report.md) under results/:
#   1. the real draft/target pair (tracker issue 17): Qwen2.5-Coder-0.5B-Instruct drafting for
#      Qwen2.5-Coder-1.5B-Instruct, beside prompt lookup (configs/qwen_pair_demo.yaml);
#   2. SmolLM2-135M-Instruct with its trained EAGLE head (issue 13; the head the repository ships,
#      assets/drafts/, or the one `make draft-model` trains) beside prompt lookup and layer skip on
#      MT-bench first turns (configs/eagle_mt_bench.yaml).
# Usage: scripts/demo.sh [path/to/speclab] [config...]   (make demo-smollm2 passes configs/demo.yaml)
set -euo pipefail
SPECLAB=${1:-build/speclab}
shift || true
CONFIGS=("$@")
[ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=(configs/qwen_pair_demo.yaml configs/eagle_mt_bench.yaml)
cd "$(dirname "$0")/.."
mkdir -p results  # output.path of the demo configs (speclab run also makes it when missing)
for CONFIG in "${CONFIGS[@]}"; do
  start=$(date +%s)
  "$SPECLAB" run "$CONFIG" --overwrite
  echo "demo: $CONFIG in $(( $(date +%s) - start )) s"
done
