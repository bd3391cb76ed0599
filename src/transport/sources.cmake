# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal select.cc call_check.cc)
include(${CMAKE_CURRENT_LIST_DIR}/p2p/sources.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/proxy/sources.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/wire/sources.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/host/sources.cmake OPTIONAL)
