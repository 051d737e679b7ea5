#!/usr/bin/env bash
# The GPU checks of docs/gpu.md as one run on a CUDA machine (the lent H100/H200 box; no network
# there): build with the carried dependencies (build.sh), run the CUDA tests, `speclab bench
# --device cuda` on Llama-7B/1B shapes with random weights and on stories260K, and `speclab check
# configs/equivalence.yaml --device cuda` (greedy and analytic parts). Logs go to $OUT (default
# /tmp/gpu_checks); stdout gets the summary lines only.
#
#   scripts/device/fetch_debs.sh                 # here, once: .devdeps/
#   mkdir -p .devdata/models/stories260K && cp ../shared/models/stories260K/{stories260K.bin,tok512.bin} $_
#   device run, carry [.devdeps, .devdata]: bash scripts/device/gpu_checks.sh
#
# SKIP_BUILD=1 reuses build-cuda/ (a warm machine); STEPS="tests bench check" picks steps.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
export SPECLAB_SHARED_DIR=${SPECLAB_SHARED_DIR:-$PWD/.devdata}
STEPS=${STEPS:-"tests bench eager check stories"}
B=build-cuda
t0=$(date +%s)
step() { echo "==== $1 (t=$(($(date +%s) - t0)) s)"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  step build
  if ! scripts/device/build.sh speclab test_device test_cuda_attention test_cuda_verify >"$OUT/build.log" 2>&1; then
    grep -E "^(-- |   torch|   device|build.sh)" "$OUT/build.log" | head -30
    grep -E "error|Error" "$OUT/build.log" | head -30
    tail -25 "$OUT/build.log"
    exit 1
  fi
  grep -E "^(-- nvidia|-- nvcc|-- g\+\+|   torch|   device)" "$OUT/build.log" | head -8
fi
# shellcheck disable=SC1091
source $B/env.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null

if has tests; then
  step tests
  for t in test_cuda_attention test_cuda_verify test_device; do
    timeout 200 $B/tests/$t >"$OUT/$t.log" 2>&1
    echo "$t rc=$?: $(grep -E 'test cases|passed|failed' "$OUT/$t.log" | tail -1)"
    grep -B2 -A12 "FAILED" "$OUT/$t.log" | head -40
  done
fi
if has bench; then
  step "cuBLAS on the 7B shapes (PyTorch)"
  timeout 60 python3 scripts/device/gemm_probe.py 2>&1 | tail -10
  step "bench: Llama-7B shapes, bf16, draft Llama-1B shapes"
  timeout 200 $B/speclab bench --model random:llama-7b --device cuda --dtype bfloat16 --draft-model random:llama-1b \
    --contexts 64 512 2048 --verify-context 512 >"$OUT/bench_7b.txt" 2>&1
  echo "rc=$?"
  sed -n '/^verification batch/,$p' "$OUT/bench_7b.txt" | head -40
  grep -E "^context|^[0-9]+ +[0-9.]+ +" "$OUT/bench_7b.txt" | head -6
fi
if has eager; then
  step "bench: the same, CUDA graphs off (eager libtorch launches)"
  SPECLAB_CUDA_GRAPHS=0 timeout 120 $B/speclab bench --model random:llama-7b --device cuda --dtype bfloat16 \
    --draft-model random:llama-1b --contexts 64 --verify-context 512 --steps 8 --naive-steps 1 >"$OUT/bench_7b_eager.txt" 2>&1
  echo "rc=$?"
  grep -E "decode tok/s|share|verification of n = 5|outside" "$OUT/bench_7b_eager.txt" | head -6
fi
if has check; then
  step "speclab check configs/equivalence.yaml --device cuda (greedy + analytic)"
  timeout 180 $B/speclab check configs/equivalence.yaml --device cuda --set equivalence.sampling=false \
    --out /tmp/equivalence_cuda.h5 --overwrite --quiet >"$OUT/check.txt" 2>&1
  echo "rc=$?"
  tail -30 "$OUT/check.txt"
fi
if has stories; then
  step "bench: stories260K on cuda, float32"
  timeout 90 $B/speclab bench --model stories260K --device cuda --dtype float32 --contexts 64 256 --verify-context 128 \
    --llama-cpp off >"$OUT/bench_stories.txt" 2>&1
  echo "rc=$?"
  grep -E "^figure|decode tok/s|share|verification of" "$OUT/bench_stories.txt" | head -10
fi
step done
