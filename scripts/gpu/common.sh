#!/usr/bin/env bash
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

# gpu_build "<extra cmake options>" target...: configures a Release sm_90 Ninja
# build of $SRC in $BUILD and builds the targets, all output into $LOG. On
# failure it prints the error lines and the log's tail and exits 1: nothing
# after it could run without the binaries.
# Bench and examples are named ON (their defaults) before the extra options,
# which may turn them OFF: all.sh shares one build dir between the areas, and
# an OFF left in its cache by p2p or shim would otherwise drop bench's and
# engine's targets.
# Release code with host debug info (-g changes no generated code), so that
# crash backtraces resolve to file:line; all.sh configures the same way.
RELEASE_HOST_FLAGS="-O3 -DNDEBUG -g"
gpu_build() {
  local extra=$1
  shift
  say "build $(date -u +%H:%M:%S) in $BUILD"
  # $extra unquoted on purpose: it holds several options.
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=$RELEASE_HOST_FLAGS" -DROCENANTE_BUILD_BENCH=ON -DROCENANTE_BUILD_EXAMPLES=ON $extra >> "$LOG" 2>&1 &&
    ninja -C "$BUILD" "$@" >> "$LOG" 2>&1
  if [ $? -ne 0 ]; then
    say "BUILD FAILED (last lines):"
    grep -iE "error|failed" "$LOG" | grep -v "^== BUILD FAILED" | head -20
    tail -30 "$LOG"
    exit 1
  fi
}
