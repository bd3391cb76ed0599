// SPDX-License-Identifier: BSD-3-Clause
// The software NIC of verbs_mock.h. One lock guards everything; the NIC
// thread takes it once per tick (about every 20 us) and runs what is due.
#if ROCENANTE_HAVE_IBVERBS

#include "verbs_mock.h"

#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace rcn::test::mock {

namespace {

using Clock = std::chrono::steady_clock;

struct Mr {
  ibv_mr* mr;
  uint8_t* addr;
  size_t length;
  int access;
};

// A completion and, for a send, the send-queue sequence number it frees up to.
struct Cqe {
  ibv_wc wc;
  struct Qp* qp;
  uint64_t sqSeq;
};

struct Cq {
  ibv_cq* cq;
  ibv_context* context;
  int depth;
  std::deque<Cqe> entries;
};

struct Request {
  uint64_t seq;
  uint64_t wrId;
  ibv_wr_opcode opcode;
  bool signaled;
  std::vector<uint8_t> inlineBytes;  // copied at post time
  bool isInline;
  std::vector<ibv_sge> sges;
  uint64_t remoteAddr;
  uint32_t rkey;
  uint32_t imm;  // network order, as posted
  Clock::time_point due;
  Clock::time_point failAt{};  // set once the peer is found unreachable
};

// Bytes (at most 8, one aligned word or part of one) waiting to become visible.
struct Landing {
  uint8_t* dst;
  uint8_t bytes[8];
  int n;
  uint64_t seq;  // of the request that wrote them
};

// A completion waiting until every landing of its request and the earlier
// ones is visible, and its own delay.
struct Pending {
  uint64_t seq;
  Cq* cq;
  Cqe cqe;
  Clock::time_point due;
};

struct Qp {
  ibv_qp* qp;
  ibv_context* context;
  int device;
  ibv_pd* pd;
  Cq* sendCq;
  Cq* recvCq;
  ibv_qp_cap cap;
  ibv_qp_state state = IBV_QPS_RESET;
  int port = 0;
  int accessFlags = 0;
  uint32_t destQpn = 0;
  int timeout = 0, retryCnt = 0;
  uint64_t nextSeq = 1;   // of the next request posted
  uint64_t freedSeq = 0;  // send-queue slots up to here are free again
  std::deque<Request> sendQueue;
  std::deque<uint64_t> receives;  // wr_ids
  std::vector<Landing> landings;
  std::deque<Pending> pending;
  Clock::time_point lastDue{};
};

struct Context {
  ibv_context* context;
  int device;
  std::deque<ibv_async_event> events;
};

struct State {
  std::mutex mu;
  std::vector<MockDevice> devices;
  std::vector<std::unique_ptr<ibv_device>> deviceStructs;
  std::vector<ibv_device*> list;
  MockOptions options;
  std::mt19937_64 rng{1};
  std::map<ibv_context*, Context> contexts;
  std::map<uint32_t, Mr> mrByLkey, mrByRkey;
  std::map<ibv_cq*, std::unique_ptr<Cq>> cqs;
  std::map<uint32_t, std::unique_ptr<Qp>> qps;  // by number
  uint32_t nextKey = 0x100, nextQpn = 0x40;
  ibv_wc_status injected = IBV_WC_SUCCESS;
  int failCreateQpAt = -1, createQpCalls = 0;
  std::vector<MockPosted> posted;
  std::vector<MockTransition> transitions;
  std::vector<ibv_qp_init_attr> qpInits;
  std::vector<std::string> qpDevices;
  std::vector<int> gidQueries;
  std::vector<std::string> opened;
  std::vector<int> mrAccess;
  std::vector<void*> regMrAddrs;
  std::vector<DmabufReg> dmabufRegs;
  uint64_t badTransitions = 0, cqOverruns = 0;
  std::atomic<uint64_t> queryQpCalls{0}, forkInitCalls{0};
  std::atomic<bool> running{false};
  std::thread thread;
};

State& S() {
  static State* s = new State;  // never destroyed: wires may outlive a test's statics
  return *s;
}

std::vector<MockDevice> defaultDevices() {
  return {{"mlx5_0", {MockPort{}, MockPort{IBV_PORT_DOWN}}}, {"mlx5_1", {MockPort{}, MockPort{IBV_PORT_DOWN}}}};
}

int deviceIndex(ibv_device* d) {
  for (size_t i = 0; i < S().list.size(); ++i)
    if (S().list[i] == d) return int(i);
  return -1;
}

const MockPort* portOf(int device, int port) {
  if (device < 0 || device >= int(S().devices.size())) return nullptr;
  const auto& ports = S().devices[device].ports;
  return port >= 1 && port <= int(ports.size()) ? &ports[port - 1] : nullptr;
}

void raiseEvent(ibv_context* context, const ibv_async_event& event) {
  auto it = S().contexts.find(context);
  if (it == S().contexts.end()) return;
  it->second.events.push_back(event);
  const uint64_t one = 1;
  if (write(context->async_fd, &one, sizeof one) != ssize_t(sizeof one)) std::perror("mock NIC: eventfd write");
}

// A full CQ overruns: the entry is lost and the CQ's context hears of it.
void pushCqe(Cq* cq, const Cqe& cqe) {
  if (int(cq->entries.size()) >= cq->depth) {
    ++S().cqOverruns;
    ibv_async_event event{};
    event.event_type = IBV_EVENT_CQ_ERR;
    event.element.cq = cq->cq;
    raiseEvent(cq->context, event);
    return;
  }
  cq->entries.push_back(cqe);
}

Cqe sendCqe(Qp& qp, const Request& r, ibv_wc_status status) {
  Cqe c{};
  c.wc.wr_id = r.wrId;
  c.wc.status = status;
  c.wc.opcode = IBV_WC_RDMA_WRITE;
  c.wc.qp_num = qp.qp->qp_num;
  c.qp = &qp;
  c.sqSeq = r.seq;
  return c;
}

// The QP goes to the error state: what it still holds completes with a flush error.
void toError(Qp& qp) {
  qp.state = IBV_QPS_ERR;
  for (const Request& r : qp.sendQueue) pushCqe(qp.sendCq, sendCqe(qp, r, IBV_WC_WR_FLUSH_ERR));
  qp.sendQueue.clear();
  for (uint64_t id : qp.receives) {
    Cqe c{};
    c.wc.wr_id = id;
    c.wc.status = IBV_WC_WR_FLUSH_ERR;
    c.wc.qp_num = qp.qp->qp_num;
    pushCqe(qp.recvCq, c);
  }
  qp.receives.clear();
}

// The request fails now: an error completion (always, signaled or not), the
// QP to error. Landings already made stay.
void failRequest(Qp& qp, ibv_wc_status status) {
  Request r = qp.sendQueue.front();
  qp.sendQueue.pop_front();
  pushCqe(qp.sendCq, sendCqe(qp, r, status));
  toError(qp);
}

const Mr* findMr(const std::map<uint32_t, Mr>& byKey, uint32_t key, ibv_pd* pd, uint64_t addr, size_t length) {
  auto it = byKey.find(key);
  if (it == byKey.end() || it->second.mr->pd != pd) return nullptr;
  const uint64_t base = reinterpret_cast<uint64_t>(it->second.addr);
  if (addr < base || addr + length > base + it->second.length) return nullptr;
  return &it->second;
}

bool reachable(const Qp& qp, const Qp* dest) {
  const MockPort* mine = portOf(qp.device, qp.port);
  if (!mine || mine->state != IBV_PORT_ACTIVE || !dest) return false;
  const MockPort* theirs = portOf(dest->device, dest->port);
  return theirs && theirs->state == IBV_PORT_ACTIVE && (dest->state == IBV_QPS_RTR || dest->state == IBV_QPS_RTS);
}

std::chrono::nanoseconds retryTimeout(const Qp& qp) {
  const double seconds = 4.096e-6 * std::ldexp(1.0, qp.timeout) * (qp.retryCnt + 1) / S().options.virtualSpeedup;
  return std::chrono::nanoseconds(int64_t(seconds * 1e9));
}

// The data as the NIC reads it now: inline bytes, or the local MRs' bytes.
bool gather(Qp& qp, const Request& r, std::vector<uint8_t>* out) {
  if (r.isInline) {
    *out = r.inlineBytes;
    return true;
  }
  out->clear();
  for (const ibv_sge& sge : r.sges) {
    const Mr* mr = findMr(S().mrByLkey, sge.lkey, qp.pd, sge.addr, sge.length);
    if (!mr) return false;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(sge.addr);
    out->insert(out->end(), src, src + sge.length);
  }
  return true;
}

// Splits the write at 8-byte boundaries of the destination; strict mode
// stores now in order, weak mode leaves the pieces to land later.
void write(Qp& qp, uint8_t* dst, const std::vector<uint8_t>& data, uint64_t seq) {
  size_t done = 0;
  while (done < data.size()) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(dst + done);
    const size_t n = std::min<size_t>(8 - at % 8, data.size() - done);
    Landing l{dst + done, {}, int(n), seq};
    std::memcpy(l.bytes, data.data() + done, n);
    qp.landings.push_back(l);
    done += n;
  }
}

