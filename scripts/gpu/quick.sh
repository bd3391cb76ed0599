#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A lean GPU pass over an existing build when device time is short: the p2p
# tests and latency probe, the sweep (bf16, graph + eager), the shim's GPU
# test and the probe. Reuses whichever build dir a warm machine still has.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/quick-out}
B=$SRC/build-gpu
for d in /tmp/build-engine /tmp/rocenante-build-proxy /tmp/build; do
  [ -f "$d/build.ninja" ] && B=$d && break
done
echo "== build in $B $(date -u +%H:%M:%S)"
{ cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    -DROCENANTE_BUILD_BENCH=ON -DROCENANTE_BUILD_EXAMPLES=ON &&
  ninja -k 0 -C "$B" rocenante test_p2p_local test_p2p_ipc test_p2p_api test_p2p_api_local \
    p2p_latency allreduce_sweep test_shim_gpu rocenante-probe; } > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -20; }
echo "== built $(date -u +%H:%M:%S)"
(cd "$B" && timeout 200 ctest -R 'test_p2p_(local|ipc|api|api_local)$|test_shim_gpu' --output-on-failure) \
  > "$OUT/ctest.log" 2>&1
tail -15 "$OUT/ctest.log"
echo "== latency $(date -u +%H:%M:%S)"
timeout 60 "$B/tests/p2p_latency" 2 > "$OUT/latency.txt" 2>&1; tail -25 "$OUT/latency.txt"
echo "== probe $(date -u +%H:%M:%S)"
timeout 30 "$B/tools/rocenante-probe/rocenante-probe" > "$OUT/probe.txt" 2>&1; head -30 "$OUT/probe.txt"
echo "== sweep $(date -u +%H:%M:%S)"
timeout 150 "$B/bench/allreduce_sweep" --gpus 2 --dtype bf16 --mode both --min-bytes 1K --max-bytes 64M \
  --factor 4 --json "$OUT/sweep.json" --csv "$OUT/sweep.csv" --write-policy "$OUT/sweep-policy.yaml" \
  > "$OUT/sweep.txt" 2> "$OUT/sweep.err"
echo "sweep exit $?"; tail -5 "$OUT/sweep.err"
awk '/^# (graph|eager) mode: median/ {on=1} /^$/ {on=0} /^# crossover/ {print; next} on' "$OUT/sweep.txt"
echo "== done $(date -u +%H:%M:%S)"
