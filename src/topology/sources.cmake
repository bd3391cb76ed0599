# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal sysfs.cc topo_types.cc discover_host.cc discover_gpu.cc
  discover_rdma.cc locality.cc locality_hwloc.cc serialize.cc classify.cc topo_file.cc report.cc
  topology.cc)
