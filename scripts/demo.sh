#!/usr/bin/env bash
# The default demo on the default real model (SmolLM2-135M-Instruct, GGUF Q4_1 from PyPI).
# Usage: scripts/demo.sh path/to/speclab
set -euo pipefail
SPECLAB=${1:-build/speclab}
cd "$(dirname "$0")/.."
if [ -f configs/demo.yaml ] && "$SPECLAB" --help 2>/dev/null | grep -q "^  run "; then
  mkdir -p results  # output.path of configs/demo.yaml; speclab run does not create directories
  exec "$SPECLAB" run configs/demo.yaml --overwrite
fi
# Runtime-only demo (until the experiment runner lands): greedy chat generation, then the bench.
prompts=("What is the capital of France? Answer in one sentence."
         "Write a Python function that reverses a string."
         "List three colors.")
for p in "${prompts[@]}"; do
  echo "=== prompt: $p"
  "$SPECLAB" generate --model smollm2-135m-instruct --prompt "$p" --max-new-tokens 64 --verbose
done
"$SPECLAB" bench --model smollm2-135m-instruct --contexts 64 256 1024
