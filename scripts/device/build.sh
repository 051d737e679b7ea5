#!/usr/bin/env bash
# Builds SpecLab on the remote GPU machine (Ubuntu-like, pip torch, CUDA toolkit, no internet),
# using the Debian bookworm packages that scripts/device/fetch_debs.sh put in .devdeps/ (carry
# .devdeps with the device tool). Run from anywhere; it works in the repository root:
#   scripts/device/build.sh [targets...]        (default target: speclab)
# Steps: a probe of the toolchain and GPU; `dpkg -x` of .devdeps/*.deb into $DEVROOT (default
# /tmp/devroot, skipped when already done for the same .devdeps); a runtime library folder
# $DEVROOT/runtime-lib (the libraries of the core packages, plus each fallback library whose
# soname the machine lacks); CMake + Ninja configure of $BUILD_DIR (default build-cuda) with
# CUDA on for sm_90; the build; `ldd` of the speclab binary.
# Writes $BUILD_DIR/env.sh: `source` it before running speclab or ctest (LD_LIBRARY_PATH).
#
# Environment (all optional):
#   DEVROOT=/tmp/devroot  BUILD_DIR=build-cuda  JOBS=16  PYTHON=<python with torch>
#   SPECLAB_CUDA=ON  CUDA_ARCHS=90  BUILD_TYPE=Release
#   TORCH_CMAKE_PREFIX=<dir>   instead of asking $PYTHON for torch.utils.cmake_prefix_path
#   CONFIGURE_ONLY=1           stop after the CMake configure
#   EXTRA_CMAKE_ARGS="..."     appended to the configure command (split on spaces)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DEVROOT=${DEVROOT:-/tmp/devroot}
BUILD_DIR=${BUILD_DIR:-build-cuda}
JOBS=${JOBS:-16}
SPECLAB_CUDA=${SPECLAB_CUDA:-ON}
CUDA_ARCHS=${CUDA_ARCHS:-90}
BUILD_TYPE=${BUILD_TYPE:-Release}
ARCH=x86_64-linux-gnu
DEBS=$ROOT/.devdeps
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(speclab)

die() { echo "build.sh: ERROR: $*" >&2; exit 1; }
say() { echo "build.sh: $*"; }

