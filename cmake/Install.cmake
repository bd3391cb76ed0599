# SPDX-License-Identifier: BSD-3-Clause
include(CMakePackageConfigHelpers)

install(TARGETS rocenante EXPORT rocenanteTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/rocenante DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT rocenanteTargets NAMESPACE rocenante::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rocenante)

configure_package_config_file(cmake/rocenanteConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/rocenanteConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rocenante)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/rocenanteConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rocenanteConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/rocenanteConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rocenante)

file(RELATIVE_PATH RCN_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(cmake/rocenante.pc.in ${CMAKE_CURRENT_BINARY_DIR}/rocenante.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rocenante.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
