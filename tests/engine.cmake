# SPDX-License-Identifier: BSD-3-Clause
# rcn_engine (examples/engine): the CPU reference runs in CI; the GPU tests'
# cases skip without enough GPUs. The engine targets are defined later, in
# examples/, which CMake resolves at generate time.
if(ROCENANTE_BUILD_EXAMPLES)
  option(ROCENANTE_ENGINE_GPU "Build the engine's CUDA path (needs cuBLAS and the rocenante library)" ON)
  rcn_add_test(test_engine_cpu SOURCES test_engine_cpu.cc test_engine_bpe_merge.cc test_engine_naive.cc LIBS rcn_engine_core rcn_engine_models TIMEOUT 120)
  # TP ranks as processes over rocenante's host backend, in-process and through rcn_engine.
  rcn_add_test(test_engine_host SOURCES test_engine_host.cc test_engine_naive.cc LIBS rcn_engine_host TIMEOUT 60)
  add_dependencies(test_engine_host rcn_engine)
  target_compile_definitions(test_engine_host PRIVATE RCN_ENGINE_BIN="$<TARGET_FILE:rcn_engine>")
  if(ROCENANTE_ENGINE_GPU AND TARGET CUDA::cublas)  # as examples/CMakeLists.txt builds it
    rcn_add_test(test_engine_gpu SOURCES test_engine_gpu.cc LIBS rcn_engine_gpu LABELS gpu TIMEOUT 300)
    rcn_add_test(test_engine_kernels SOURCES test_engine_kernels.cc LIBS rcn_engine_gpu LABELS gpu TIMEOUT 120)
  endif()
endif()
