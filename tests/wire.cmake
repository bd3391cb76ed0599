# SPDX-License-Identifier: BSD-3-Clause
# The wires without hardware: verbs device/GID selection on fake sysfs trees,
# and the verbs wire driven through a mocked (software RDMA) ibverbs table.
rcn_add_test(test_verbs_select SOURCES test_verbs_select.cc LABELS cpu wire TIMEOUT 60)
rcn_add_test(test_verbs_fabric SOURCES test_verbs_fabric.cc verbs_mock.cc LABELS cpu wire TIMEOUT 60)
rcn_add_test(test_verbs_wire SOURCES test_verbs_wire.cc verbs_mock.cc LABELS cpu wire TIMEOUT 120)
rcn_add_test(test_wire_proxy_engine SOURCES test_wire_proxy_engine.cc verbs_mock.cc LABELS cpu wire TIMEOUT 120)
# GPU: the proxy path (kernel + proxy thread) over shm and tcp; skips without 2 GPUs.
rcn_add_test(test_wire_proxy_gpu SOURCES test_wire_proxy_gpu.cc LABELS gpu proxy TIMEOUT 600)
rcn_add_test(test_region_placement SOURCES test_region_placement.cc LABELS cpu wire TIMEOUT 60)
rcn_add_test(test_peer_exit_watch SOURCES test_peer_exit_watch.cc LABELS cpu wire TIMEOUT 30)
rcn_add_test(test_wire_goodbye SOURCES test_wire_goodbye.cc LABELS cpu wire TIMEOUT 120)
# libibverbs is opened at run time: the loader, and no DT_NEEDED on it in
# librocenante.so (skipped, 77, without readelf and objdump).
rcn_add_test(test_verbs_api SOURCES test_verbs_api.cc LABELS cpu wire TIMEOUT 30)
add_test(NAME test_no_ibverbs_needed
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_no_ibverbs_needed.sh $<TARGET_FILE:rocenante>)
set_tests_properties(test_no_ibverbs_needed PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 30 LABELS "cpu;wire")
# rocenante-probe --rdma-check's logic on the software NIC.
if(EXISTS ${PROJECT_SOURCE_DIR}/tools/rocenante-probe/probe_rdma_check.cc)
  rcn_add_test(test_verbs_rdma_check
    SOURCES test_verbs_rdma_check.cc verbs_mock.cc ${PROJECT_SOURCE_DIR}/tools/rocenante-probe/probe_rdma_check.cc
    LABELS cpu wire TIMEOUT 120)
  target_include_directories(test_verbs_rdma_check PRIVATE ${PROJECT_SOURCE_DIR}/tools/rocenante-probe)
endif()
