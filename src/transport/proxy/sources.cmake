target_sources(rocenante_internal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/proxy_path.cc)
