# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the scripts: finds the CUDA toolkit and sets the GPU host's safety
# variables (NVLink multicast stays off in every process we start).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# Only the architectures of the machine at hand: building all four triples the time.
if [ -z "${CUDA_ARCHS:-}" ]; then
  CUDA_ARCHS=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.' || true)
  # A failing nvidia-smi prints its complaint on stdout: only a number is an architecture.
  [[ "$CUDA_ARCHS" =~ ^[0-9]+$ ]] || CUDA_ARCHS=90
fi
export CUDA_ARCHS
# The NCCL API the shim exports: its forwarders are generated from the newest
# pinned nccl.h and still build against the floor's (plugin/gen_forwarders.py);
# install-deps.sh puts both headers in .deps/nccl-api/<version>/.
export RCN_NCCL_API_NEWEST=2.32.6 RCN_NCCL_API_FLOOR=2.28.9
# NCCL from install-deps.sh's wheel, on a machine without NCCL of its own.
if [ -z "${NCCL_ROOT:-}" ] && [ -f .deps/nccl/nvidia/nccl/include/nccl.h ]; then
  export NCCL_ROOT=$PWD/.deps/nccl/nvidia/nccl
  export LD_LIBRARY_PATH=$NCCL_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# The Python that builds the extension and runs its tests (install-deps.sh's venv).
RCN_VENV=${RCN_VENV:-$PWD/.deps/venv}
PYTHON_ARGS=()
if [ -x "$RCN_VENV/bin/python" ]; then PYTHON_ARGS=(-DPython_EXECUTABLE="$RCN_VENV/bin/python"); fi
BUILD_DIR=${BUILD_DIR:-build}
GENERATOR=$(command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
configure_build() {
  cmake -S . -B "$BUILD_DIR" -G "$GENERATOR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" "${PYTHON_ARGS[@]}" "$@"
}
# build_targets [target...]: everything when none is named.
build_targets() {
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
}
