# SPDX-License-Identifier: BSD-3-Clause
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/log.cc
  ${CMAKE_CURRENT_LIST_DIR}/params.cc
  ${CMAKE_CURRENT_LIST_DIR}/nccl_lib.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm_collectives.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast_path.cc
  ${CMAKE_CURRENT_LIST_DIR}/device_drain.cc
  ${CMAKE_CURRENT_LIST_DIR}/device_memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/api.cc
  ${CMAKE_CURRENT_LIST_DIR}/api_collectives.cc
  ${CMAKE_CURRENT_LIST_DIR}/api_launch.cc
  ${CMAKE_CURRENT_LIST_DIR}/rank_threads.cc
  ${CMAKE_CURRENT_LIST_DIR}/policy.cc)
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/socket.cc
  ${CMAKE_CURRENT_LIST_DIR}/auth.cc
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap.cc
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap_tcp.cc
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap_env.cc
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap_key.cc
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap_local.cc)
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/user_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/policy_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/selftest.cc
  ${CMAKE_CURRENT_LIST_DIR}/selftest_support.cc
  ${CMAKE_CURRENT_LIST_DIR}/selftest_collectives.cc
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap_nccl.cc)
target_sources(rocenante_internal PRIVATE ${CMAKE_CURRENT_LIST_DIR}/launch_env.cc)
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/residual_norm.cc
  ${CMAKE_CURRENT_LIST_DIR}/residual_norm_host.cc
  ${CMAKE_CURRENT_LIST_DIR}/api_residual_norm.cc)
