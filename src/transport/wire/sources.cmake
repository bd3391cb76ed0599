# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal wire.cc peer_identity.cc peer_link_watch.cc shm_wire.cc shm_segment.cc tcp_wire.cc tcp_frame.cc
  verbs_api.cc verbs_device.cc verbs_events.cc verbs_rail.cc verbs_wire.cc cuda_wire.cc device_region.cc
  verbs_select.cc)