# ---- probe -------------------------------------------------------------------------------------
if [ -z "${PYTHON:-}" ]; then
  if [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3; else PYTHON=python3; fi
fi
NVCC=${NVCC:-}
if [ -z "$NVCC" ]; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; else NVCC=$(command -v nvcc || true); fi
fi
echo "==== probe"
# shellcheck disable=SC1091
echo "-- uname: $(uname -srm); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
echo "-- nvidia-smi -L:"; nvidia-smi -L 2>&1 || echo "   (nvidia-smi failed or absent)"
echo "-- nvcc: ${NVCC:-absent}"
if [ -n "$NVCC" ]; then
  "$NVCC" --version | tail -2
  # torch's CMake config (Caffe2/public/cuda.cmake) links these toolkit libraries by target name.
  cuda_lib=$(cd "$(dirname "$NVCC")/.." && pwd)/lib64
  have=(); lack=()
  for l in libcudart libcublas libcublasLt libnvrtc libcufft libcurand libcusparse libcusolver stubs/libcuda; do
    if compgen -G "$cuda_lib/$l.so*" >/dev/null; then have+=("$l"); else lack+=("$l"); fi
  done
  echo "-- CUDA libs in $cuda_lib: ${have[*]:-none}${lack[*]:+; MISSING: ${lack[*]}}"
fi
echo "-- g++: $(g++ --version 2>/dev/null | head -1 || echo absent)"
echo "-- cmake: $(cmake --version 2>/dev/null | head -1 || echo absent)"
echo "-- ninja: $(ninja --version 2>/dev/null || echo absent)  ccache: $(command -v ccache || echo absent)"
echo "-- python: $PYTHON"
"$PYTHON" - <<'EOF' || echo "   (python/torch probe failed)"
import torch
print(f"   torch {torch.__version__} cuda {torch.version.cuda} cxx11abi {torch._C._GLIBCXX_USE_CXX11_ABI}"
      f" cuda.is_available() {torch.cuda.is_available()}")
if torch.cuda.is_available():
    print(f"   device 0: {torch.cuda.get_device_name(0)} sm_{''.join(map(str, torch.cuda.get_device_capability(0)))}")
EOF
echo "===="

command -v cmake >/dev/null || die "cmake not found"
command -v g++ >/dev/null || die "g++ not found"
if [ "$SPECLAB_CUDA" = ON ] && [ -z "$NVCC" ]; then
  die "SPECLAB_CUDA=ON but no nvcc (looked at /usr/local/cuda/bin/nvcc and PATH); set NVCC= or SPECLAB_CUDA=OFF"
fi
if [ -z "${TORCH_CMAKE_PREFIX:-}" ]; then
  TORCH_CMAKE_PREFIX=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    die "$PYTHON cannot import torch; set PYTHON= to a python with torch, or TORCH_CMAKE_PREFIX="
fi
[ -d "$TORCH_CMAKE_PREFIX" ] || die "torch CMake prefix $TORCH_CMAKE_PREFIX is not a directory"

# ---- unpack the debs ---------------------------------------------------------------------------
[ -f "$DEBS/SHA256SUMS" ] || die "$DEBS/SHA256SUMS missing: run scripts/device/fetch_debs.sh here and carry .devdeps"
stamp=$(sha256sum "$DEBS/SHA256SUMS" | cut -d' ' -f1)

# extract <deb> <dir>: dpkg-deb where there is one, else ar + tar.
extract() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    local member
    member=$(ar t "$1" | grep '^data\.tar') || die "$1: no data.tar member"
    case $member in
      *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
      *.zst) ar p "$1" "$member" | tar --zstd -x -C "$2" ;;
      *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
      *) ar p "$1" "$member" | tar -x -C "$2" ;;
    esac
  fi
}

# list <deb>: the paths in the deb's data, as ./usr/...
list() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -c "$1" | awk '{print $6}'
  else
    local member
    member=$(ar t "$1" | grep '^data\.tar') || die "$1: no data.tar member"
    case $member in
      *.xz) ar p "$1" "$member" | tar -tJ ;;
      *.zst) ar p "$1" "$member" | tar --zstd -t ;;
      *.gz) ar p "$1" "$member" | tar -tz ;;
      *) ar p "$1" "$member" | tar -t ;;
    esac
  fi
}

if [ "$(cat "$DEVROOT/.unpacked" 2>/dev/null)" = "$stamp" ]; then
  say "$DEVROOT already holds this .devdeps (stamp $stamp)"
