#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The p2p transport and the one-shot kernel on 2 GPUs: builds from source,
# prints the GPU link matrix, runs the latency probe (tests/p2p_latency.cc:
# both protocols, graph and eager, 1 KB..256 KB bf16 sum), then the p2p tests
# (in one process, one process per GPU over cuMem and legacy IPC, through the
# public API, the timeout test) and the device API (test_device_api). Writes $OUT/p2p.log and prints a summary last.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" p2p "${P2P_BUILD_DIR:-/tmp/build}"

gpu_build "-DROCENANTE_BUILD_BENCH=OFF -DROCENANTE_BUILD_EXAMPLES=OFF" \
  test_reference test_p2p_fd test_p2p_local test_p2p_ipc test_p2p_api test_p2p_api_local test_device_api p2p_latency
say "built $(date -u +%H:%M:%S)"
nvidia-smi -L >> "$LOG" 2>&1
nvidia-smi topo -m >> "$LOG" 2>&1

say "latency probe $(date -u +%H:%M:%S)"
if timeout 180 "$BUILD/tests/p2p_latency" 2 > "$OUT/p2p_latency.txt" 2>&1; then
  result latency "ok (table below)"
else
  result latency "FAILED"
fi
cat "$OUT/p2p_latency.txt" >> "$LOG"

run_test() {  # name, label, extra environment...
  local t=$1 label=$2
  shift 2
  say "$label $(date -u +%H:%M:%S)"
  (cd "$BUILD" && env "$@" timeout 240 ctest -R "^$t\$" -V) > "$OUT/ctest.tmp" 2>&1
  local rc=$?
  cat "$OUT/ctest.tmp" >> "$LOG"
  if grep -q "Skipped\|Not Run" "$OUT/ctest.tmp"; then result "$label" "SKIPPED"
  elif [ $rc -eq 0 ]; then result "$label" "passed"
  else result "$label" "FAILED (rc $rc)"; grep -E "rank [0-9]+:|FAILED|REQUIRE|with expansion" "$OUT/ctest.tmp" | head -8; fi
}
for t in test_reference test_p2p_fd test_p2p_local test_p2p_ipc test_p2p_api_local test_p2p_api test_device_api; do
  run_test "$t" "$t" ROCENANTE_PDL=0
done
# The same kernels launched with programmatic dependent launch.
for t in test_p2p_local test_p2p_ipc test_p2p_api_local; do
  run_test "$t" "$t+pdl" ROCENANTE_PDL=1
done
rm -f "$OUT/ctest.tmp"
grep -h "rank 0 saw\|rank 0 after" "$LOG" | sed 's/^[0-9]*: //' | head -8

say "summary $(date -u +%H:%M:%S)"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
echo
cat "$OUT/p2p_latency.txt"
