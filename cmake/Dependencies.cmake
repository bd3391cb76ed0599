# SPDX-License-Identifier: BSD-3-Clause
# Required: CUDA toolkit and NCCL's header (NCCL itself is opened at run time,
# so librocenante.so can stand in for libnccl.so.2 without linking to it).
# Required: OpenSSL's libcrypto.
# Optional: libibverbs's header, hwloc, yaml-cpp; each found one adds a ROCENANTE_HAVE_* define.
find_package(CUDAToolkit REQUIRED)
find_package(Threads REQUIRED)
# libcrypto (Debian: libssl-dev to build, libssl3 at run time): HMAC-SHA256
# for the authenticated bootstrap (src/core/auth.cc).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
if(NOT NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "nccl.h not found: install NCCL's development files or set NCCL_ROOT")
endif()
message(STATUS "rocenante: nccl.h in ${NCCL_INCLUDE_DIR}")

set(ROCENANTE_FEATURE_DEFINES "")
set(ROCENANTE_OPTIONAL_LIBS "")

# libibverbs: the header only. The library is opened at run time (dlopen, as
# NCCL does), so librocenante.so also loads where rdma-core is absent.
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
if(IBVERBS_INCLUDE_DIR)
  set(ROCENANTE_HAVE_IBVERBS ON)
  list(APPEND ROCENANTE_FEATURE_DEFINES ROCENANTE_HAVE_IBVERBS=1)
endif()
message(STATUS "rocenante: infiniband/verbs.h ${ROCENANTE_HAVE_IBVERBS} (libibverbs.so.1 opened at run time)")

find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc)
endif()
if(HWLOC_FOUND)
  set(ROCENANTE_HAVE_HWLOC ON)
  list(APPEND ROCENANTE_FEATURE_DEFINES ROCENANTE_HAVE_HWLOC=1)
  list(APPEND ROCENANTE_OPTIONAL_LIBS PkgConfig::HWLOC)
endif()
message(STATUS "rocenante: hwloc ${ROCENANTE_HAVE_HWLOC}")

find_package(yaml-cpp QUIET)
if(yaml-cpp_FOUND)
  set(ROCENANTE_HAVE_YAML ON)
  list(APPEND ROCENANTE_FEATURE_DEFINES ROCENANTE_HAVE_YAML=1)
  if(TARGET yaml-cpp::yaml-cpp)
    list(APPEND ROCENANTE_OPTIONAL_LIBS yaml-cpp::yaml-cpp)
  else()
    list(APPEND ROCENANTE_OPTIONAL_LIBS yaml-cpp)
  endif()
endif()
message(STATUS "rocenante: yaml-cpp ${ROCENANTE_HAVE_YAML}")
