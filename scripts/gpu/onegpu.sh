#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The GPU suite on whatever GPUs the machine has (one H200 is the usual case):
# every ctest program labelled gpu, once as it is (cases needing more GPUs
# skip, naming what they need) and once with ROCENANTE_TEST_SHARE_GPUS=1
# (two-rank cases run both ranks on one GPU; cases that go through NCCL,
# which wants a GPU per rank, still skip). Prints one line per program and
# pass; expect every program Passed or skipped, none Failed or Timeout.
# Usage: OUT=... bash scripts/gpu/onegpu.sh   (about 10 minutes on one H200)
. "$(dirname "$0")/common.sh" onegpu "${ONEGPU_BUILD_DIR:-$(dirname "$0")/../../build-gpu}"
GPU_TESTS=(test_p2p_local test_p2p_ipc test_p2p_api test_p2p_api_local test_device_api test_wire_proxy_gpu
  test_shim_gpu test_engine_gpu test_engine_kernels test_soak_gpu test_p2p_collectives test_residual_norm_gpu)
gpu_build "" rocenante "${GPU_TESTS[@]}"
# The soak's full length is soak.sh's job; here a short run checks it works.
export RCN_SOAK_CALLS=${RCN_SOAK_CALLS:-5000}
nvidia-smi -L | tee -a "$LOG"

for share in 0 1; do
  # A pass takes minutes: ONEGPU_SHARE=0 or 1 runs one pass only, so that
  # each fits one call of the device tool.
  [ -n "${ONEGPU_SHARE:-}" ] && [ "$ONEGPU_SHARE" != "$share" ] && continue
  say "pass ROCENANTE_TEST_SHARE_GPUS=$share $(date -u +%H:%M:%S)"
  # -V keeps every program's output: the skipped cases' reasons are in it.
  ROCENANTE_TEST_SHARE_GPUS=$share ctest --test-dir "$BUILD" -L gpu -V > "$OUT/ctest-share$share.log" 2>&1
  grep -E "^ *[0-9]+/[0-9]+ Test +#" "$OUT/ctest-share$share.log" | tee -a "$LOG"
  grep -E "test cases:|All tests passed" "$OUT/ctest-share$share.log" | tee -a "$LOG"
  failed=$(grep -cE "\*\*\*Failed|\*\*\*Timeout|Exception" "$OUT/ctest-share$share.log")
  result "share=$share" "$failed program(s) failed"
  # Each skipped case names its reason (Catch2 SKIP): count them by reason.
  grep -oE "needs [0-9]+ GPU[^\"]*|two ranks share one GPU[^\"]*" "$OUT/ctest-share$share.log" | sort | uniq -c |
    tee "$OUT/skips-share$share.txt" | tee -a "$LOG"
done
say "summary"
printf '%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
