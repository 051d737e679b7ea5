#!/usr/bin/env bash
# Downloads (here, on Debian 12 bookworm) the Debian packages that the remote GPU machine lacks
# for building the speclab binary and its Catch2 tests, into .devdeps/ (git-ignored). The device
# tool carries .devdeps/ to that machine, where scripts/device/build.sh unpacks them with
# `dpkg -x` into a private prefix (never into /). Usage: scripts/device/fetch_debs.sh
#
# Two tiers:
#   .devdeps/*.deb           what the build needs: headers, CMake configs, .so links and the
#                            libraries speclab links directly (HDF5, yaml-cpp, Boost.Program_options,
#                            nlohmann-json, Catch2 v2, zlib headers) and libhdf5's small deps.
#   .devdeps/fallback/*.deb  runtime libraries that libhdf5_serial.so.103 needs (libcurl.so.4,
#                            libcrypto.so.3) and their closure. build.sh puts one on the library
#                            path only where the machine has no library of that soname.
# Idempotent: a package whose candidate version is already here is not downloaded again; stale
# versions are removed. Writes .devdeps/SHA256SUMS (build.sh checks it) and prints the total size.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.devdeps

CORE=(
  libboost1.74-dev                   # Boost headers + BoostConfig (needed by program_options' config)
  libboost-program-options1.74-dev   # libboost_program_options.so + its CMake config
  libboost-program-options1.74.0     # libboost_program_options.so.1.74.0
  libyaml-cpp-dev libyaml-cpp0.7
  libhdf5-dev                        # headers, hdf5/serial/libhdf5{,_cpp}.so links
  libhdf5-103-1 libhdf5-cpp-103-1    # libhdf5_serial.so.103, libhdf5_serial_cpp.so.103
  libsz2 libaec0                     # libsz.so.2 (libhdf5's szip), libaec.so.0 (libsz's)
  nlohmann-json3-dev
  catch2                             # v2 (2.13): single header + CMake config + Catch.cmake
  zlib1g-dev                         # tests/CMakeLists.txt: find_package(ZLIB) for test_fuzz_regressions
)
# libcurl4's and libssl3's dependency closure in bookworm, less libc6/libgcc-s1/gcc-12-base
# (always present). zlib1g is here so that zlib1g-dev's libz.so link resolves inside the prefix.
FALLBACK=(
  libcurl4 libssl3 zlib1g
  libbrotli1 libcom-err2 libdb5.3 libffi8 libgmp10 libgnutls30 libgssapi-krb5-2 libhogweed6
  libidn2-0 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 libnettle8
  libnghttp2-14 libp11-kit0 libpsl5 librtmp1 libsasl2-2 libsasl2-modules-db libssh2-1
  libtasn1-6 libunistring2 libzstd1
)

if ! command -v apt-get >/dev/null || ! grep -q bookworm /etc/os-release 2>/dev/null; then
  echo "fetch_debs: error: run this on Debian 12 (bookworm) with apt-get; build.sh expects bookworm binaries" >&2
  exit 2
fi

# fetch <dir> <package...>: download each package's candidate version into <dir>.
fetch() {
  local dir=$1; shift
  mkdir -p "$dir"
  local p ver fver
  for p in "$@"; do
    ver=$(apt-cache show --no-all-versions "$p" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
    if [ -z "$ver" ]; then
      echo "fetch_debs: error: apt knows no package '$p' (run apt-get update?)" >&2
      exit 2
    fi
    fver=${ver//:/%3a}   # apt-get download writes an epoch 1:x as 1%3ax
    if compgen -G "$dir/${p}_${fver}_*.deb" >/dev/null; then
      continue
    fi
    rm -f "$dir/${p}"_*.deb
    echo "fetch_debs: downloading $p $ver"
    # apt's _apt user cannot write here; the download still checks the archive's hashes.
    (cd "$dir" && { apt-get download -q "$p" 2>&1 | grep -v "unsandboxed as root" || true; })
    if ! compgen -G "$dir/${p}_${fver}_*.deb" >/dev/null; then
      echo "fetch_debs: error: download of $p $ver failed" >&2
      exit 2
    fi
  done
}

fetch "$DEST" "${CORE[@]}"
fetch "$DEST/fallback" "${FALLBACK[@]}"

# Drop debs of packages no longer listed (e.g. after editing the lists above).
keep=" ${CORE[*]} "
for f in "$DEST"/*.deb; do
  p=$(basename "$f"); p=${p%%_*}
  [[ "$keep" == *" $p "* ]] || { echo "fetch_debs: removing unlisted $f"; rm -f "$f"; }
done
keep=" ${FALLBACK[*]} "
for f in "$DEST"/fallback/*.deb; do
  p=$(basename "$f"); p=${p%%_*}
  [[ "$keep" == *" $p "* ]] || { echo "fetch_debs: removing unlisted $f"; rm -f "$f"; }
done

(cd "$DEST" && sha256sum ./*.deb fallback/*.deb > SHA256SUMS)

core_kb=$(du -ck "$DEST"/*.deb | tail -1 | cut -f1)
fb_kb=$(du -ck "$DEST"/fallback/*.deb | tail -1 | cut -f1)
total_b=$(du -sb "$DEST" | cut -f1)
echo "fetch_debs: ${#CORE[@]} core packages ($((core_kb / 1024)) MiB), ${#FALLBACK[@]} fallback packages ($((fb_kb / 1024)) MiB)"
echo "fetch_debs: carried size of $DEST: $total_b bytes ($((total_b / 1048576)) MiB)"
