# SPDX-License-Identifier: BSD-3-Clause
rcn_add_test(test_params SOURCES test_params.cc LABELS cpu)
rcn_add_test(test_log SOURCES test_log.cc LABELS cpu)
rcn_add_test(test_user_file SOURCES test_user_file.cc LABELS cpu TIMEOUT 30)
target_compile_definitions(test_params PRIVATE RCN_PARAMS_DOC="${CMAKE_SOURCE_DIR}/docs/PARAMS.md")
rcn_add_test(test_api SOURCES test_api.cc LABELS cpu)

# The installed package works for a user's project (find_package and pkg-config).
add_test(NAME test_install COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(test_install PROPERTIES LABELS cpu TIMEOUT 300)
