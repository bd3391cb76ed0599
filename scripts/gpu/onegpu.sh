#!/usr/bin/env bash
# The GPU suite on whatever GPUs the machine has (one H200 is the usual case):
# every ctest program labelled gpu, once as it is (cases needing more GPUs
# skip, naming what they need) and once with ROCENANTE_TEST_SHARE_GPUS=1
# (two-rank cases run both ranks on one GPU; cases that go through NCCL,
# which wants a GPU per rank, still skip). Prints one line per program and
# pass; expect every program Passed or skipped, none Failed or Timeout.
# Usage: OUT=... bash scripts/gpu/onegpu.sh   (about 10 minutes on one H200)
. "$(dirname "$0")/common.sh" onegpu "${ONEGPU_BUILD_DIR:-$(dirname "$0")/../../build-gpu}"
GPU_TESTS=(test_p2p_local test_p2p_ipc test_p2p_api test_p2p_api_local test_device_api test_wire_proxy_gpu
  test_shim_gpu test_engine_gpu test_engine_kernels test_soak_gpu)
gpu_build "" rocenante "${GPU_TESTS[@]}"
# The soak's full length is soak.sh's job; here a short run checks it works.
export RCN_SOAK_CALLS=${RCN_SOAK_CALLS:-5000}
nvidia-smi -L | tee -a "$LOG"

for share in 0 1; do
  say "pass ROCENANTE_TEST_SHARE_GPUS=$share $(date -u +%H:%M:%S)"
  # 250 s per program keeps each pass within the device tool's 10 minutes
  # only if most skip; the coordinator may run the passes in two calls
  # (ONEGPU_SHARE=0 or 1).
  [ -n "${ONEGPU_SHARE:-}" ] && [ "$ONEGPU_SHARE" != "$share" ] && continue
  ROCENANTE_TEST_SHARE_GPUS=$share ctest --test-dir "$BUILD" -L gpu --timeout 250 --output-on-failure \
    > "$OUT/ctest-share$share.log" 2>&1
  grep -E "^ *[0-9]+/[0-9]+ Test +#" "$OUT/ctest-share$share.log" | tee -a "$LOG"
  failed=$(grep -cE "\*\*\*Failed|\*\*\*Timeout|Exception" "$OUT/ctest-share$share.log")
  result "share=$share" "$failed program(s) failed"
  # Each skipped case names its reason (Catch2 SKIP): list them.
  grep -hE "SKIPPED|skipped:" -A1 "$OUT/ctest-share$share.log" | grep -vE "^--$" | sort | uniq -c | head -40 \
    > "$OUT/skips-share$share.txt"
done
say "summary"
printf '%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
