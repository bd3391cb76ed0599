#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The one CMake configure line of the GPU scripts (common.sh's gpu_build and
# all.sh's shared build). Source it with SRC set to the repo:
#   gpu_configure <build dir> [more cmake options...]
# A Release sm_90 Ninja build with host debug info (-g changes no generated
# code), so that crash backtraces resolve to file:line. Bench and examples
# are named ON (their defaults) before the extra options, which may turn them
# OFF: all.sh shares one build dir between the areas, and an OFF left in its
# cache by p2p or shim would otherwise drop bench's and engine's targets.
RELEASE_HOST_FLAGS="-O3 -DNDEBUG -g"
gpu_configure() {
  local build=$1
  shift
  cmake -S "$SRC" -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=$RELEASE_HOST_FLAGS" -DROCENANTE_BUILD_BENCH=ON -DROCENANTE_BUILD_EXAMPLES=ON "$@"
}