void land(const Landing& l) {
  if (l.n == 8) {
    uint64_t word;
    std::memcpy(&word, l.bytes, 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(l.dst), word, __ATOMIC_RELAXED);
  } else {
    for (int i = 0; i < l.n; ++i) __atomic_store_n(l.dst + i, l.bytes[i], __ATOMIC_RELAXED);
  }
}

enum class Ran { Done, Blocked, Failed };

Ran execute(Qp& qp, Clock::time_point now) {
  Request& r = qp.sendQueue.front();
  auto destIt = S().qps.find(qp.destQpn);
  Qp* dest = destIt == S().qps.end() ? nullptr : destIt->second.get();
  if (!reachable(qp, dest)) {
    if (r.failAt == Clock::time_point{}) r.failAt = now + retryTimeout(qp);
    if (now < r.failAt) return Ran::Blocked;
    failRequest(qp, IBV_WC_RETRY_EXC_ERR);
    return Ran::Failed;
  }
  if (S().injected != IBV_WC_SUCCESS) {
    failRequest(qp, S().injected);
    return Ran::Failed;
  }
  std::vector<uint8_t> data;
  if (!gather(qp, r, &data)) {
    failRequest(qp, IBV_WC_LOC_PROT_ERR);
    return Ran::Failed;
  }
  const Mr* target = data.empty() ? nullptr : findMr(S().mrByRkey, r.rkey, dest->pd, r.remoteAddr, data.size());
  if ((!data.empty() && (!target || !(target->access & IBV_ACCESS_REMOTE_WRITE))) ||
      !(dest->accessFlags & IBV_ACCESS_REMOTE_WRITE)) {
    failRequest(qp, IBV_WC_REM_ACCESS_ERR);
    return Ran::Failed;
  }
  const bool withImm = r.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (withImm && dest->receives.empty()) return Ran::Blocked;  // RNR: retried until a receive is posted
  write(qp, reinterpret_cast<uint8_t*>(r.remoteAddr), data, r.seq);
  std::uniform_int_distribution<int> delay(0, S().options.maxDelayUs);
  if (withImm) {
    Cqe c{};
    c.wc.wr_id = dest->receives.front();
    dest->receives.pop_front();
    c.wc.status = IBV_WC_SUCCESS;
    c.wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    c.wc.wc_flags = IBV_WC_WITH_IMM;
    c.wc.imm_data = r.imm;
    c.wc.byte_len = uint32_t(data.size());
    c.wc.qp_num = dest->qp->qp_num;
    c.wc.src_qp = qp.qp->qp_num;
    c.qp = dest;
    qp.pending.push_back({r.seq, dest->recvCq, c, now + std::chrono::microseconds(delay(S().rng))});
  }
  if (r.signaled)
    qp.pending.push_back(
        {r.seq, qp.sendCq, sendCqe(qp, r, IBV_WC_SUCCESS), now + std::chrono::microseconds(delay(S().rng))});
  qp.sendQueue.pop_front();
  return Ran::Done;
}

