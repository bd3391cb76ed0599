#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The preamble every per-area GPU script shares. Source it first:
#   . "$(dirname "$0")/common.sh" <area> <build dir> [<default OUT>]
# It sets SRC (the repo), OUT (default /tmp/<area>-out), BUILD, and
# LOG=$OUT/<area>.log (emptied), and offers say, result/SUMMARY and gpu_build.
# The safety exports come first here too, so a sourcing script is covered even
# before its own copy of the line runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -u -o pipefail

GPU_AREA=$1
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-${3:-/tmp/$GPU_AREA-out}}
BUILD=$2
mkdir -p "$OUT"
LOG=$OUT/$GPU_AREA.log
: > "$LOG"

# A progress line, on the terminal and in the log.
say() { echo "== $*" | tee -a "$LOG"; }

# One line of the summary a script prints last: result <what> <outcome>.
SUMMARY=()
result() { SUMMARY+=("$1: $2"); say "$1: $2"; }

# gpu_build "<extra cmake options>" target...: configures $SRC in $BUILD
# (configure.sh) and builds the targets, all output into $LOG. On failure it
# prints the error lines and the log's tail and exits 1: nothing after it
# could run without the binaries.
. "$SRC/scripts/gpu/configure.sh"
gpu_build() {
  local extra=$1
  shift
  say "build $(date -u +%H:%M:%S) in $BUILD"
  # $extra unquoted on purpose: it holds several options.
  gpu_configure "$BUILD" $extra >> "$LOG" 2>&1 && ninja -C "$BUILD" "$@" >> "$LOG" 2>&1
  if [ $? -ne 0 ]; then
    say "BUILD FAILED (last lines):"
    grep -iE "error|failed" "$LOG" | grep -v "^== BUILD FAILED" | head -20
    tail -30 "$LOG"
    exit 1
  fi
}
