# SPDX-License-Identifier: BSD-3-Clause
# Topology discovery, classification and files: CPU only, fixture trees and
# topology files under tests/fixtures/topology (regenerate with make_fixtures.py).
rcn_add_test(test_topology
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_topology_sysfs.cc
          ${CMAKE_CURRENT_LIST_DIR}/test_topology_classify.cc
          ${CMAKE_CURRENT_LIST_DIR}/test_topology_file.cc
          ${CMAKE_CURRENT_LIST_DIR}/test_topology_gather.cc
  LABELS cpu topology TIMEOUT 120)
target_compile_definitions(test_topology PRIVATE
  RCN_TOPO_FIXTURES="${CMAKE_CURRENT_LIST_DIR}/fixtures/topology")

# rocenante-probe in network namespaces (switch = bridge, ring = veth pairs),
# one namespace per rank, bootstrapped over TCP. Needs root and `ip netns`;
# skipped (77) otherwise.
if(EXISTS ${PROJECT_SOURCE_DIR}/tools/rocenante-probe/CMakeLists.txt)  # tools/ is added after tests/
  add_test(NAME test_topology_netns
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_topology_netns.sh
            ${CMAKE_BINARY_DIR}/tools/rocenante-probe/rocenante-probe)
  set_tests_properties(test_topology_netns PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 180
    LABELS "cpu;topology;netns" RUN_SERIAL TRUE)
endif()
