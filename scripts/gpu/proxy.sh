#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The proxy path on the 2x H200 host: builds from source into /tmp, runs the
# proxy-path GPU test (2 processes, shm and tcp wires, every dtype and op,
# graph replay, latency of bf16 sum in a CUDA graph) and the host-backend and
# verbs CPU tests. Logs go to $OUT/proxy.log; a short summary prints last.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" proxy "${BUILD:-/tmp/rocenante-build-proxy}" /tmp/rocenante-out

TARGETS="test_wire_proxy_gpu test_host_allreduce test_host_faults test_verbs_wire test_verbs_select"
gpu_build "-DROCENANTE_BUILD_BENCH=OFF -DROCENANTE_BUILD_EXAMPLES=OFF" $TARGETS

status=0
results=""
for t in $TARGETS; do
  say "run $t"
  start=$(date +%s)
  timeout 500 "$BUILD/tests/$t" >>"$LOG" 2>&1
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && status=1
  results+="$t: rc=$rc ($(( $(date +%s) - start )) s)"$'\n'
done

echo "---- summary (proxy) ----"
printf "%s" "$results"
grep -h "^LATENCY" "$LOG" || echo "no latency lines (test failed or skipped)"
echo "target: proxy-shm bf16 sum 48 KB <= 12 us per all-reduce in a CUDA graph"
exit $status
