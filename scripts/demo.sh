#!/usr/bin/env bash
# The default demo (tracker issue 17): the real draft/target pair, Qwen2.5-Coder-0.5B-Instruct
# drafting for Qwen2.5-Coder-1.5B-Instruct, beside prompt lookup, against the AR baseline
# (configs/qwen_pair_demo.yaml). Prints the summary table; writes results/qwen_pair_demo.h5 and
# its report directory (plots + report.md).
# Usage: scripts/demo.sh [path/to/speclab] [config]   (make demo-smollm2 passes configs/demo.yaml)
set -euo pipefail
SPECLAB=${1:-build/speclab}
CONFIG=${2:-configs/qwen_pair_demo.yaml}
cd "$(dirname "$0")/.."
mkdir -p results  # output.path of the demo configs; speclab run does not create directories
start=$(date +%s)
"$SPECLAB" run "$CONFIG" --overwrite
echo "demo: $CONFIG in $(( $(date +%s) - start )) s"
