# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal host_path.cc host_reduce.cc)
# The CPU reduction is the host backend's hot loop: let the compiler vectorize it.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/host_reduce.cc PROPERTIES COMPILE_OPTIONS "-O3")
