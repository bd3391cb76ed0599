# SPDX-License-Identifier: BSD-3-Clause
# The NCCL shim, the routing policy and the tuner plugin (CPU only).
rcn_add_test(test_policy SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_policy.cc LABELS shim TIMEOUT 60)
target_compile_definitions(test_policy PRIVATE
  RCN_SAMPLE_POLICY="${PROJECT_SOURCE_DIR}/policies/sample.yaml")

# These two open librocenante.so itself, as NCCL and applications do.
find_file(RCN_REAL_NCCL_LIBRARY libnccl.so.2
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${NCCL_INCLUDE_DIR}/../lib
  PATH_SUFFIXES lib lib64 NO_CACHE)
if(NOT RCN_REAL_NCCL_LIBRARY)
  set(RCN_REAL_NCCL_LIBRARY /nonexistent/libnccl.so.2)  # the tests then skip
endif()
foreach(t test_tuner test_shim_symbols)
  rcn_add_test(${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/${t}.cc LABELS shim TIMEOUT 60)
  add_dependencies(${t} rocenante)
  target_compile_definitions(${t} PRIVATE RCN_SHARED_LIB="$<TARGET_FILE:rocenante>"
    RCN_REAL_NCCL="${RCN_REAL_NCCL_LIBRARY}")
endforeach()

# On GPUs (2): the shim driven through the NCCL API, eager, graphs, groups,
# ncclCommInitAll, the forced self-test failure, suspend and resume. Skipped
# without GPUs.
rcn_add_test(test_shim_gpu SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_shim_gpu.cc LABELS shim gpu TIMEOUT 300)
# Its suspend case runs over tests/nccl_suspend_layer.cc where the real NCCL
# predates ncclCommSuspend.
add_library(rcn_nccl_suspend_layer SHARED ${CMAKE_CURRENT_SOURCE_DIR}/nccl_suspend_layer.cc)
set_target_properties(rcn_nccl_suspend_layer PROPERTIES OUTPUT_NAME nccl SOVERSION 2
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/nccl_suspend_layer)
target_include_directories(rcn_nccl_suspend_layer PRIVATE ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(rcn_nccl_suspend_layer PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(test_shim_gpu rocenante rcn_nccl_suspend_layer)
target_compile_definitions(test_shim_gpu PRIVATE RCN_SHARED_LIB="$<TARGET_FILE:rocenante>"
  RCN_SUSPEND_LAYER="$<TARGET_FILE:rcn_nccl_suspend_layer>")

# The self-test and vote on the host backend (no GPU needed).
rcn_add_test(test_shim_selftest SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_shim_selftest.cc LABELS shim TIMEOUT 120)

# The shim's interception and the tuner's life inside NCCL on a CPU, against a
# fake libnccl.so.2 (tests/fake_nccl.cc) that loads the tuner as NCCL 2.28 does.
add_library(rcn_fake_nccl SHARED ${CMAKE_CURRENT_SOURCE_DIR}/fake_nccl.cc)
set_target_properties(rcn_fake_nccl PROPERTIES OUTPUT_NAME nccl SOVERSION 2
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_nccl)
target_include_directories(rcn_fake_nccl PRIVATE ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(rcn_fake_nccl PRIVATE ${CMAKE_DL_LIBS})
# The same without ncclCommGetAsyncError and NCCL 2.29+'s entry points: an
# NCCL older than the shim's table.
add_library(rcn_fake_nccl_old SHARED ${CMAKE_CURRENT_SOURCE_DIR}/fake_nccl.cc)
set_target_properties(rcn_fake_nccl_old PROPERTIES OUTPUT_NAME nccl SOVERSION 2
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_nccl_old)
target_compile_definitions(rcn_fake_nccl_old PRIVATE FAKE_NCCL_WITHOUT_ASYNC_ERROR=1)
target_include_directories(rcn_fake_nccl_old PRIVATE ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(rcn_fake_nccl_old PRIVATE ${CMAKE_DL_LIBS})
rcn_add_test(test_shim_fake_nccl SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_shim_fake_nccl.cc LABELS shim TIMEOUT 60)
add_dependencies(test_shim_fake_nccl rocenante rcn_fake_nccl rcn_fake_nccl_old)
target_compile_definitions(test_shim_fake_nccl PRIVATE RCN_SHARED_LIB="$<TARGET_FILE:rocenante>"
  RCN_FAKE_NCCL="$<TARGET_FILE:rcn_fake_nccl>" RCN_FAKE_NCCL_OLD="$<TARGET_FILE:rcn_fake_nccl_old>")

# The library against today's vLLM and NCCL: vLLM's wrapper module from the
# newest vLLM wheel loads it by path; the newest NCCL wheel's nccl* symbols are
# all exported. Needs the package index (skips without it); downloads are
# cached under the build folder.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_shim_compat COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/shim_compat.py
    --lib $<TARGET_FILE:rocenante> --nccl $<TARGET_FILE:rcn_fake_nccl> --cache ${CMAKE_BINARY_DIR}/compat-cache)
  set_tests_properties(test_shim_compat PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS "shim;cpu")
endif()

# The committed forwarders are what the pinned NCCL header gives.
add_test(NAME test_shim_generated COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_shim_generated.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test_shim_generated PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60 LABELS "shim;cpu")

# UBSan's function check (scripts/sanitize.sh asan) cannot match a C entry
# point called through dlsym with the test's own copy of its structs (NCCL's
# tuner plugin ABI, the fake NCCL's counters): these files do exactly that.
if(ROCENANTE_SANITIZE MATCHES "undefined")
  set_source_files_properties(test_tuner.cc test_shim_fake_nccl.cc fake_nccl.cc PROPERTIES COMPILE_OPTIONS -fno-sanitize=function)
endif()
