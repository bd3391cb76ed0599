// SPDX-License-Identifier: BSD-3-Clause
// Opening the RDMA device and port the verbs wire uses (NCCL_IB_HCA rules,
// verbs_select.h) and the process-wide steps every registration needs first.
#pragma once

#if ROCENANTE_HAVE_IBVERBS

#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "transport/wire/verbs_select.h"
#include "transport/wire/wire.h"

namespace rcn {

struct CommTopo;

struct VerbsPort {
  ibv_context* context = nullptr;
  std::string device;
  int port = 0;
  ibv_port_attr attr{};
  int maxQpWr = 0;   // the device's largest queue depth
  int gidIndex = 0;  // RoCE: the GID chosen (verbs_select.h's rules); InfiniBand: 0
};

// Opens the first device:port that the HCA filter accepts, that is ACTIVE
// and, on RoCE, has a GID the GID rules accept (ROCENANTE_IB_GID_INDEX, else
// the first that GidPolicy accepts): a port with only link-local GIDs is
// passed over. False with why (naming the filter, and each port passed over
// and why) otherwise. preferred: a device to try before the others (the
// GPU's nearest NIC on PCIe), ignored where NCCL_IB_HCA/ROCENANTE_IB_HCA is set.
bool openVerbsPort(VerbsPort* out, std::string* why, const std::string& preferred = "");

struct VerbsPortQuery {
  std::string preferred;            // as openVerbsPort's
  std::string hca;                  // an HCA list; empty: ROCENANTE_IB_HCA, else NCCL_IB_HCA
  const GidReach* reach = nullptr;  // when given, a GID whose subnet misses a peer on another host is
                                    // passed over (an explicit GID index is taken as given)
};
// The same rules, one port per device: with an HCA list, every usable
// device it names (up to kMaxVerbsRails, the rails), else one. False with
// why when there is none.
bool openVerbsPorts(std::vector<VerbsPort>* out, std::string* why, const VerbsPortQuery& query);

// What rank's GIDs must reach, from the agreed topology: the subnet of each
// of its own GIDs (an IPv4 GID's netdev prefix; an IPv6 GID counts as a
// /64, the topology not carrying IPv6 prefixes) and the usable GIDs of
// every rank on another host.
GidReach gidReachFromTopo(const CommTopo& topo, int rank);

// ibv_fork_init, once per process, before this process registers memory (as
// NCCL does): without it a fork() after registration can leave the parent's
// registered pages copied away from the NIC. A failure is logged once and
// returned; registration goes on, as NCCL's does.
bool verbsForkInit();

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
