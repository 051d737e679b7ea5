#!/usr/bin/env bash
# Installs SpecLab's peer, llama.cpp through PyPI llama-cpp-python (pinned below), into .cache/peer,
# for `speclab bench` (scripts/llamacpp_bench.py) and experiments/pair_vs_llamacpp.py. Those find it
# there through scripts/peer.py; an llama_cpp already on PYTHONPATH comes first.
#
# pip builds llama.cpp from the sdist for this CPU: every x86 extension ggml has a switch for and
# /proc/cpuinfo lists, as GGML_NATIVE (what a user's `pip install` gets) would, except AMX. With
# GGML_NATIVE on the 2-core Intel Xeon (family 6 model 207, KVM), ggml's AMX path raised SIGILL
# (`tilezero` before the process had the tile-data permission). The install is stamped with the
# CPU's flags and rebuilt when .cache moves to another kind of machine.
#
# Runtime dependencies come without numpy: the scripts run under /usr/bin/python3 with Debian's
# numpy 1.24 (scripts/setup.sh), which h5py is built against. Does nothing when the stamp matches.
# About 5 to 10 minutes on 2 cores, once.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.3.36
DEPS=("diskcache==5.6.3" "jinja2==3.1.6" "markupsafe==3.0.3" "typing_extensions==4.12.2")
DEST=.cache/peer
PY_RUN=${SPECLAB_PYTHON:-/usr/bin/python3}
# pip itself: the first of the running Python, python3 on PATH and Debian's that has it, as
# scripts/setup.sh picks (plain `python3 -m pip` failed where python3 on PATH, a venv's, had no pip
# and /usr/bin/python3 had; until 2026-12-07). llama-cpp-python loads its library through ctypes,
# so any of them builds what PY_RUN imports.
PIP_PY=""
for cand in "$PY_RUN" python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -m pip --version >/dev/null 2>&1; then PIP_PY="$cand"; break; fi
done

flags=$(grep -m1 '^flags' /proc/cpuinfo)
on() { if echo "$flags" | grep -qw "$1"; then echo ON; else echo OFF; fi; }
GGML_ARGS="-DGGML_NATIVE=OFF -DGGML_CCACHE=OFF -DGGML_AVX=$(on avx) -DGGML_AVX2=$(on avx2) -DGGML_FMA=$(on fma)
  -DGGML_F16C=$(on f16c) -DGGML_BMI2=$(on bmi2) -DGGML_AVX_VNNI=$(on avx_vnni) -DGGML_AVX512=$(on avx512f)
  -DGGML_AVX512_VNNI=$(on avx512_vnni) -DGGML_AVX512_VBMI=$(on avx512vbmi) -DGGML_AVX512_BF16=$(on avx512_bf16)
  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
# The stamp names the CPU and the build settings: another machine or other settings rebuild.
build=$(echo "$flags $VERSION ${DEPS[*]} $GGML_ARGS" | md5sum | cut -c1-12)
stamp="$DEST/.speclab-peer-$VERSION-$build"
if [ -f "$stamp" ]; then
  echo "peer: llama-cpp-python $VERSION in $DEST"
  exit 0
fi

echo "peer: building llama-cpp-python $VERSION for this CPU into $DEST (once; several minutes)"
tmp="$DEST.partial"
rm -rf "$tmp"
mkdir -p "$(dirname "$DEST")"
log=.cache/peer-install.log
# --no-cache-dir and no ccache: neither a wheel nor objects built for another CPU may be reused.
if [ -z "$PIP_PY" ]; then
  echo "peer: error: no Python with pip among $PY_RUN, python3 and /usr/bin/python3 (make setup installs Debian's python3-pip)" >&2
  exit 2
fi
if ! CMAKE_ARGS="$(echo $GGML_ARGS) ${CMAKE_ARGS:-}" "$PIP_PY" -m pip install --no-cache-dir --target "$tmp" --no-deps \
    "llama-cpp-python==$VERSION" "${DEPS[@]}" > "$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "peer: error: pip could not build llama-cpp-python $VERSION (whole log: $log)" >&2
  exit 2
fi
got=$(PYTHONPATH="$tmp" "$PY_RUN" -c 'import llama_cpp; print(llama_cpp.__version__)' 2>&1) || {
  echo "peer: error: $PY_RUN cannot import the llama_cpp just built in $tmp: $got" >&2
  exit 2
}
if [ "$got" != "$VERSION" ]; then
  echo "peer: error: expected llama-cpp-python $VERSION in $tmp, found '$got'" >&2
  exit 2
fi
# A build that imports may still stop on an instruction the machine refuses: decode a few tokens.
gguf=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -e "$gguf" ]; then
  PYTHONPATH="$tmp" "$PY_RUN" scripts/llamacpp_bench.py --model "$gguf" --n-prompt 4 --n-decode 2 --repeats 1 \
      --threads 1 > /dev/null 2>> "$log" || {
    echo "peer: error: llama.cpp just built in $tmp failed to decode $gguf (exit status $?; log: $log)" >&2
    exit 2
  }
fi
rm -rf "$DEST"
mv "$tmp" "$DEST"
touch "$stamp"
echo "peer: llama-cpp-python $VERSION installed in $DEST"
