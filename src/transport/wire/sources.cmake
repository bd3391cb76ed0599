# SPDX-License-Identifier: BSD-3-Clause
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/peer_identity.cc
  ${CMAKE_CURRENT_LIST_DIR}/shm_wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/verbs_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/verbs_device.cc
  ${CMAKE_CURRENT_LIST_DIR}/verbs_events.cc
  ${CMAKE_CURRENT_LIST_DIR}/verbs_rail.cc
  ${CMAKE_CURRENT_LIST_DIR}/verbs_wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/device_region.cc)
target_sources(rocenante_internal PRIVATE ${CMAKE_CURRENT_LIST_DIR}/verbs_select.cc)
