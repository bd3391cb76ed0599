#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds rcn_engine from source, runs its GPU tests, then benchmarks decode
# with rocenante against NCCL: llama3-1b and llama3-8b shapes (random bf16
# weights), batch 1 and 8, TP=1 and TP=2 (with and without --fused-allreduce,
# which only changes batch 1: it fuses 1-2 tokens), and rank 0's half of TP=2 alone
# (--shard-of 2, one GPU: a TP=2 step's compute). Writes $OUT/engine.log and
# $OUT/engine.jsonl, and prints a short table last. About 6 minutes on 2x H200.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" engine "${ENGINE_BUILD_DIR:-/tmp/build-engine}"
SHAPES=${ENGINE_SHAPES:-"llama3-1b llama3-8b"}
JSON=$OUT/engine.jsonl
: > "$JSON"

gpu_build "" rcn_engine test_engine_cpu test_engine_gpu test_engine_kernels minimal_allreduce
ENGINE=$BUILD/examples/rcn_engine
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
say "GPUs: $GPUS"
nvidia-smi -L >> "$LOG" 2>&1

# ../shared/models holds stories260K; the tests skip those cases without it.
export ROCENANTE_SHARED_DIR=${ROCENANTE_SHARED_DIR:-$SRC/../shared}
TESTS_OK=1
TEST_RESULTS=""
# Run directly, not through ctest, so that ROCENANTE_SHARED_DIR reaches them
# (ctest sets it to <source>/../shared). 77 means every case skipped; a
# passing run may still have skipped some (e.g. TP=2 on one GPU): Catch2's
# count line says how many.
for t in test_engine_cpu test_engine_kernels test_engine_gpu; do
  say "$t"
  timeout 300 "$BUILD/tests/$t" >> "$LOG" 2>&1
  rc=$?
  cases=$(tail -n 5 "$LOG" | grep -E "^test cases:|^All tests passed" | tail -1)
  case $rc in 0) TEST_RESULTS+="$t passed ($cases); " ;; 77) TEST_RESULTS+="$t skipped; " ;; *) TEST_RESULTS+="$t FAILED($rc); "; TESTS_OK=0 ;; esac
done
say "minimal_allreduce"
if timeout 60 "$BUILD/examples/minimal_allreduce" >> "$LOG" 2>&1; then TEST_RESULTS+="minimal_allreduce passed; "
else TEST_RESULTS+="minimal_allreduce FAILED; "; TESTS_OK=0; fi
if [ -f "$ROCENANTE_SHARED_DIR/models/stories260K.bin" ]; then
  say "generate stories260K on the GPU"
  timeout 60 "$ENGINE" --device gpu --model "$ROCENANTE_SHARED_DIR/models/stories260K.bin" \
    --tokenizer "$ROCENANTE_SHARED_DIR/models/tok512.bin" --steps 100 >> "$LOG" 2>&1 || TESTS_OK=0
fi

# Joining an external (torchrun-style) launch: two processes, one rank each,
# must print what the engine's own --tp 2 launch prints (a random tiny model:
# the GPU host has no checkpoint; without a tokenizer the output is token ids).
if [ "$GPUS" -ge 2 ]; then
  say "external launch (RANK/WORLD_SIZE) vs --tp 2"
  STORY=(--device gpu --random-weights --shape tiny-llama --steps 60)
  timeout 60 "$ENGINE" "${STORY[@]}" --tp 2 > "$OUT/story-tp2.txt" 2>> "$LOG"
  PORT=$((29600 + RANDOM % 300))
  for rank in 0 1; do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
      timeout 60 "$ENGINE" "${STORY[@]}" > "$OUT/story-ext$rank.txt" 2>> "$LOG" &
  done
  wait
  { echo "--tp 2:"; cat "$OUT/story-tp2.txt"; echo "external rank 0:"; cat "$OUT/story-ext0.txt"; } >> "$LOG"
  if cmp -s "$OUT/story-tp2.txt" "$OUT/story-ext0.txt" && [ ! -s "$OUT/story-ext1.txt" ] && [ -s "$OUT/story-tp2.txt" ]; then
    TEST_RESULTS+="external launch passed; "
  else
    TEST_RESULTS+="external launch FAILED; "; TESTS_OK=0
  fi
fi

say "bench $(date -u +%H:%M:%S)"
BENCH_OK=1
bench() {  # shape tp collective [more engine options]
  say "bench $1 tp=$2 $3 ${*:4}"
  timeout 240 "$ENGINE" --device gpu --random-weights --shape "$1" --tp "$2" --collective "$3" "${@:4}" \
    --bench --batch 1,8 --prompt-len 128 --decode-steps 100 --json "$JSON" >> "$LOG" 2>&1 || { BENCH_OK=0; say "FAILED: $1 tp=$2 $3 ${*:4}"; }
}
for shape in $SHAPES; do
  bench "$shape" 1 rocenante
  bench "$shape" 1 rocenante --shard-of 2  # rank 0's half alone, all-reduces skipped: a TP=2 step's compute
  if [ "$GPUS" -ge 2 ]; then
    bench "$shape" 2 rocenante
    bench "$shape" 2 nccl
    bench "$shape" 2 rocenante --fused-allreduce  # the all-reduce inside the products (1-2 tokens)
  fi
