// SPDX-License-Identifier: BSD-3-Clause
// libibverbs is opened with dlopen on first use, as NCCL does, never linked:
// a DT_NEEDED entry would keep librocenante.so from loading at all on a
// machine without rdma-core. There the verbs path is simply unavailable.
#if ROCENANTE_HAVE_IBVERBS

#include "transport/wire/verbs_api.h"

#include <dlfcn.h>

#include <atomic>
#include <type_traits>

#include "core/log.h"

namespace rcn {

namespace {

// verbs.h defines these inline through the context's ops: no symbol to resolve.
int postSendInline(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) { return ibv_post_send(qp, wr, bad); }
int pollCqInline(ibv_cq* cq, int n, ibv_wc* wc) { return ibv_poll_cq(cq, n, wc); }
int postRecvInline(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); }

template <typename Fn>
void resolve(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (!*slot) *missing += (missing->empty() ? "" : ", ") + std::string(name);
}

struct RealApi {
  VerbsApi api{};
  std::string why;
};

const RealApi& realApi() {
  // Never destroyed: a communicator torn down from a static destructor may still ask.
  static const RealApi& real = *[] {
    auto* r = new RealApi;
    if (!loadVerbsApi("libibverbs.so.1", &r->api, &r->why))
      RCN_INFO(RCN_LOG_TRANSPORT, "%s: RDMA verbs unavailable (verbs wire, port check)", r->why.c_str());
    return r;
  }();
  return real;
}

std::atomic<const VerbsApi*> gTestApi{nullptr};

}  // namespace

bool loadVerbsApi(const char* soname, VerbsApi* out, std::string* why) {
  *out = VerbsApi{};
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = dlerror();
    std::string text = error ? error : "cannot be loaded";
    const std::string prefix = std::string(soname) + ": ";
    if (text.rfind(prefix, 0) == 0) text.erase(0, prefix.size());  // the loader repeats the name
    *why = std::string(soname) + " not loaded (" + text + ")";
    return false;
  }
  VerbsApi a{};
  std::string missing;
  // decltype names the declaration without referencing the symbol, so the
  // table's types are checked against verbs.h at no link cost.
#define RCN_RESOLVE(field, symbol)                                                      \
  static_assert(std::is_same_v<decltype(a.field), decltype(&::symbol)>, #symbol);       \
  resolve(handle, #symbol, &a.field, &missing)
  RCN_RESOLVE(getDeviceList, ibv_get_device_list);
  RCN_RESOLVE(freeDeviceList, ibv_free_device_list);
  RCN_RESOLVE(getDeviceName, ibv_get_device_name);
  RCN_RESOLVE(openDevice, ibv_open_device);
  RCN_RESOLVE(closeDevice, ibv_close_device);
  RCN_RESOLVE(queryDevice, ibv_query_device);
  RCN_RESOLVE(queryGid, ibv_query_gid);
  RCN_RESOLVE(allocPd, ibv_alloc_pd);
  RCN_RESOLVE(deallocPd, ibv_dealloc_pd);
  RCN_RESOLVE(regMr, ibv_reg_mr);  // the exported function behind verbs.h's macro
  RCN_RESOLVE(deregMr, ibv_dereg_mr);
  RCN_RESOLVE(createCq, ibv_create_cq);
  RCN_RESOLVE(destroyCq, ibv_destroy_cq);
  RCN_RESOLVE(createQp, ibv_create_qp);
  RCN_RESOLVE(destroyQp, ibv_destroy_qp);
  RCN_RESOLVE(modifyQp, ibv_modify_qp);
  RCN_RESOLVE(queryQp, ibv_query_qp);
  RCN_RESOLVE(wcStatusStr, ibv_wc_status_str);
  RCN_RESOLVE(portStateStr, ibv_port_state_str);
  RCN_RESOLVE(forkInit, ibv_fork_init);
  RCN_RESOLVE(getAsyncEvent, ibv_get_async_event);
  RCN_RESOLVE(ackAsyncEvent, ibv_ack_async_event);
  RCN_RESOLVE(eventTypeStr, ibv_event_type_str);
#undef RCN_RESOLVE
  // The exported ibv_query_port (behind verbs.h's macro) is declared with the
  // compat struct, a prefix of ibv_port_attr; NCCL calls it the same way.
  resolve(handle, "ibv_query_port", &a.queryPort, &missing);
  if (!missing.empty()) {
    *why = std::string(soname) + " lacks " + missing;
    dlclose(handle);
    return false;
  }
  // Optional: rdma-core 34 and later.
  a.regDmabufMr = reinterpret_cast<decltype(a.regDmabufMr)>(dlsym(handle, "ibv_reg_dmabuf_mr"));
  a.regMrIova2 = reinterpret_cast<decltype(a.regMrIova2)>(dlsym(handle, "ibv_reg_mr_iova2"));
  a.postSend = postSendInline;
  a.pollCq = pollCqInline;
  a.postRecv = postRecvInline;
  *out = a;  // the handle stays open for the process's life
  return true;
}

const VerbsApi& verbsApi() {
  const VerbsApi* test = gTestApi.load(std::memory_order_acquire);
  return test ? *test : realApi().api;
}

bool verbsApiUsable(std::string* why) {
  if (verbsApi().getDeviceList) return true;
  if (why) *why = realApi().why.empty() ? "the verbs table is empty" : realApi().why;
  return false;
}

const VerbsApi& realVerbsApi() { return realApi().api; }
void setVerbsApiForTest(const VerbsApi* api) { gTestApi.store(api, std::memory_order_release); }

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
