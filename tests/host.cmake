# The host backend (no GPU): across processes over the shm and tcp wires,
# fault injection, and tcp across network namespaces.
rcn_add_test(test_host_allreduce SOURCES test_host_allreduce.cc LABELS cpu host TIMEOUT 120)