else
  say "checking .devdeps checksums"
  (cd "$DEBS" && sha256sum --quiet -c SHA256SUMS) || die ".devdeps checksums do not match SHA256SUMS (incomplete carry?)"
  rm -rf "$DEVROOT"
  mkdir -p "$DEVROOT/runtime-lib"
  n=0
  for deb in "$DEBS"/*.deb "$DEBS"/fallback/*.deb; do
    extract "$deb" "$DEVROOT" || die "cannot unpack $deb"
    n=$((n + 1))
  done
  # The debs' absolute symlinks (e.g. usr/lib/.../libz.so -> /lib/.../libz.so.1.2.13) would point
  # at the machine's own files: point them into $DEVROOT.
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [ -e "$DEVROOT$target" ]; then ln -sfn "$DEVROOT$target" "$link"
    else say "warning: $link -> $target has no counterpart in $DEVROOT"; fi
  done < <(find "$DEVROOT" -type l -lname '/*')
  # The core packages' shared libraries (libhdf5_serial*, yaml-cpp, boost_program_options, libsz,
  # libaec) always come from $DEVROOT: their headers are the ones the build compiles against.
  for deb in "$DEBS"/*.deb; do
    while IFS= read -r f; do
      ln -sfn "$DEVROOT/${f#./}" "$DEVROOT/runtime-lib/$(basename "$f")"
    done < <(list "$deb" | grep -E '/lib/[^ ]*\.so\.[0-9][^/]*$' || true)
  done
  echo "$stamp" > "$DEVROOT/.unpacked"
  say "unpacked $n debs into $DEVROOT"
fi
[ -n "$(ls -A "$DEVROOT/runtime-lib")" ] || die "$DEVROOT/runtime-lib is empty (dpkg-deb missing? rm -rf $DEVROOT and retry)"

# Fallback libraries: link in only those sonames that neither runtime-lib nor the machine has,
# repeating until the closure is complete (libcurl.so.4 brings its own needs).
export LD_LIBRARY_PATH="$DEVROOT/runtime-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unresolved() { for f in "$DEVROOT"/runtime-lib/*; do ldd "$f" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u; }
for _ in 1 2 3 4 5 6 7 8; do
  missing=$(unresolved)
  [ -n "$missing" ] || break
  added=0
  for so in $missing; do
    cand=$(find "$DEVROOT/lib/$ARCH" "$DEVROOT/usr/lib/$ARCH" -maxdepth 1 -name "$so" 2>/dev/null | head -1)
    if [ -n "$cand" ]; then
      ln -sfn "$cand" "$DEVROOT/runtime-lib/$so"; added=1
      say "fallback: the machine lacks $so; using bookworm's"
    fi
  done
  [ $added = 1 ] || break
done
missing=$(unresolved)
[ -z "$missing" ] || die "shared libraries still missing for the unpacked packages: ${missing//$'\n'/ } — add their Debian packages to FALLBACK in scripts/device/fetch_debs.sh"
rl=("$DEVROOT"/runtime-lib/*)
say "runtime-lib: ${#rl[@]} entries"

mkdir -p "$BUILD_DIR"
cat > "$BUILD_DIR/env.sh" <<EOF
# Generated by scripts/device/build.sh: source before running speclab or ctest from this build.
case ":\${LD_LIBRARY_PATH:-}:" in *":$DEVROOT/runtime-lib:"*) ;; *) export LD_LIBRARY_PATH="$DEVROOT/runtime-lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" ;; esac
EOF
say "runtime libraries: export LD_LIBRARY_PATH=$DEVROOT/runtime-lib:\$LD_LIBRARY_PATH   (or: source $BUILD_DIR/env.sh)"

# ---- configure ---------------------------------------------------------------------------------
U=$DEVROOT/usr
L=$U/lib/$ARCH
for f in "$L/cmake/yaml-cpp/yaml-cpp-config.cmake" "$L/cmake/Boost-1.74.0/BoostConfig.cmake" \
         "$U/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake" "$U/lib/cmake/Catch2/Catch2Config.cmake" \
         "$U/include/hdf5/serial/H5Cpp.h" "$L/hdf5/serial/libhdf5.so" "$L/hdf5/serial/libhdf5_cpp.so"; do
  [ -e "$f" ] || die "$f missing after unpacking .devdeps"
done
GEN=Ninja
command -v ninja >/dev/null || { GEN="Unix Makefiles"; say "warning: no ninja; using make"; }
if [ -f "$BUILD_DIR/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=$GEN\$" "$BUILD_DIR/CMakeCache.txt"; then
  die "$BUILD_DIR was configured with another generator; remove it first"
fi

args=(
  -S "$ROOT" -B "$BUILD_DIR" -G "$GEN"
  -DCMAKE_BUILD_TYPE="$BUILD_TYPE"
  -DCMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX;$U;$L/cmake"
  # Each package's config from $DEVROOT, never from the machine (all are relocatable).
  -Dyaml-cpp_DIR:PATH="$L/cmake/yaml-cpp"
  -DBoost_DIR:PATH="$L/cmake/Boost-1.74.0"
  -DBoost_NO_SYSTEM_PATHS=ON
  -Dnlohmann_json_DIR:PATH="$U/share/cmake/nlohmann_json"
  -DCatch2_DIR:PATH="$U/lib/cmake/Catch2"
  -DZLIB_ROOT:PATH="$U"
  # HDF5: Debian ships no hdf5-config.cmake, and its h5cc/h5c++ wrappers print /usr paths (and
  # -lcurl -lcrypto, which would need more -dev packages): make FindHDF5 skip the wrappers (the
  # "wrapper is unable to compile" status line is expected) and give it the serial flavour.
  -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON
  -DHDF5_C_COMPILER_EXECUTABLE=/bin/false
  -DHDF5_CXX_COMPILER_EXECUTABLE=/bin/false
  -DHDF5_C_INCLUDE_DIR="$U/include/hdf5/serial"
  -DHDF5_CXX_INCLUDE_DIR="$U/include/hdf5/serial"
  -DHDF5_hdf5_LIBRARY_RELEASE="$L/hdf5/serial/libhdf5.so"
  -DHDF5_hdf5_cpp_LIBRARY_RELEASE="$L/hdf5/serial/libhdf5_cpp.so"
  -DSPECLAB_CUDA="$SPECLAB_CUDA"
)
if [ "$SPECLAB_CUDA" = ON ]; then
  CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
  args+=(-DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DCUDAToolkit_ROOT:PATH="$CUDA_HOME")
  # CMake otherwise appends its implicit -lcudart_static to every link that has CUDA objects,
  # beside the shared CUDA::cudart that speclab_cuda links: one (shared) runtime, as torch's.
  args+=(-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared)
  # torch's Caffe2/public/cuda.cmake looks for NVTX3 only in its own source tree; without it, it
  # falls back to CUDA::nvToolsExt, which CUDA >= 12.9 no longer has. Point it at the toolkit's.
  [ -d "$CUDA_HOME/include/nvtx3" ] && args+=(-Dnvtx3_dir="$CUDA_HOME/include")
  # Stops torch's config from probing the visible GPUs to choose its (unused here) arch flags.
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$(echo "$CUDA_ARCHS" | sed -E 's/([0-9])([0-9a-z]*)/\1.\2/g')}
fi
# shellcheck disable=SC2206
[ -n "${EXTRA_CMAKE_ARGS:-}" ] && args+=(${EXTRA_CMAKE_ARGS})

echo "==== cmake configure"
printf '  %q\n' "${args[@]}"
cmake "${args[@]}" || die "CMake configure failed (see above; $BUILD_DIR/CMakeFiles/CMakeConfigureLog.yaml or CMakeError.log)"
echo "==== resolved packages"
grep -E '^(Torch_DIR|yaml-cpp_DIR|Boost_DIR|boost_program_options_DIR|nlohmann_json_DIR|Catch2_DIR|HDF5_(C|CXX)_INCLUDE_DIR|HDF5_hdf5(_cpp)?_LIBRARY_RELEASE|ZLIB_LIBRARY_RELEASE|ZLIB_INCLUDE_DIR|CUDAToolkit_(BIN_DIR|ROOT)|CMAKE_CUDA_COMPILER)[:=]' \
  "$BUILD_DIR/CMakeCache.txt" | sed 's/^/  /'
if [ "${CONFIGURE_ONLY:-0}" = 1 ]; then say "CONFIGURE_ONLY=1: stopping after configure"; exit 0; fi

# ---- build -------------------------------------------------------------------------------------
echo "==== build: ${TARGETS[*]} (-j$JOBS)"
start=$(date +%s)
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${TARGETS[@]}" || die "build of ${TARGETS[*]} failed (see above)"
say "built ${TARGETS[*]} in $(( $(date +%s) - start )) s"

if [ -x "$BUILD_DIR/speclab" ]; then
  echo "==== ldd $BUILD_DIR/speclab | grep 'not found'   (LD_LIBRARY_PATH includes $DEVROOT/runtime-lib)"
  nf=$(ldd "$BUILD_DIR/speclab" | grep 'not found' || true)
  if [ -n "$nf" ]; then echo "$nf"; die "speclab has unresolved shared libraries"; fi
  echo "  (none)"
  ldd "$BUILD_DIR/speclab" | grep -E "$DEVROOT|libtorch|libc10|cudart" | sed 's/^/  /' || true
fi
say "done. Next: source $BUILD_DIR/env.sh; $BUILD_DIR/speclab --help"
