// SPDX-License-Identifier: BSD-3-Clause
// Every libibverbs call the verbs wire makes goes through this table, so
// tests can replace it: assert what is posted (opcode, flags, inline length,
// remote address and key, payload-before-flag order, signaling cadence) and
// inject failures (create_qp failing, a QP in error, an error completion).
// The default table calls the real library, opened at run time
// (verbs_api.cc) so that librocenante.so loads where rdma-core is absent.
#pragma once

#if ROCENANTE_HAVE_IBVERBS

#include <infiniband/verbs.h>

#include <string>

namespace rcn {

struct VerbsApi {
  ibv_device** (*getDeviceList)(int* count);
  void (*freeDeviceList)(ibv_device** list);
  const char* (*getDeviceName)(ibv_device* device);
  ibv_context* (*openDevice)(ibv_device* device);
  int (*closeDevice)(ibv_context* context);
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr);
  int (*queryPort)(ibv_context* context, uint8_t port, ibv_port_attr* attr);
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*allocPd)(ibv_context* context);
  int (*deallocPd)(ibv_pd* pd);
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access);
  // Null where rdma-core predates dma-buf registration (before v34).
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
  // Null before rdma-core 29; the only entry that passes optional access
  // flags (IBV_ACCESS_RELAXED_ORDERING) through to the provider.
  ibv_mr* (*regMrIova2)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access);
  int (*deregMr)(ibv_mr* mr);
  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int compVector);
  int (*destroyCq)(ibv_cq* cq);
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*destroyQp)(ibv_qp* qp);
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*queryQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init);
  int (*postSend)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
  int (*postRecv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
  int (*pollCq)(ibv_cq* cq, int entries, ibv_wc* wc);
  const char* (*wcStatusStr)(ibv_wc_status status);
  const char* (*portStateStr)(ibv_port_state state);
  // Makes registered memory safe across fork() (MADV_DONTFORK), or nothing
  // where the kernel copies pinned pages on fork; before any registration.
  int (*forkInit)();
  // The context's asynchronous events (a QP or port gone bad); the wire
  // waits on context->async_fd, so a read never blocks.
  int (*getAsyncEvent)(ibv_context* context, ibv_async_event* event);
  void (*ackAsyncEvent)(ibv_async_event* event);
  const char* (*eventTypeStr)(ibv_event_type type);
};

// Opens soname and resolves every entry (regDmabufMr may stay null). On
// failure *out is all null and why names the library or the missing symbols.
bool loadVerbsApi(const char* soname, VerbsApi* out, std::string* why);

// The table in use (the real library unless a test replaced it).
const VerbsApi& verbsApi();
// False when the table in use is empty (libibverbs.so.1 did not load); why
// (optional) then says why.
bool verbsApiUsable(std::string* why);
// Tests: replace the table; nullptr restores the real one.
void setVerbsApiForTest(const VerbsApi* api);
// The real library's table, loaded on first use; all null where it did not
// load (tests copy it and override entries).
const VerbsApi& realVerbsApi();

// Test hook: the sysfs directory the GID search reads (default /sys/class/infiniband).
void setVerbsSysfsRootForTest(const char* root);

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
