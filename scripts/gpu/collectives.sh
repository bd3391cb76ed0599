#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# All-gather and reduce-scatter on the GPU host: builds from source and runs
# test_p2p_collectives (p2p and proxy over shm and cuda wires: every type and
# op, in place, graphs, different calls), and the all-reduce's tests whose
# kernels changed with them (test_p2p_api, test_p2p_local, test_wire_proxy_gpu),
# the device API's all-gather (test_device_api) and the shim's routing of
# ncclAllGather / ncclReduceScatter (test_shim_gpu: two GPUs only),
# with two ranks on two GPUs where there are two, else both on one GPU
# (ROCENANTE_TEST_SHARE_GPUS=1, no NCCL: correctness only); then, on two
# GPUs only (NCCL takes one rank per GPU), bench/collectives_sweep against
# NCCL into $OUT/collectives_sweep.txt. Writes $OUT/collectives.log and
# prints a summary last.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" collectives "${COLLECTIVES_BUILD_DIR:-/tmp/build}"

gpu_build "-DROCENANTE_BUILD_BENCH=ON -DROCENANTE_BUILD_EXAMPLES=OFF" test_p2p_collectives test_p2p_api test_p2p_local test_wire_proxy_gpu test_device_api test_shim_gpu rocenante \
  collectives_sweep
say "built $(date -u +%H:%M:%S)"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
share=0
[ "$gpus" -lt 2 ] && share=1
for t in test_p2p_collectives test_p2p_api test_p2p_local test_wire_proxy_gpu test_device_api test_shim_gpu; do
  for pdl in 0 1; do
    say "$t PDL=$pdl share=$share $(date -u +%H:%M:%S)"
    (cd "$BUILD" && ROCENANTE_TEST_SHARE_GPUS=$share ROCENANTE_PDL=$pdl timeout 280 ctest -R "^$t\$" -V) \
      > "$OUT/ctest.tmp" 2>&1
    rc=$?
    cat "$OUT/ctest.tmp" >> "$LOG"
    if grep -q "Skipped\|Not Run" "$OUT/ctest.tmp"; then result "$t PDL=$pdl" "SKIPPED"
    elif [ $rc -eq 0 ]; then result "$t PDL=$pdl" "passed"
    else result "$t PDL=$pdl" "FAILED (rc $rc)"; grep -E "rank [0-9]+:|FAILED|with expansion" "$OUT/ctest.tmp" | head -8; fi
  done
done
if [ "$gpus" -ge 2 ]; then
  say "collectives_sweep $(date -u +%H:%M:%S)"
  if timeout 240 "$BUILD/bench/collectives_sweep" --gpus 2 --max-bytes 1M > "$OUT/collectives_sweep.txt" 2>&1; then
    result collectives_sweep "ok (table below)"
  else
    result collectives_sweep "FAILED"
  fi
  cat "$OUT/collectives_sweep.txt" | tee -a "$LOG" | grep -v VERSION
else
  result collectives_sweep "SKIPPED (needs 2 GPUs: NCCL takes one rank per GPU)"
fi
printf '%s\n' "${SUMMARY[@]}"
