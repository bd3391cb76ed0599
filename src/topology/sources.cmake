# SPDX-License-Identifier: BSD-3-Clause
target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/sysfs.cc
  ${CMAKE_CURRENT_LIST_DIR}/topo_types.cc
  ${CMAKE_CURRENT_LIST_DIR}/discover_host.cc
  ${CMAKE_CURRENT_LIST_DIR}/discover_gpu.cc
  ${CMAKE_CURRENT_LIST_DIR}/discover_rdma.cc
  ${CMAKE_CURRENT_LIST_DIR}/locality.cc
  ${CMAKE_CURRENT_LIST_DIR}/locality_hwloc.cc
  ${CMAKE_CURRENT_LIST_DIR}/serialize.cc
  ${CMAKE_CURRENT_LIST_DIR}/classify.cc
  ${CMAKE_CURRENT_LIST_DIR}/topo_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/report.cc
  ${CMAKE_CURRENT_LIST_DIR}/topology.cc)
