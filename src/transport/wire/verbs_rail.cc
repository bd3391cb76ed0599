// SPDX-License-Identifier: BSD-3-Clause
#if ROCENANTE_HAVE_IBVERBS

#include "transport/wire/verbs_rail.h"

#include <cerrno>

#include "core/check.h"
#include "transport/wire/verbs_api.h"

namespace rcn {

namespace {

// A host region may be registered with relaxed ordering where rdma-core can
// pass it on (ibv_reg_mr_iova2; a device without it ignores the flag).
ibv_mr* registerRegion(ibv_pd* pd, const VerbsRegions& r, const char** what) {
  const VerbsApi& api = verbsApi();
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (r.device && r.dmabufFd >= 0) {
    *what = "ibv_reg_dmabuf_mr of the GPU-memory region";
    return api.regDmabufMr(pd, 0, r.bytes, reinterpret_cast<uint64_t>(r.base), r.dmabufFd, access);
  }
  if (r.device) {
    *what = "ibv_reg_mr of the GPU-memory region (is nvidia-peermem loaded?)";
    return api.regMr(pd, r.base, r.bytes, access);
  }
  if (r.relaxed && api.regMrIova2) {
    *what = "ibv_reg_mr_iova2 (relaxed ordering)";
    return api.regMrIova2(pd, r.base, r.bytes, reinterpret_cast<uint64_t>(r.base),
                          unsigned(access | IBV_ACCESS_RELAXED_ORDERING));
  }
  *what = "ibv_reg_mr";
  return api.regMr(pd, r.base, r.bytes, access);
}

}  // namespace

VerbsRail::~VerbsRail() {
  events.stop();
  const VerbsApi& api = verbsApi();
  if (sendCq) api.destroyCq(sendCq);
  if (recvCq) api.destroyCq(recvCq);
  if (mr) api.deregMr(mr);
  if (shadowMr) api.deregMr(shadowMr);
  if (pd) api.deallocPd(pd);
  if (port.context) api.closeDevice(port.context);
}

rcnResult_t VerbsRail::open(const VerbsPort& opened, const VerbsRegions& regions, int sendCqe, int recvCqe,
                            std::string* why) {
  const VerbsApi& api = verbsApi();
  port = opened;
  const std::string where = " (" + name() + ")";
  if (api.queryGid(port.context, uint8_t(port.port), port.gidIndex, &gid) != 0) {
    *why = errnoText("ibv_query_gid", errno) + where;
    return rcnSystemError;
  }
  pd = api.allocPd(port.context);
  if (!pd) {
    *why = errnoText("ibv_alloc_pd", errno) + where;
    return rcnSystemError;
  }
  if (regions.device && regions.dmabufFd >= 0 && !api.regDmabufMr) {
    *why = "verbs wire: this build's rdma-core cannot register a dma-buf (ibv_reg_dmabuf_mr)";
    return rcnInvalidUsage;
  }
  const char* what = "";
  mr = registerRegion(pd, regions, &what);
  if (!mr) {
    *why = errnoText(what, errno) + where;
    return rcnSystemError;
  }
  shadowMr = api.regMr(pd, regions.shadow, regions.shadowBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!shadowMr) {
    *why = errnoText("ibv_reg_mr of the flags' shadow array", errno) + where;
    return rcnSystemError;
  }
  sendCq = api.createCq(port.context, sendCqe, nullptr, nullptr, 0);
  recvCq = api.createCq(port.context, recvCqe, nullptr, nullptr, 0);
  if (!sendCq || !recvCq) {
    *why = errnoText("ibv_create_cq", errno) + where;
    return rcnSystemError;
  }
  return rcnSuccess;
}

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
