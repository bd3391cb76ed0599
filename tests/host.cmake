# SPDX-License-Identifier: BSD-3-Clause
# The host backend (no GPU): across processes over the shm and tcp wires,
# fault injection, and tcp across network namespaces.
rcn_add_test(test_host_reduce SOURCES test_host_reduce.cc LABELS cpu host TIMEOUT 60)
rcn_add_test(test_host_allreduce SOURCES test_host_allreduce.cc LABELS cpu host TIMEOUT 120)
rcn_add_test(test_host_faults SOURCES test_host_faults.cc LABELS cpu host TIMEOUT 120)
rcn_add_test(test_host_netns SOURCES test_host_netns.cc LABELS cpu host TIMEOUT 90)
rcn_add_test(test_host_api SOURCES test_host_api.cc LABELS cpu host TIMEOUT 120)
rcn_add_test(test_host_launch SOURCES test_host_launch.cc LABELS cpu host TIMEOUT 60)
rcn_add_test(test_host_collectives SOURCES test_host_collectives.cc LABELS cpu host TIMEOUT 180)
rcn_add_test(test_residual_norm_host SOURCES test_residual_norm_host.cc LABELS cpu host TIMEOUT 120)
rcn_add_test(test_soak_host SOURCES test_soak_host.cc LABELS cpu host soak TIMEOUT 1200)
