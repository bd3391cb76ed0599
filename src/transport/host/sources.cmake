target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/host_path.cc
  ${CMAKE_CURRENT_LIST_DIR}/host_reduce.cc)
