# The wires without hardware: verbs device/GID selection on fake sysfs trees,
# and the verbs wire driven through a mocked (software RDMA) ibverbs table.
rcn_add_test(test_verbs_select SOURCES test_verbs_select.cc LABELS cpu wire TIMEOUT 60)
rcn_add_test(test_verbs_wire SOURCES test_verbs_wire.cc LABELS cpu wire TIMEOUT 60)
rcn_add_test(test_wire_proxy_engine SOURCES test_wire_proxy_engine.cc LABELS cpu wire TIMEOUT 120)
# GPU: the proxy path (kernel + proxy thread) over shm and tcp; skips without 2 GPUs.
rcn_add_test(test_wire_proxy_gpu SOURCES test_wire_proxy_gpu.cc LABELS gpu proxy TIMEOUT 600)
rcn_add_test(test_region_placement SOURCES test_region_placement.cc LABELS cpu wire TIMEOUT 60)
rcn_add_test(test_peer_exit_watch SOURCES test_peer_exit_watch.cc LABELS cpu wire TIMEOUT 30)
