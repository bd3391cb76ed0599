# SPDX-License-Identifier: BSD-3-Clause
# The NCCL shim and tuner plugin: only in the shared library, which must stand
# in for libnccl.so.2 (tests reach internals through rocenante_internal).
# forwarders.cc, real_nccl.h, real_nccl.def and nccl_types.cmake are generated
# by plugin/gen_forwarders.py from the pinned newest nccl.h and committed.
rcn_sources(rocenante coll_config.cc forwarders.cc real_nccl.cc shim.cc tuner.cc)
target_include_directories(rocenante PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
  ${CMAKE_CURRENT_SOURCE_DIR}/src ${NCCL_INCLUDE_DIR})
target_link_libraries(rocenante PRIVATE CUDA::cudart_static)

# Which of the newest header's types the build's nccl.h has; real_nccl.h
# declares the others itself (an older NCCL, say 2.28, still builds).
include(${CMAKE_CURRENT_LIST_DIR}/nccl_types.cmake)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
set(CMAKE_REQUIRED_QUIET ON)
foreach(type IN LISTS RCN_NCCL_NEWER_TYPES)
  check_cxx_source_compiles("#include <nccl.h>\nint main() { return sizeof(${type}*) == 0; }"
    RCN_NCCL_HAS_${type})
  if(RCN_NCCL_HAS_${type})
    target_compile_definitions(rocenante PRIVATE RCN_NCCL_HAS_${type}=1)
  endif()
endforeach()
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_QUIET)
