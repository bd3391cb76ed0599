#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The proxy path's latency under different settings, on the 2-GPU host: the
# shm case of test_wire_proxy_gpu (every dtype and op checked first, then bf16
# sum in CUDA graphs from 8 KB to 256 KB) once per setting, then the
# all-reduce sweep with the proxy path and with the p2p path, each against
# NCCL in the same run. Expects the build in $BUILD (scripts/gpu/all.sh makes
# it). Writes $OUT/proxy_sweep.log and the sweep tables; prints a summary.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" proxy_sweep "${BUILD:-/tmp/rocenante-build-proxy}" /tmp/rocenante-out

SETTINGS=(
  "default"
  "ROCENANTE_PROXY_LL_MAX_BYTES=0"
  "ROCENANTE_PROXY_THREADS=4"
  "ROCENANTE_PROXY_THREADS=8"
  "ROCENANTE_PROXY_LL_MAX_BYTES=0 ROCENANTE_PROXY_THREADS=8"
  "default"
)
for setting in "${SETTINGS[@]}"; do
  vars=()
  [ "$setting" != default ] && read -r -a vars <<< "$setting"
  say "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  say "setting: $setting"
  env "${vars[@]}" timeout 120 "$BUILD/tests/test_wire_proxy_gpu" "proxy path over shm*" \
    > "$OUT/run.txt" 2>&1
  rc=$?
  cat "$OUT/run.txt" >> "$LOG"
  lat=$(grep "^LATENCY" "$OUT/run.txt" | sed -E 's/.* ([0-9]+) KB: ([0-9.]+) us.*/\1K=\2/' | tr '\n' ' ')
  result "$setting" "rc=$rc $lat"
done

# SWEEP_TRANSPORTS set but empty: the settings above only, no sweep.
TRANSPORTS=${SWEEP_TRANSPORTS-proxy p2p}
for transport in $TRANSPORTS; do
  say "sweep with ROCENANTE_TRANSPORT=$transport"
  ROCENANTE_TRANSPORT=$transport timeout 150 "$BUILD/bench/allreduce_sweep" --dtype bf16 --mode graph \
    --methods rcn-oneshot,nccl --min-bytes 1K --max-bytes 256K --factor 2 --gpus 2 \
    --note "ROCENANTE_TRANSPORT=$transport; scripts/gpu/proxy_sweep.sh" > "$OUT/sweep-$transport.txt" 2>> "$LOG"
  result "sweep $transport" "rc=$?"
done

echo "---- summary (proxy_sweep) ----"
printf "%s\n" "${SUMMARY[@]}"
for transport in $TRANSPORTS; do
  echo "---- sweep, ROCENANTE_TRANSPORT=$transport"
  head -60 "$OUT/sweep-$transport.txt"
done
