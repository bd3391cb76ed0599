#!/usr/bin/env bash
# Builds rcn_engine from source, runs its GPU tests, then benchmarks decode
# with rocenante against NCCL: llama3-1b and llama3-8b shapes (random bf16
# weights), batch 1 and 8, TP=1 and TP=2. Writes $OUT/engine.log and
# $OUT/engine.jsonl, and prints a short table last. About 5 minutes on 2x H200.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" engine "${ENGINE_BUILD_DIR:-/tmp/build-engine}"
SHAPES=${ENGINE_SHAPES:-"llama3-1b llama3-8b"}
JSON=$OUT/engine.jsonl
: > "$JSON"

gpu_build "" rcn_engine test_engine_cpu test_engine_gpu minimal_allreduce
ENGINE=$BUILD/examples/rcn_engine
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
say "GPUs: $GPUS"
nvidia-smi -L >> "$LOG" 2>&1

# ../shared/models holds stories260K; the tests skip those cases without it.
export ROCENANTE_SHARED_DIR=${ROCENANTE_SHARED_DIR:-$SRC/../shared}
TESTS_OK=1
TEST_RESULTS=""
# Run directly, not through ctest, so that ROCENANTE_SHARED_DIR reaches them
# (ctest sets it to <source>/../shared). 77 means skipped.
for t in test_engine_cpu test_engine_gpu; do
  say "$t"
  timeout 300 "$BUILD/tests/$t" >> "$LOG" 2>&1
  rc=$?
  case $rc in 0) TEST_RESULTS+="$t passed; " ;; 77) TEST_RESULTS+="$t skipped; " ;; *) TEST_RESULTS+="$t FAILED($rc); "; TESTS_OK=0 ;; esac
done
say "minimal_allreduce"
if timeout 60 "$BUILD/examples/minimal_allreduce" >> "$LOG" 2>&1; then TEST_RESULTS+="minimal_allreduce passed; "
else TEST_RESULTS+="minimal_allreduce FAILED; "; TESTS_OK=0; fi
if [ -f "$ROCENANTE_SHARED_DIR/models/stories260K.bin" ]; then
  say "generate stories260K on the GPU"
  timeout 60 "$ENGINE" --device gpu --model "$ROCENANTE_SHARED_DIR/models/stories260K.bin" \
    --tokenizer "$ROCENANTE_SHARED_DIR/models/tok512.bin" --steps 100 >> "$LOG" 2>&1 || TESTS_OK=0
fi

say "bench $(date -u +%H:%M:%S)"
BENCH_OK=1
bench() {  # shape tp collective
  say "bench $1 tp=$2 $3"
  timeout 240 "$ENGINE" --device gpu --random-weights --shape "$1" --tp "$2" --collective "$3" \
    --bench --batch 1,8 --prompt-len 128 --decode-steps 100 --json "$JSON" >> "$LOG" 2>&1 || { BENCH_OK=0; say "FAILED: $1 tp=$2 $3"; }
}
for shape in $SHAPES; do
  bench "$shape" 1 rocenante
  if [ "$GPUS" -ge 2 ]; then
    bench "$shape" 2 rocenante
    bench "$shape" 2 nccl
  fi
done
say "done $(date -u +%H:%M:%S)"

# The summary: decode step time per configuration and the ratios the targets name.
python3 - "$JSON" <<'PY' | tee -a "$LOG"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def step(shape, batch, tp, coll):
    for r in rows:
        if r["shape"] == shape and r["batch"] == batch and r["tp"] == tp and (tp == 1 or r["collective"] == coll):
            return r
    return None
print("\ndecode step (us) and tokens/s; ar = all-reduce share of a TP=2 step (step - compute-only step)")
print("%-10s %5s %9s %7s %14s %14s %9s %9s %10s %10s" % ("shape", "batch", "tp1 us", "tp1 hbm%", "tp2 rcn us(ar)",
      "tp2 nccl us(ar)", "rcn/nccl", "tp2/tp1", "rcn tok/s", "nccl tok/s"))
for shape in sorted({r["shape"] for r in rows}):
    for batch in sorted({r["batch"] for r in rows}):
        one, rcn, nccl = step(shape, batch, 1, None), step(shape, batch, 2, "rocenante"), step(shape, batch, 2, "nccl")
        f = lambda r: "%.1f(%.1f)" % (r["decode_step_us"], r["allreduce_us"]) if r else "-"
        print("%-10s %5d %9s %7s %14s %14s %9s %9s %10s %10s" % (shape, batch,
              "%.1f" % one["decode_step_us"] if one else "-", "%.0f" % one["hbm_roofline_pct"] if one else "-",
              f(rcn), f(nccl),
              "%.3fx" % (nccl["decode_step_us"] / rcn["decode_step_us"]) if rcn and nccl else "-",
              "%.2fx" % (one["decode_step_us"] / rcn["decode_step_us"]) if one and rcn else "-",
              "%.0f" % rcn["decode_tokens_per_s"] if rcn else "-", "%.0f" % nccl["decode_tokens_per_s"] if nccl else "-"))
PY
echo "engine: $TEST_RESULTS"
echo "engine: tests $([ $TESTS_OK = 1 ] && echo PASSED || echo FAILED), bench $([ $BENCH_OK = 1 ] && echo completed || echo HAD FAILURES); log $LOG"
