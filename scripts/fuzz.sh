#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang + ASan + UBSan, no libtorch needed) and runs
# each one for FUZZ_SECONDS seconds, one after the other, on one core (-jobs=1 is libFuzzer's
# default: a single in-process fuzzing loop).
#   scripts/fuzz.sh [FUZZ_SECONDS] [harness ...]     (or: make fuzz FUZZ_SECONDS=N)
# FUZZ_RUNS=N (environment) also stops each harness after N executions (e.g. 1000000).
# Installs clang (Debian package `clang`, which brings libclang_rt.fuzzer) when it is missing.
# First replays tests/fuzz/regressions/<harness>/* (every crasher found so far), then fuzzes,
# starting from seeds written by make_seeds (tests/fuzz/make_seeds.cpp) plus the corpus kept
# from earlier runs in $FUZZ_BUILD/corpus. A crash, leak, UB report or out-of-memory writes the
# input to $FUZZ_BUILD/artifacts/<harness>/ and makes the script fail.
# Prints (and writes to $FUZZ_BUILD/fuzz_summary.txt) execs, exec/s, cov and ft per harness.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FUZZ_SECONDS=${1:-${FUZZ_SECONDS:-60}}
shift || true
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_JOBS=${FUZZ_JOBS:-2}   # build parallelism
ALL=(fuzz_gguf fuzz_safetensors fuzz_llama2c fuzz_tokenizer_bin fuzz_tokenizer_json fuzz_yaml_config)
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=("${ALL[@]}")

# ---- clang ----------------------------------------------------------------------------------
if ! command -v clang++ >/dev/null || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long){return 0;}' |
    clang++ -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "fuzz: installing clang (libFuzzer)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang >/dev/null
fi
# The harnesses link yaml-cpp, nlohmann-json and zlib (no libtorch, no HDF5).
missing=()
for p in cmake make libyaml-cpp-dev nlohmann-json3-dev zlib1g-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "fuzz: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- build ----------------------------------------------------------------------------------
if [ ! -f "$FUZZ_BUILD/CMakeCache.txt" ]; then
  cmake -S tests/fuzz -B "$FUZZ_BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
cmake --build "$FUZZ_BUILD" -j"$FUZZ_JOBS" --target make_seeds "${HARNESSES[@]}"
"$FUZZ_BUILD/make_seeds" "$ROOT" "${SPECLAB_SHARED_DIR:-$ROOT/../shared}" "$FUZZ_BUILD/corpus"

# detect_leaks: on by default with libFuzzer, kept explicit. Nothing is suppressed.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary="$FUZZ_BUILD/fuzz_summary.txt"
mkdir -p "$FUZZ_BUILD/logs"
: > "$summary.tmp"
failed=()
for h in "${HARNESSES[@]}"; do
  bin="$FUZZ_BUILD/$h"
  # 1. every known crasher must now be handled cleanly
  reg="tests/fuzz/regressions/$h"
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg")" ]; then
    if ! "$bin" -runs=0 "$reg"/* >"$FUZZ_BUILD/logs/$h.regressions.log" 2>&1; then
      echo "fuzz: $h fails on a regression input (see $FUZZ_BUILD/logs/$h.regressions.log)"
      failed+=("$h")
      continue
    fi
  fi
  # 2. fuzz
  mkdir -p "$FUZZ_BUILD/artifacts/$h" "$FUZZ_BUILD/corpus/$h"
  dict=()
  [ -f "tests/fuzz/$h.dict" ] && dict=(-dict="tests/fuzz/$h.dict")
  log="$FUZZ_BUILD/logs/$h.log"
  echo "fuzz: $h for ${FUZZ_SECONDS}s (log: $log)"
  set +e
  runs=()
  [ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
  "$bin" -max_total_time="$FUZZ_SECONDS" "${runs[@]}" -timeout=25 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 "${dict[@]}" -artifact_prefix="$FUZZ_BUILD/artifacts/$h/" \
    "$FUZZ_BUILD/corpus/$h" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
  corp=$(echo "$last" | grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' | cut -d' ' -f2 || true)
  status=ok
  if [ $rc -ne 0 ]; then status="FAILED (rc $rc; see $log and $FUZZ_BUILD/artifacts/$h/)"; failed+=("$h"); fi
  printf '%-20s execs %-10s exec/s %-7s cov %-6s ft %-7s corpus %-12s %s\n' \
    "$h" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$status" | tee -a "$summary.tmp"
done
{ echo "# $(date -u +%FT%TZ) FUZZ_SECONDS=$FUZZ_SECONDS FUZZ_RUNS=${FUZZ_RUNS:-}"; cat "$summary.tmp"; } > "$summary"
rm -f "$summary.tmp"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failures in: ${failed[*]}"
  exit 1
fi
echo "fuzz: no crashes, leaks or UB reports ($summary)"
