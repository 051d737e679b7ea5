#!/usr/bin/env bash
# Builds and runs the CUDA kernel test on a machine with a GPU, without libtorch or CMake:
# nvcc + the Catch2 single header. Usage: scripts/gpu_check.sh [catch2-include-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
CATCH_INC=${1:-/usr/include}
OUT=${OUT:-build-gpu}
mkdir -p "$OUT"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" --version | tail -2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$NVCC" -std=c++17 -O2 -I. -I"$CATCH_INC" -o "$OUT/test_cuda_verify" \
  tests/catch_main.cpp tests/unit/test_cuda_verify.cpp framework/cuda/greedy_verify.cu framework/core/error.cpp
"$OUT/test_cuda_verify" --success --reporter compact | tail -5