// Weak ordering: a random quarter of the waiting pieces land, in random
// order, across requests; but never over a newer write to the same bytes (a
// NIC without relaxed ordering keeps writes to one address in order).
void landSome(Qp& qp) {
  if (!S().options.weakOrdering) {
    for (const Landing& l : qp.landings) land(l);
    qp.landings.clear();
    return;
  }
  std::map<uint8_t*, uint64_t> oldest;  // per address, the oldest request still to land there
  for (const Landing& l : qp.landings) {
    auto it = oldest.find(l.dst);
    if (it == oldest.end() || l.seq < it->second) oldest[l.dst] = l.seq;
  }
  std::shuffle(qp.landings.begin(), qp.landings.end(), S().rng);
  std::bernoulli_distribution now(0.25);
  std::vector<Landing> kept;
  for (const Landing& l : qp.landings) {
    if (l.seq == oldest[l.dst] && now(S().rng)) land(l);
    else kept.push_back(l);
  }
  qp.landings.swap(kept);
}

void deliver(Qp& qp, Clock::time_point now) {
  uint64_t oldestWaiting = UINT64_MAX;
  for (const Landing& l : qp.landings) oldestWaiting = std::min(oldestWaiting, l.seq);
  while (!qp.pending.empty() && qp.pending.front().seq < oldestWaiting && qp.pending.front().due <= now) {
    pushCqe(qp.pending.front().cq, qp.pending.front().cqe);
    qp.pending.pop_front();
  }
}

