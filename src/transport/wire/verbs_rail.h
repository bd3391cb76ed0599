// SPDX-License-Identifier: BSD-3-Clause
// One RDMA port the verbs wire uses, a "rail": its protection domain, the
// exchange region and the flags' shadow array registered there, a send and
// a receive CQ, and the thread watching its device's events. With an HCA
// list of several devices (a Spark's ConnectX-7 port is two PCIe
// functions), the wire opens a rail on each and spreads its peers over them.
#pragma once

#if ROCENANTE_HAVE_IBVERBS

#include <infiniband/verbs.h>

#include <string>

#include "rocenante/rocenante.h"
#include "transport/wire/verbs_device.h"
#include "transport/wire/verbs_events.h"

namespace rcn {

// What every rail registers: the region (host memory, or device memory with
// a dma-buf fd or through peermem) and the shadow array (host memory).
struct VerbsRegions {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  bool device = false;
  int dmabufFd = -1;
  bool relaxed = false;  // ask for relaxed ordering on a host region
  uint8_t* shadow = nullptr;
  size_t shadowBytes = 0;
};

struct VerbsRail {
  VerbsPort port;  // opened; closed with the rail
  ibv_gid gid{};
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  ibv_mr* shadowMr = nullptr;
  ibv_cq* sendCq = nullptr;
  ibv_cq* recvCq = nullptr;
  VerbsEventThread events;

  VerbsRail() = default;
  VerbsRail(const VerbsRail&) = delete;
  VerbsRail& operator=(const VerbsRail&) = delete;
  // The QPs on it must be gone first (the wire destroys them).
  ~VerbsRail();
  // Takes port (an opened context), queries its GID, registers the regions,
  // creates the CQs. why names the step that failed.
  rcnResult_t open(const VerbsPort& opened, const VerbsRegions& regions, int sendCqe, int recvCqe, std::string* why);
  std::string name() const { return port.device + ":" + std::to_string(port.port); }
};

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
