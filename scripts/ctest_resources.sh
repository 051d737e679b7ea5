#!/usr/bin/env bash
# ctest_resources.sh FILE N: writes a CTest resource spec of N CPUs, one slot each, to FILE.
#
# Every test asks for one (RESOURCE_GROUPS cpus:1, tests/CMakeLists.txt), so `ctest -jN
# --resource-spec-file FILE` runs at most N at a time and gives each its own CPU id, to which the
# test process binds itself (tests/support/ctest_cpu_slot.h). Without the spec, CTest ignores
# RESOURCE_GROUPS and the tests run on every CPU.
set -euo pipefail
file=${1:?usage: ctest_resources.sh FILE N}
n=${2:?usage: ctest_resources.sh FILE N}
case "$n" in '' | *[!0-9]* | 0) echo "ctest_resources.sh: expected N >= 1, found '$n'" >&2; exit 2 ;; esac
slots=""
for ((i = 0; i < n; i++)); do slots+="${slots:+,}{\"id\":\"$i\",\"slots\":1}"; done
printf '{"version":{"major":1,"minor":0},"local":[{"cpus":[%s]}]}\n' "$slots" > "$file"