void tick() {
  std::lock_guard<std::mutex> lock(S().mu);
  const Clock::time_point now = Clock::now();
  for (auto& [qpn, qpPtr] : S().qps) {
    Qp& qp = *qpPtr;
    while (qp.state == IBV_QPS_RTS && !qp.sendQueue.empty() && qp.sendQueue.front().due <= now)
      if (execute(qp, now) != Ran::Done) break;
    landSome(qp);
    deliver(qp, now);
  }
}

// ---- the table ----------------------------------------------------------------

ibv_device** mGetDeviceList(int* n) {
  std::lock_guard<std::mutex> lock(S().mu);
  *n = int(S().devices.size());
  return S().list.data();
}
void mFreeDeviceList(ibv_device**) {}
const char* mGetDeviceName(ibv_device* d) {
  std::lock_guard<std::mutex> lock(S().mu);
  const int i = deviceIndex(d);
  return i < 0 ? nullptr : S().devices[i].name.c_str();
}
ibv_context* mOpenDevice(ibv_device* d) {
  std::lock_guard<std::mutex> lock(S().mu);
  const int i = deviceIndex(d);
  if (i < 0) return nullptr;
  auto* c = new ibv_context{};
  c->device = d;
  c->async_fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  S().contexts[c] = Context{c, i, {}};
  S().opened.push_back(S().devices[i].name);
  return c;
}
int mCloseDevice(ibv_context* c) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().contexts.erase(c);
  close(c->async_fd);
  delete c;
  return 0;
}
int mQueryDevice(ibv_context* c, ibv_device_attr* a) {
  std::lock_guard<std::mutex> lock(S().mu);
  *a = ibv_device_attr{};
  a->phys_port_cnt = uint8_t(S().devices[S().contexts.at(c).device].ports.size());
  a->max_qp_wr = 16384;
  a->max_cqe = 1 << 22;
  return 0;
}
int mQueryPort(ibv_context* c, uint8_t port, ibv_port_attr* a) {
  std::lock_guard<std::mutex> lock(S().mu);
  const int device = S().contexts.at(c).device;
  const MockPort* p = portOf(device, port);
  if (!p) return EINVAL;
  *a = ibv_port_attr{};
  a->state = p->state;
  a->link_layer = p->linkLayer;
  a->active_mtu = p->mtu;
  a->lid = uint16_t(p->linkLayer == IBV_LINK_LAYER_INFINIBAND ? 1 + device : 0);
  return 0;
}
int mQueryGid(ibv_context* c, uint8_t, int index, ibv_gid* gid) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().gidQueries.push_back(index);
  *gid = ibv_gid{};
  gid->raw[10] = gid->raw[11] = 0xff;  // ::ffff:10.0.0.<device + 1>
  gid->raw[12] = 10;
  gid->raw[15] = uint8_t(1 + S().contexts.at(c).device);
  return 0;
}
ibv_pd* mAllocPd(ibv_context* c) {
  auto* pd = new ibv_pd{};
  pd->context = c;
  return pd;
}
int mDeallocPd(ibv_pd* pd) {
  delete pd;
  return 0;
}
ibv_mr* newMr(ibv_pd* pd, void* addr, size_t len, int access) {
  auto* mr = new ibv_mr{};
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = len;
  mr->lkey = S().nextKey++;
  mr->rkey = S().nextKey++;
  const Mr rec{mr, static_cast<uint8_t*>(addr), len, access};
  S().mrByLkey[mr->lkey] = rec;
  S().mrByRkey[mr->rkey] = rec;
  S().mrAccess.push_back(access);
  return mr;
}
ibv_mr* mRegMr(ibv_pd* pd, void* addr, size_t len, int access) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().regMrAddrs.push_back(addr);
  return newMr(pd, addr, len, access);
}
ibv_mr* mRegMrIova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned access) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (iova != reinterpret_cast<uint64_t>(addr)) return nullptr;  // the wire maps iova = address
  S().regMrAddrs.push_back(addr);
  return newMr(pd, addr, len, int(access));
}
// The fake device memory is host memory, so the iova is also where to write.
ibv_mr* mRegDmabufMr(ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().dmabufRegs.push_back({offset, len, iova, fd});
  return newMr(pd, reinterpret_cast<void*>(iova), len, access);
}
int mDeregMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(S().mu);
  // Writes not yet landed there are lost (the memory may be unmapped next).
  uint8_t* begin = static_cast<uint8_t*>(mr->addr);
  for (auto& [n, qp] : S().qps)
    qp->landings.erase(std::remove_if(qp->landings.begin(), qp->landings.end(),
                                      [&](const Landing& l) { return l.dst >= begin && l.dst < begin + mr->length; }),
                       qp->landings.end());
  S().mrByLkey.erase(mr->lkey);
  S().mrByRkey.erase(mr->rkey);
  delete mr;
  return 0;
}
ibv_cq* mCreateCq(ibv_context* c, int cqe, void*, ibv_comp_channel*, int) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto* cq = new ibv_cq{};
  cq->context = c;
  cq->cqe = cqe;
  S().cqs[cq] = std::make_unique<Cq>(Cq{cq, c, cqe, {}});
  return cq;
}
int mDestroyCq(ibv_cq* cq) {
  std::lock_guard<std::mutex> lock(S().mu);
  for (auto& [n, qp] : S().qps)
    if (qp->sendCq->cq == cq || qp->recvCq->cq == cq) return EBUSY;
  S().cqs.erase(cq);
  delete cq;
  return 0;
}
ibv_qp* mCreateQp(ibv_pd* pd, ibv_qp_init_attr* init) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().createQpCalls++ == S().failCreateQpAt || init->qp_type != IBV_QPT_RC) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* qp = new ibv_qp{};
  qp->context = pd->context;
  qp->pd = pd;
  qp->qp_num = S().nextQpn++;
  qp->qp_type = init->qp_type;
  init->cap.max_inline_data = std::min<uint32_t>(init->cap.max_inline_data, 220);
  auto rec = std::make_unique<Qp>();
  rec->qp = qp;
  rec->context = pd->context;
  rec->device = S().contexts.at(pd->context).device;
  rec->pd = pd;
  rec->sendCq = S().cqs.at(init->send_cq).get();
  rec->recvCq = S().cqs.at(init->recv_cq).get();
  rec->cap = init->cap;
  S().qps[qp->qp_num] = std::move(rec);
  S().qpInits.push_back(*init);
  S().qpDevices.push_back(S().devices[S().contexts.at(pd->context).device].name);
  return qp;
}
int mDestroyQp(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(S().mu);
  // Its completions already in a CQ stay there, and receives bound for it
  // are dropped; nothing refers to the QP after this.
  for (auto& [p, cq] : S().cqs)
    for (Cqe& c : cq->entries)
      if (c.qp && c.qp->qp == qp) c.qp = nullptr;
  for (auto& [n, other] : S().qps)
    other->pending.erase(std::remove_if(other->pending.begin(), other->pending.end(),
                                        [&](const Pending& p) { return p.cqe.qp && p.cqe.qp->qp == qp; }),
                         other->pending.end());
  S().qps.erase(qp->qp_num);
  delete qp;
  return 0;
}

