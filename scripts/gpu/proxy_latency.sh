#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The proxy path's latency over shm with both ranks on one GPU
# (tests/proxy_latency_local: bf16 sum, graphs of 20 calls, median of 100
# replays, 8 KB to 256 KB), ROUNDS rounds (default 5), to compare two builds
# run the same way (the branch against main). Logs go to $OUT/proxy_latency.log;
# every round's table prints last.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" proxy_latency "${BUILD:-/tmp/rocenante-build-proxy-latency}" /tmp/rocenante-out

gpu_build "-DROCENANTE_BUILD_BENCH=OFF -DROCENANTE_BUILD_EXAMPLES=OFF" proxy_latency_local

status=0
for round in $(seq 1 "${ROUNDS:-5}"); do
  say "round $round $(date -u +%H:%M:%S)"
  timeout 300 "$BUILD/tests/proxy_latency_local" >>"$LOG" 2>&1 || status=1
done
echo "---- summary (proxy_latency) ----"
grep -v "^==" "$LOG" | tail -n 60
exit $status
