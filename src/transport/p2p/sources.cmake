# SPDX-License-Identifier: BSD-3-Clause
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cumem_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/fd_passing.cc
  ${CMAKE_CURRENT_LIST_DIR}/ipc_memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/p2p_path.cc
  ${CMAKE_CURRENT_LIST_DIR}/p2p_create.cc
  ${CMAKE_CURRENT_LIST_DIR}/p2p_residual_norm.cc)