// The attribute mask each transition must carry (required; optional ones ignored).
bool transitionAllowed(ibv_qp_state from, ibv_qp_state to, int mask) {
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return mask == IBV_QP_STATE;
  const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  const int rts =
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) return (mask & init) == init;
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) return (mask & rtr) == rtr;
  if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) return (mask & rts) == rts;
  return false;
}

int mModifyQp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  std::lock_guard<std::mutex> lock(S().mu);
  Qp& rec = *S().qps.at(qp->qp_num);
  const ibv_qp_state to = (mask & IBV_QP_STATE) ? a->qp_state : rec.state;
  bool ok = transitionAllowed(rec.state, to, mask);
  if (ok && to == IBV_QPS_INIT) ok = portOf(rec.device, a->port_num) != nullptr;
  if (ok && to == IBV_QPS_RTR) {
    const MockPort* port = portOf(rec.device, rec.port);
    // RoCE needs a GRH (the GID); the path MTU cannot exceed the port's.
    ok = port && a->path_mtu <= port->mtu && (port->linkLayer != IBV_LINK_LAYER_ETHERNET || a->ah_attr.is_global);
  }
  S().transitions.push_back({qp->qp_num, to, a->dest_qp_num, a->ah_attr.grh.sgid_index, a->ah_attr.is_global,
                             a->path_mtu, a->timeout, a->retry_cnt, a->ah_attr.grh.traffic_class, a->ah_attr.sl});
  if (!ok) {
    ++S().badTransitions;
    return EINVAL;
  }
  if (to == IBV_QPS_INIT) {
    rec.port = a->port_num;
    rec.accessFlags = a->qp_access_flags;
  } else if (to == IBV_QPS_RTR) {
    rec.destQpn = a->dest_qp_num;
  } else if (to == IBV_QPS_RTS) {
    rec.timeout = a->timeout;
    rec.retryCnt = a->retry_cnt;
  }
  if (to == IBV_QPS_ERR) toError(rec);
  else rec.state = to;
  qp->state = rec.state;
  return 0;
}
int mQueryQp(ibv_qp* qp, ibv_qp_attr* a, int, ibv_qp_init_attr*) {
  ++S().queryQpCalls;
  std::lock_guard<std::mutex> lock(S().mu);
  a->qp_state = S().qps.at(qp->qp_num)->state;
  return 0;
}

int mPostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::lock_guard<std::mutex> lock(S().mu);
  Qp& rec = *S().qps.at(qp->qp_num);
  for (; wr; wr = wr->next) {
    *bad = wr;
    if (rec.state != IBV_QPS_RTS) return EINVAL;
    if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return EINVAL;
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > rec.cap.max_send_sge) return EINVAL;
    if (rec.nextSeq - 1 - rec.freedSeq >= rec.cap.max_send_wr) return ENOMEM;
    Request r{};
    r.seq = rec.nextSeq++;
    r.wrId = wr->wr_id;
    r.opcode = wr->opcode;
    r.signaled = wr->send_flags & IBV_SEND_SIGNALED;
    r.isInline = wr->send_flags & IBV_SEND_INLINE;
    r.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    uint32_t length = 0;
    for (const ibv_sge& sge : r.sges) length += sge.length;
    if (r.isInline) {
      if (length > rec.cap.max_inline_data) return EINVAL;
      for (const ibv_sge& sge : r.sges) {
        const uint8_t* src = reinterpret_cast<const uint8_t*>(sge.addr);
        r.inlineBytes.insert(r.inlineBytes.end(), src, src + sge.length);
      }
    }
    r.remoteAddr = wr->wr.rdma.remote_addr;
    r.rkey = wr->wr.rdma.rkey;
    r.imm = wr->imm_data;
    std::uniform_int_distribution<int> delay(0, S().options.maxDelayUs);
    r.due = std::max(Clock::now(), rec.lastDue) + std::chrono::microseconds(delay(S().rng));
    rec.lastDue = r.due;
    MockPosted p{qp->qp_num,
                 wr->opcode,
                 unsigned(wr->send_flags),
                 length,
                 r.sges.empty() ? 0 : r.sges[0].addr,
                 r.sges.empty() ? 0 : r.sges[0].lkey,
                 r.remoteAddr,
                 r.rkey,
                 0,
                 ntohl(r.imm)};
    if (r.isInline && r.inlineBytes.size() >= 4) std::memcpy(&p.inlineValue, r.inlineBytes.data(), 4);
    S().posted.push_back(p);
    rec.sendQueue.push_back(std::move(r));
  }
  *bad = nullptr;
  return 0;
}
int mPostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  std::lock_guard<std::mutex> lock(S().mu);
  Qp& rec = *S().qps.at(qp->qp_num);
  for (; wr; wr = wr->next) {
    *bad = wr;
    if (rec.state == IBV_QPS_RESET || rec.state == IBV_QPS_ERR) return EINVAL;
    if (rec.receives.size() >= rec.cap.max_recv_wr) return ENOMEM;
    rec.receives.push_back(wr->wr_id);
  }
  *bad = nullptr;
  return 0;
}
// Polling a send completion frees the send-queue slots up to its request.
int mPollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto& entries = S().cqs.at(cq)->entries;
  int got = 0;
  while (got < n && !entries.empty()) {
    const Cqe& c = entries.front();
    if (c.qp && c.sqSeq) c.qp->freedSeq = std::max(c.qp->freedSeq, c.sqSeq);
    wc[got++] = c.wc;
    entries.pop_front();
  }
  return got;
}
int mForkInit() {
  ++S().forkInitCalls;
  return 0;
}
int mGetAsyncEvent(ibv_context* c, ibv_async_event* event) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto& events = S().contexts.at(c).events;
  if (events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  uint64_t one;
  if (read(c->async_fd, &one, sizeof one) != ssize_t(sizeof one)) std::perror("mock NIC: eventfd read");
  *event = events.front();
  events.pop_front();
  return 0;
}
void mAckAsyncEvent(ibv_async_event*) {}
const char* mEventTypeStr(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL: return "local catastrophic error";
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_CQ_ERR: return "CQ error";
    default: return "other event";
  }
}
const char* mPortStateStr(ibv_port_state state) { return state == IBV_PORT_ACTIVE ? "PORT_ACTIVE" : "PORT_DOWN"; }

}  // namespace

