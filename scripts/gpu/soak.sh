#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The p2p soak (tests/test_soak_gpu.cc): 10^5 random all-reduces (eager and
# graph batches, two communicators, every type and op, unaligned and in
# place) between two ranks, each result checked against the CPU reference
# and across ranks, memory and descriptors flat. On one GPU both ranks share
# it (no NCCL); with two, counts past the fast path go to NCCL in between.
# Expect: "All tests passed" and each rank's line "100000+ calls ...".
# Usage: OUT=... [RCN_SOAK_CALLS=100000] bash scripts/gpu/soak.sh
. "$(dirname "$0")/common.sh" soak "${SOAK_BUILD_DIR:-$(dirname "$0")/../../build-gpu}"
gpu_build "" test_soak_gpu
nvidia-smi -L | tee -a "$LOG"
export RCN_SOAK_CALLS=${RCN_SOAK_CALLS:-100000}
[ "$(nvidia-smi -L | wc -l)" -lt 2 ] && export ROCENANTE_TEST_SHARE_GPUS=1
say "soak of $RCN_SOAK_CALLS calls $(date -u +%H:%M:%S) (ROCENANTE_TEST_SHARE_GPUS=${ROCENANTE_TEST_SHARE_GPUS:-0})"
timeout 580 "$BUILD/tests/test_soak_gpu" > "$OUT/soak.log" 2>&1
rc=$?
grep -E "calls|All tests|test cases|FAILED|rank [0-9]:" "$OUT/soak.log" | head -20 | tee -a "$LOG"
result soak "rc $rc"
printf '%s\n' "${SUMMARY[@]}"
