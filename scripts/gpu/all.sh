#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs several areas' GPU scripts on the GPU host over one shared build, so
# the library is compiled once. Usage: scripts/gpu/all.sh [area...]
# (default: p2p topology shim proxy bench engine). The build lives in
# build-gpu/ in the repo (ignored, so a warm machine keeps it between calls).
# Every area writes under one folder, which comes back packed as
# $OUT/results.tar.gz (the device tool returns at most 8 files), with each
# area's summary printed last.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
FINAL_OUT=${OUT:-/tmp/gpu-all-out}
WORK=/tmp/gpu-all
AREAS=("$@")
[ ${#AREAS[@]} -gt 0 ] || AREAS=(p2p topology shim proxy bench engine)
B=$SRC/build-gpu
export P2P_BUILD_DIR=$B SHIM_BUILD_DIR=$B BENCH_BUILD_DIR=$B TOPOLOGY_BUILD_DIR=$B ENGINE_BUILD_DIR=$B BUILD=$B
mkdir -p "$WORK" "$FINAL_OUT"

echo "== build $(date -u +%H:%M:%S)"
. "$SRC/scripts/gpu/configure.sh"
# -k 0: an area whose targets built still runs when another's did not.
if ! { gpu_configure "$B" && ninja -k 0 -C "$B"; } > "$WORK/build.log" 2>&1; then
  grep -E "error|FAILED" "$WORK/build.log" | head -30
  tail -20 "$WORK/build.log"
fi
echo "== built $(date -u +%H:%M:%S)"
nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -5

for area in "${AREAS[@]}"; do
  echo "== $area $(date -u +%H:%M:%S)"
  mkdir -p "$WORK/$area"
  # AREA_TIMEOUT_<area> (seconds) keeps a call within the device's limit.
  limit_var=AREA_TIMEOUT_$area
  OUT=$WORK/$area timeout "${!limit_var:-420}" bash "$SRC/scripts/gpu/$area.sh" > "$WORK/$area/summary.txt" 2>&1
  echo "exit $?" >> "$WORK/$area/summary.txt"
done

tar czf "$FINAL_OUT/results.tar.gz" -C "$WORK" . 2>/dev/null
for png in "$WORK"/*/*.png; do [ -f "$png" ] && cp "$png" "$FINAL_OUT/"; done
for area in "${AREAS[@]}"; do
  echo "=================== $area"
  tail -40 "$WORK/$area/summary.txt"
done