const char* wcStatusText(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    default: return "other error";
  }
}

void configure(const std::vector<MockDevice>& devices, const MockOptions& options) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().devices = devices.empty() ? defaultDevices() : devices;
  S().deviceStructs.clear();
  S().list.clear();
  for (size_t i = 0; i < S().devices.size(); ++i) {
    S().deviceStructs.push_back(std::make_unique<ibv_device>());
    S().list.push_back(S().deviceStructs.back().get());
  }
  S().list.push_back(nullptr);
  S().options = options;
  S().rng.seed(options.seed);
  S().injected = IBV_WC_SUCCESS;
  S().failCreateQpAt = -1;
  S().createQpCalls = 0;
  S().posted.clear();
  S().transitions.clear();
  S().qpInits.clear();
  S().qpDevices.clear();
  S().gidQueries.clear();
  S().opened.clear();
  S().mrAccess.clear();
  S().regMrAddrs.clear();
  S().dmabufRegs.clear();
  S().badTransitions = S().cqOverruns = 0;
  S().queryQpCalls = 0;
}

VerbsApi api() {
  VerbsApi a{};
  a.getDeviceList = mGetDeviceList;
  a.freeDeviceList = mFreeDeviceList;
  a.getDeviceName = mGetDeviceName;
  a.openDevice = mOpenDevice;
  a.closeDevice = mCloseDevice;
  a.queryDevice = mQueryDevice;
  a.queryPort = mQueryPort;
  a.queryGid = mQueryGid;
  a.allocPd = mAllocPd;
  a.deallocPd = mDeallocPd;
  a.regMr = mRegMr;
  a.regDmabufMr = mRegDmabufMr;
  a.regMrIova2 = mRegMrIova2;
  a.deregMr = mDeregMr;
  a.createCq = mCreateCq;
  a.destroyCq = mDestroyCq;
  a.createQp = mCreateQp;
  a.destroyQp = mDestroyQp;
  a.modifyQp = mModifyQp;
  a.queryQp = mQueryQp;
  a.postSend = mPostSend;
  a.postRecv = mPostRecv;
  a.pollCq = mPollCq;
  a.wcStatusStr = wcStatusText;
  a.portStateStr = mPortStateStr;
  a.forkInit = mForkInit;
  a.getAsyncEvent = mGetAsyncEvent;
  a.ackAsyncEvent = mAckAsyncEvent;
  a.eventTypeStr = mEventTypeStr;
  return a;
}

