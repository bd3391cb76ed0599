#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# rcnAllReduceResidualRmsNorm on the GPU host: builds from source, runs its
# GPU tests (with one GPU, both ranks on it: ROCENANTE_TEST_SHARE_GPUS=1) and
# the engine's TP=2 test, then what one GPU can measure: the one-rank kernel
# times of the fused epilogue against the bare all-reduce and all-reduce +
# norm (residual_norm_bench, bf16 and bf16 -> e4m3), and llama3-8b's
# --shard-of 2 decode step with and without --fused-norm. Writes
# $OUT/residual_norm.log, $OUT/bench*.txt and $OUT/engine.jsonl; prints a
# summary and the tables last. RESIDUAL_NORM_PARTS (default "tests bench
# engine") picks the parts, so that a run can be split over several calls
# sharing a build directory (RESIDUAL_NORM_BUILD_DIR, e.g. build-gpu inside
# the repository, which a later call on the same machine keeps).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" residual_norm "${RESIDUAL_NORM_BUILD_DIR:-/tmp/build-norm}"

PARTS=${RESIDUAL_NORM_PARTS:-tests bench engine}
has() { [[ " $PARTS " == *" $1 "* ]]; }
gpu_build "" test_residual_norm_host test_residual_norm_gpu test_engine_gpu residual_norm_bench rcn_engine
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
say "GPUs: $GPUS, commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
SHARE=()
[ "${GPUS:-0}" -lt 2 ] && SHARE=(ROCENANTE_TEST_SHARE_GPUS=1)

run_test() {  # label, program, extra environment... (then -- catch2 arguments)
  local label=$1 program=$2
  shift 2
  local envs=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift && args=("$@")
  say "$label $(date -u +%H:%M:%S)"
  env "${SHARE[@]}" "${envs[@]}" timeout 300 "$BUILD/tests/$program" "${args[@]}" > "$OUT/test.tmp" 2>&1
  local rc=$?
  cat "$OUT/test.tmp" >> "$LOG"
  local count
  count=$(grep -E "^test cases:|^All tests passed" "$OUT/test.tmp" | tail -1)
  case $rc in
    0) result "$label" "passed ($count)" ;;
    77) result "$label" "SKIPPED" ;;
    *) result "$label" "FAILED (rc $rc)"; grep -E "FAILED|REQUIRE|CHECK|with expansion|rank [0-9]" "$OUT/test.tmp" | head -12 ;;
  esac
}
if has tests; then
  run_test test_residual_norm_host test_residual_norm_host
  run_test test_residual_norm_gpu test_residual_norm_gpu
  run_test "test_residual_norm_gpu PDL=0" test_residual_norm_gpu ROCENANTE_PDL=0
  run_test "engine TP=2 (fused norm cases)" test_engine_gpu -- "GPU TP=2 over rcnAllReduce matches TP=1"
  rm -f "$OUT/test.tmp"
fi

: > "$OUT/bench.txt"
: > "$OUT/bench-fp8.txt"
if has bench; then
  say "residual_norm_bench $(date -u +%H:%M:%S)"
  timeout 240 "$BUILD/bench/residual_norm_bench" > "$OUT/bench.txt" 2>> "$LOG" && result bench "ok" || result bench "FAILED"
  timeout 240 "$BUILD/bench/residual_norm_bench" --fp8 > "$OUT/bench-fp8.txt" 2>> "$LOG" && result "bench fp8" "ok" ||
    result "bench fp8" "FAILED"
  cat "$OUT/bench.txt" "$OUT/bench-fp8.txt" >> "$LOG"
fi

JSON=$OUT/engine.jsonl
: > "$JSON"
has engine && for fused in "" --fused-norm; do
  say "engine llama3-8b --shard-of 2 $fused $(date -u +%H:%M:%S)"
  timeout 240 "$BUILD/examples/rcn_engine" --device gpu --random-weights --shape llama3-8b --shard-of 2 $fused \
    --bench --batch 1,8 --prompt-len 128 --decode-steps 100 --json "$JSON" >> "$LOG" 2>&1 &&
    result "engine shard-of 2 ${fused:-default}" "ok" || result "engine shard-of 2 ${fused:-default}" "FAILED"
done
if has engine && [ "${GPUS:-0}" -ge 2 ]; then
  for fused in "" --fused-norm; do
    say "engine llama3-8b --tp 2 $fused $(date -u +%H:%M:%S)"
    timeout 240 "$BUILD/examples/rcn_engine" --device gpu --random-weights --shape llama3-8b --tp 2 $fused \
      --bench --batch 1,8 --prompt-len 128 --decode-steps 100 --json "$JSON" >> "$LOG" 2>&1 &&
      result "engine tp 2 ${fused:-default}" "ok" || result "engine tp 2 ${fused:-default}" "FAILED"
  done
fi

say "summary $(date -u +%H:%M:%S)"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
echo
cat "$OUT/bench.txt" "$OUT/bench-fp8.txt"
echo
python3 - "$JSON" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("llama3-8b decode step (us): --fused-norm against the default (norm inside the next GEMV)")
print("%-10s %6s %12s %12s %8s" % ("run", "batch", "default us", "fused us", "ratio"))
for shard in (True, False):
    for batch in sorted({r["batch"] for r in rows}):
        pick = lambda f: next((r for r in rows if r.get("shard_only", False) == shard and r["batch"] == batch
                               and r.get("fused_norm", False) == f), None)
        a, b = pick(False), pick(True)
        if a and b:
            print("%-10s %6d %12.1f %12.1f %7.3fx" % ("shard-of 2" if shard else "tp 2", batch, a["decode_step_us"],
                                                     b["decode_step_us"], a["decode_step_us"] / b["decode_step_us"]))
PY
