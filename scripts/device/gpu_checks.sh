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
# SKIP_BUILD=1 reuses build-cuda/ (a warm machine); STEPS="kernels bench variants device eager check
# stories" picks steps (default: all but variants and eager), which run in that order. At most 7 files go to $OUT (the device tool returns 8).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
export SPECLAB_SHARED_DIR=${SPECLAB_SHARED_DIR:-$PWD/.devdata}
# On this machine a CUDA case that finds no device fails instead of skipping (tests/support/required_resources.h).
export SPECLAB_REQUIRE_CUDA=1
STEPS=${STEPS:-"kernels bench device check stories"}
B=build-cuda
t0=$(date +%s)
step() { echo "==== $1 (t=$(($(date +%s) - t0)) s)"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  step build
  if ! scripts/device/build.sh speclab test_device test_cuda_attention test_cuda_verify test_cuda_skinny_gemm >"$OUT/build.log" 2>&1; then
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

# run_tests <program>...: each test program under a 200 s limit; its output is appended to tests.log.
# test_device leaves out the one case that loads SmolLM2's GGUF: the 76 MB file does not fit the
# 64 MiB that travels to the lent machine (that case runs in `make test` on the CPU machines).
run_tests() {
  for t in "$@"; do
    args=()
    [ "$t" = test_device ] && args=("~a draft_model drafter is loaded as its target*")
    timeout 200 $B/tests/$t "${args[@]}" >/tmp/$t.log 2>&1
    echo "$t rc=$?: $(grep -E 'test cases|passed|failed' /tmp/$t.log | tail -1)"
    grep -B2 -A12 "FAILED" /tmp/$t.log | head -40
    { echo "==== $t"; cat /tmp/$t.log; } >>"$OUT/tests.log"
  done
}
: >"$OUT/tests.log"
if has kernels; then
  step "kernel tests"
  run_tests test_cuda_skinny_gemm test_cuda_attention test_cuda_verify
fi
if has bench; then
  step "cuBLAS on the 7B shapes (PyTorch)"
  timeout 60 python3 scripts/device/gemm_probe.py 2>&1 | tail -10
  step "bench: the same shapes, matmuls through cuBLAS (SPECLAB_CUDA_SKINNY=0): the baseline"
  SPECLAB_CUDA_SKINNY=0 timeout 200 $B/speclab bench --model random:llama-7b --device cuda --dtype bfloat16 \
    --draft-model random:llama-1b --contexts 64 512 2048 --verify-context 512 >"$OUT/bench_7b_cublas.txt" 2>&1
  echo "rc=$?"
  grep -E "^(1|5|9|17|33) +[0-9.]+ +[0-9.]+x|floor|outside|^(64|512|2048) " "$OUT/bench_7b_cublas.txt" | head -16
  step "bench: Llama-7B shapes, bf16, draft Llama-1B shapes (skinny matmul kernel)"
  timeout 200 $B/speclab bench --model random:llama-7b --device cuda --dtype bfloat16 --draft-model random:llama-1b \
    --contexts 64 512 2048 --verify-context 512 >"$OUT/bench_7b.txt" 2>&1
  echo "rc=$?"
  sed -n '/^verification batch/,$p' "$OUT/bench_7b.txt" | head -40
  grep -E "^context|^[0-9]+ +[0-9.]+ +" "$OUT/bench_7b.txt" | head -6
fi
if has variants; then
  # Each launch shape of the skinny matmul (SPECLAB_CUDA_SKINNY_VARIANT, framework/cuda/skinny_gemm.cu):
  # its kernel test, the model tests (greedy speculative = AR), and the 7B bench lines.
  : >"$OUT/variants.txt"
  for v in ${VARIANTS:-0 1 2 3 4}; do
    step "skinny variant $v"
    export SPECLAB_CUDA_SKINNY_VARIANT=$v
    run_tests test_cuda_skinny_gemm test_device
    timeout 120 $B/speclab bench --model random:llama-7b --device cuda --dtype bfloat16 --draft-model random:llama-1b \
      --contexts 64 512 2048 --verify-context 512 >/tmp/bench_v$v.txt 2>&1
    echo "bench rc=$?"
    { echo "==== variant $v"; cat /tmp/bench_v$v.txt; } >>"$OUT/variants.txt"
    grep -E "^decode|^verification of|outside model|^prefill" /tmp/bench_v$v.txt
    unset SPECLAB_CUDA_SKINNY_VARIANT
  done
fi
if has device; then
  step "model tests on the device (batch invariance, greedy speculative = AR)"
  run_tests test_device
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
