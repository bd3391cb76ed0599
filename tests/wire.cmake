# The wires without hardware: verbs device/GID selection on fake sysfs trees,
# and the verbs wire driven through a mocked (software RDMA) ibverbs table.
rcn_add_test(test_verbs_select SOURCES test_verbs_select.cc LABELS cpu wire TIMEOUT 60)
rcn_add_test(test_verbs_wire SOURCES test_verbs_wire.cc LABELS cpu wire TIMEOUT 60)