void start() {
  if (S().running.exchange(true)) return;
  S().thread = std::thread([] {
    while (S().running.load()) {
      tick();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
}

void stop() {
  if (!S().running.exchange(false)) return;
  S().thread.join();
}

void setPortDown(const std::string& device, int port) {
  std::lock_guard<std::mutex> lock(S().mu);
  for (size_t d = 0; d < S().devices.size(); ++d) {
    if (S().devices[d].name != device || port < 1 || port > int(S().devices[d].ports.size())) continue;
    S().devices[d].ports[port - 1].state = IBV_PORT_DOWN;
    for (auto& [c, ctx] : S().contexts) {
      if (ctx.device != int(d)) continue;
      ibv_async_event event{};
      event.event_type = IBV_EVENT_PORT_ERR;
      event.element.port_num = port;
      raiseEvent(c, event);
    }
  }
}

void raiseQpFatal(uint32_t qpn) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().qps.find(qpn);
  if (it == S().qps.end()) return;
  toError(*it->second);
  ibv_async_event event{};
  event.event_type = IBV_EVENT_QP_FATAL;
  event.element.qp = it->second->qp;
  raiseEvent(it->second->context, event);
}

void injectStatus(ibv_wc_status status) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().injected = status;
}
void failCreateQpAt(int call) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().failCreateQpAt = call;
}

#define RCN_MOCK_GETTER(type, name, field)    \
  type name() {                               \
    std::lock_guard<std::mutex> lock(S().mu); \
    return S().field;                         \
  }
RCN_MOCK_GETTER(std::vector<MockPosted>, posted, posted)
RCN_MOCK_GETTER(std::vector<MockTransition>, transitions, transitions)
RCN_MOCK_GETTER(std::vector<ibv_qp_init_attr>, qpInits, qpInits)
RCN_MOCK_GETTER(std::vector<std::string>, qpDevices, qpDevices)
RCN_MOCK_GETTER(std::vector<int>, gidQueries, gidQueries)
RCN_MOCK_GETTER(std::vector<std::string>, opened, opened)
RCN_MOCK_GETTER(std::vector<int>, mrAccess, mrAccess)
RCN_MOCK_GETTER(std::vector<void*>, regMrAddrs, regMrAddrs)
RCN_MOCK_GETTER(std::vector<DmabufReg>, dmabufRegs, dmabufRegs)
RCN_MOCK_GETTER(uint64_t, badTransitions, badTransitions)
RCN_MOCK_GETTER(uint64_t, cqOverruns, cqOverruns)
#undef RCN_MOCK_GETTER

void clearPosted() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().posted.clear();
}
uint64_t queryQpCalls() { return S().queryQpCalls.load(); }
uint64_t forkInitCalls() { return S().forkInitCalls.load(); }

}  // namespace rcn::test::mock

#endif  // ROCENANTE_HAVE_IBVERBS
