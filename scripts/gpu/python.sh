#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Python package on the GPU host: builds librocenante.so and the extension
# with the host's Python (PyTorch, nanobind; PYTHON to choose), then runs the
# pytest suite (tests/python): its CPU cases, and its CUDA cases on two ranks,
# one GPU each where two are visible, else both on GPU 0
# (ROCENANTE_TEST_SHARE_GPUS=1, correctness only, no NCCL beside the fast path).
#   PY_WHEEL=1  also builds the wheel (`pip wheel .`, no network) and runs it
#   PY_BENCH=1  with two GPUs, bench/python_allreduce.py (rocenante, NCCL,
#               symm_mem one-shot, in CUDA graphs) into $OUT/bench.txt
# Writes $OUT/python.log and the pytest report $OUT/pytest.txt; prints a summary.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" python "${PY_BUILD_DIR:-/tmp/build-python}"
PY=$(command -v "${PYTHON:-python3}")
"$PY" -c "import torch, nanobind, pytest; print('torch', torch.__version__, 'nanobind', nanobind.__version__)" \
  >> "$LOG" 2>&1 || { say "needs torch, nanobind and pytest for $PY"; exit 1; }
gpu_build "-DPython_EXECUTABLE=$PY -DROCENANTE_BUILD_PYTHON=ON -DROCENANTE_BUILD_TESTS=OFF -DROCENANTE_BUILD_BENCH=OFF -DROCENANTE_BUILD_EXAMPLES=OFF" _rocenante
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
share=0
[ "$ngpu" -lt 2 ] && share=1
say "pytest $(date -u +%H:%M:%S): $ngpu GPU(s), ROCENANTE_TEST_SHARE_GPUS=$share"
(cd "$SRC" && PYTHONPATH=$BUILD/python ROCENANTE_TEST_SHARE_GPUS=$share timeout 900 \
  "$PY" -m pytest -v -rs -p no:cacheprovider tests/python) > "$OUT/pytest.txt" 2>&1
rc=$?
cat "$OUT/pytest.txt" >> "$LOG"
result pytest "$(tail -1 "$OUT/pytest.txt") (exit $rc)"
if [ "${PY_WHEEL:-0}" = 1 ]; then
  say "wheel $(date -u +%H:%M:%S)"
  (cd "$SRC" && RCN_PYTEST_WHEEL_CMAKE_CUDA_ARCHITECTURES=90 timeout 1500 "$PY" -m pytest -v -p no:cacheprovider \
    tests/python/check_wheel.py) > "$OUT/wheel.txt" 2>&1
  rc=$?
  result wheel "$(tail -1 "$OUT/wheel.txt") (exit $rc)"
fi
if [ "${PY_BENCH:-0}" = 1 ] && [ "$ngpu" -ge 2 ]; then
  say "bench $(date -u +%H:%M:%S)"
  (cd "$SRC" && PYTHONPATH=$BUILD/python timeout 300 "$PY" -m torch.distributed.run --nproc-per-node 2 \
    bench/python_allreduce.py) > "$OUT/bench.txt" 2>&1
  result bench "exit $? ($OUT/bench.txt)"
  cat "$OUT/bench.txt"
fi
printf '%s\n' "${SUMMARY[@]}"
