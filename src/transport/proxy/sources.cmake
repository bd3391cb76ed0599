# SPDX-License-Identifier: BSD-3-Clause
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/proxy_path.cc
  ${CMAKE_CURRENT_LIST_DIR}/proxy_engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/region_placement.cc
  ${CMAKE_CURRENT_LIST_DIR}/proxy_kernel.cu)