done
# Where a TP=1 llama3-8b batch-1 step goes: per-operation times of eager steps
# (launch gaps included), and, when ncu is there, 24 decode kernels in a row:
# each one's own duration and DRAM throughput (serialized: no overlap).
say "profile llama3-8b tp=1 $(date -u +%H:%M:%S)"
timeout 120 "$ENGINE" --device gpu --random-weights --shape llama3-8b --bench --batch 1 --prompt-len 128 \
  --decode-steps 20 --profile >> "$LOG" 2>&1 || say "profile FAILED"
# The same at TP=2 (rank 0's operations): what the TP=2 step spends per operation.
if [ "$GPUS" -ge 2 ]; then
  say "profile llama3-8b tp=2 $(date -u +%H:%M:%S)"
  timeout 120 "$ENGINE" --device gpu --tp 2 --collective rocenante --random-weights --shape llama3-8b --bench \
    --batch 1 --prompt-len 128 --decode-steps 20 --profile >> "$LOG" 2>&1 || say "profile tp=2 FAILED"
fi
if command -v ncu > /dev/null && [ "${ENGINE_NCU:-1}" = 1 ]; then
  say "ncu kernels $(date -u +%H:%M:%S)"
  timeout 180 ncu --clock-control none --launch-skip 1000 --launch-count 24 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    "$ENGINE" --device gpu --random-weights --shape llama3-8b --bench --batch 1 --prompt-len 16 --decode-steps 4 \
    > "$OUT/ncu-kernels.txt" 2>&1 || say "ncu FAILED (see ncu-kernels.txt)"
  grep -E "Context|gpu__time_duration|dram__" "$OUT/ncu-kernels.txt" | cut -c1-110 >> "$LOG"
fi
say "done $(date -u +%H:%M:%S)"

# The summary: decode step time per configuration and the ratios the targets name.
python3 - "$JSON" <<'PY' | tee -a "$LOG"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def step(shape, batch, tp, coll, fused=False, shard=False):
    for r in rows:
        if (r["shape"] == shape and r["batch"] == batch and r["tp"] == tp and (tp == 1 or r["collective"] == coll)
                and r.get("fused_allreduce", False) == fused and r.get("shard_only", False) == shard):
            return r
    return None
print("\ndecode step (us) and tokens/s; ar = all-reduce share of a TP=2 step (step - compute-only step);")
print("half = rank 0's shard of TP=2 alone on one GPU (--shard-of 2), tp1/half = TP=2 over TP=1 with free all-reduces")
print("%-10s %5s %9s %7s %9s %9s %14s %14s %16s %9s %9s %10s %10s" % ("shape", "batch", "tp1 us", "tp1 hbm%",
      "half us", "tp1/half", "tp2 rcn us(ar)", "tp2 nccl us(ar)", "tp2 fused us(ar)", "rcn/nccl", "tp2/tp1",
      "rcn tok/s", "nccl tok/s"))
for shape in sorted({r["shape"] for r in rows}):
    for batch in sorted({r["batch"] for r in rows}):
        one, rcn, nccl = step(shape, batch, 1, None), step(shape, batch, 2, "rocenante"), step(shape, batch, 2, "nccl")
        fused = step(shape, batch, 2, "rocenante", True)
        half = step(shape, batch, 2, "skipped", shard=True)
        f = lambda r: "%.1f(%.1f)" % (r["decode_step_us"], r["allreduce_us"]) if r else "-"
        print("%-10s %5d %9s %7s %9s %9s %14s %14s %16s %9s %9s %10s %10s" % (shape, batch,
              "%.1f" % one["decode_step_us"] if one else "-", "%.0f" % one["hbm_roofline_pct"] if one else "-",
              "%.1f" % half["decode_step_us"] if half else "-",
              "%.2fx" % (one["decode_step_us"] / half["decode_step_us"]) if one and half else "-",
              f(rcn), f(nccl), f(fused),
              "%.3fx" % (nccl["decode_step_us"] / rcn["decode_step_us"]) if rcn and nccl else "-",
              "%.2fx" % (one["decode_step_us"] / rcn["decode_step_us"]) if one and rcn else "-",
              "%.0f" % rcn["decode_tokens_per_s"] if rcn else "-", "%.0f" % nccl["decode_tokens_per_s"] if nccl else "-"))
PY
echo "engine: $TEST_RESULTS"
echo "engine: tests $([ $TESTS_OK = 1 ] && echo PASSED || echo FAILED), bench $([ $BENCH_OK = 1 ] && echo completed || echo HAD FAILURES); log $LOG"
