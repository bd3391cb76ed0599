#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The main job: sets up a fresh machine (Debian 12 with the CUDA toolkit),
# builds the all-reduce sweep and runs it on whatever hardware is here: one
# process per local GPU, or, with no GPU, 2 processes on the CPU host backend
# (rocenante only; the NCCL methods say n/a). Extra arguments go to
# allreduce_sweep (see --help), e.g. bash scripts/run-sweep.sh --dtype fp16.
# Writes sweep.json, sweep.csv, sweep-policy.yaml and, when matplotlib is
# installed, sweep.png into $SWEEP_OUT (default build/sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/env.sh
configure_build
build_targets allreduce_sweep

OUT_DIR=${SWEEP_OUT:-$BUILD_DIR/sweep}
mkdir -p "$OUT_DIR"
# The sweep counts the GPUs it can see itself (CUDA_VISIBLE_DEVICES included)
# and starts one process per GPU, or 2 on the host backend without any.
"$BUILD_DIR/bench/allreduce_sweep" \
  --json "$OUT_DIR/sweep.json" --csv "$OUT_DIR/sweep.csv" --write-policy "$OUT_DIR/sweep-policy.yaml" "$@"

if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 bench/plot_sweep.py "$OUT_DIR/sweep.json" -o "$OUT_DIR/sweep.png"
else
  echo "run-sweep: no plot (matplotlib is not installed); with it: python3 bench/plot_sweep.py $OUT_DIR/sweep.json" >&2
fi
echo "run-sweep: results in $OUT_DIR" >&2
