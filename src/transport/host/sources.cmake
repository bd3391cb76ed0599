# SPDX-License-Identifier: BSD-3-Clause
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/host_path.cc
  ${CMAKE_CURRENT_LIST_DIR}/host_reduce.cc)
# The CPU reduction is the host backend's hot loop: let the compiler vectorize it.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/host_reduce.cc PROPERTIES COMPILE_OPTIONS "-O3")
