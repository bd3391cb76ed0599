#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The sweep on the GPU host: builds allreduce_sweep from source, checks its CPU
# tests, then times bf16 sum all-reduce from 1 KB to 64 MB (factor 2), eagerly
# and in CUDA graphs, rocenante against every NCCL setting, on all local GPUs.
# Writes into $OUT: bench.log (everything), bench.txt (all tables),
# bench.json, bench.csv, bench-policy.yaml, bench.png. Prints the comparison
# tables and crossovers last. Under 4 minutes on 2x H200.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" bench "${BENCH_BUILD_DIR:-/tmp/build-bench}"

gpu_build "" allreduce_sweep test_bench
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
nvidia-smi -L >> "$LOG" 2>&1
COMMIT=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$SRC" status --porcelain 2>/dev/null | grep -qv '^??' && echo "+changes" || true)
say "GPUs: $GPUS, commit $COMMIT$DIRTY"

TESTS_OK=1
(cd "$BUILD" && timeout 120 ctest -R '^test_bench' --output-on-failure) >> "$LOG" 2>&1 || TESTS_OK=0

say "sweep $(date -u +%H:%M:%S)"
SWEEP=(timeout 210 "$BUILD/bench/allreduce_sweep" --dtype bf16 --mode both
  --min-bytes 1K --max-bytes 64M --factor 2
  --json "$OUT/bench.json" --csv "$OUT/bench.csv" --write-policy "$OUT/bench-policy.yaml"
  --note "commit $COMMIT$DIRTY; scripts/gpu/bench.sh")
[ "${GPUS:-0}" -ge 1 ] && SWEEP+=(--gpus "$GPUS")
echo "command: ${SWEEP[*]:2}" >> "$LOG"
"${SWEEP[@]}" > "$OUT/bench.txt" 2>> "$LOG"
SWEEP_RC=$?
cat "$OUT/bench.txt" >> "$LOG"
say "sweep done $(date -u +%H:%M:%S), exit $SWEEP_RC"

PLOT_OK=0
if [ -s "$OUT/bench.json" ]; then
  python3 "$SRC/bench/plot_sweep.py" "$OUT/bench.json" -o "$OUT/bench.png" >> "$LOG" 2>&1 && PLOT_OK=1
fi

# Last: the side-by-side tables and the crossovers (the per-method blocks with
# every nccl-tests column are in bench.txt).
echo
grep -E 'unavailable|failed|error' "$LOG" | grep -vE 'rcn-twoshot|tests failed' | head -20
[ -s "$OUT/bench.json" ] && python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["meta"]
for k in ("gpu", "nccl_version", "rcn-oneshot", "rcn-auto"): print("# %s: %s" % (k, m.get(k, "-")))' "$OUT/bench.json"
awk '/^# (graph|eager) mode: median/ {on=1} /^$/ {on=0} /^# crossover/ {print; next} on' "$OUT/bench.txt"
echo
say "summary: build ok, CPU tests $([ $TESTS_OK = 1 ] && echo passed || echo FAILED), sweep exit $SWEEP_RC, plot $([ $PLOT_OK = 1 ] && echo written || echo MISSING); files in $OUT"
[ $SWEEP_RC = 0 ] && [ $TESTS_OK = 1 ]
