// SPDX-License-Identifier: BSD-3-Clause
// A software NIC behind the VerbsApi table (transport/wire/verbs_api.h),
// strict enough that the verbs wire cannot pass by accident:
//   - asynchronous: a NIC thread runs each QP's requests in order, each after
//     a random delay, reads the payload when it runs (inline data at post
//     time) and delivers completions later still; send queues and CQs have
//     the depths asked for (a full send queue refuses a post, a full CQ
//     overruns and raises IBV_EVENT_CQ_ERR);
//   - the verbs contract: the attribute mask of each QP state transition,
//     RESET -> INIT -> RTR -> RTS in that order, posting sends only in RTS,
//     lkey/rkey, protection domain, bounds and access checks (errors become
//     error completions and the QP goes to the error state, flushing the
//     rest), a write with immediate consuming a posted receive (none: the
//     sender waits, as RNR retries do);
//   - weak ordering (MockOptions::weakOrdering): the 8-byte words of a write
//     become visible in shuffled order, spread over time, and request N+1's
//     words may land before request N's last ones (never over a newer write
//     to the same bytes); only completions (send, or the receive of a write
//     with immediate) promise that everything up to them is in memory;
//   - faults in virtual time: a request to a destroyed QP or over a port
//     that is down fails with IBV_WC_RETRY_EXC_ERR once the QP's timeout and
//     retry count (4.096 us x 2^timeout x (retries + 1)) have passed, divided
//     by MockOptions::virtualSpeedup;
//   - asynchronous events on each context's async_fd (QP fatal, port error).
// It counts ibv_query_qp calls, so a test can require none in steady state.
#pragma once

#if ROCENANTE_HAVE_IBVERBS

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/wire/verbs_api.h"

namespace rcn::test {

struct MockPort {
  ibv_port_state state = IBV_PORT_ACTIVE;
  uint8_t linkLayer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu mtu = IBV_MTU_4096;
};

struct MockDevice {
  std::string name;
  std::vector<MockPort> ports;  // port p is ports[p - 1]
};

struct MockOptions {
  bool weakOrdering = false;
  int maxDelayUs = 20;           // each request runs 0..this after the one before it
  double virtualSpeedup = 1000;  // retry timeouts pass this much faster than real time
  uint64_t seed = 1;
};

inline MockOptions weaklyOrdered() {
  MockOptions options;
  options.weakOrdering = true;
  return options;
}

// A request as posted (for tests that check what the wire asks for).
struct MockPosted {
  uint32_t qpn;
  ibv_wr_opcode opcode;
  unsigned flags;
  uint32_t length;
  uint64_t localAddr;
  uint32_t lkey;
  uint64_t remoteAddr;
  uint32_t rkey;
  uint32_t inlineValue;  // the first 4 inline bytes
  uint32_t imm;          // host order
};

struct MockTransition {
  uint32_t qpn;
  ibv_qp_state state;
  uint32_t destQpn;
  int sgidIndex;
  int isGlobal;
  ibv_mtu mtu;
  int timeout, retryCnt, trafficClass, serviceLevel;
};

// The one software NIC of the process; its thread runs while it is
// installed (MockNicScope).
namespace mock {

// Before building wires: the devices (default: mlx5_0 and mlx5_1, one
// active RoCE port each, and a second port that is down) and options.
void configure(const std::vector<MockDevice>& devices, const MockOptions& options);
VerbsApi api();
void start();  // the NIC thread
void stop();   // joins it; every object is forgotten

// Faults.
void setPortDown(const std::string& device, int port);  // raises IBV_EVENT_PORT_ERR
void raiseQpFatal(uint32_t qpn);                        // IBV_EVENT_QP_FATAL, QP to error
void injectStatus(ibv_wc_status status);                // every request from now on fails so
void failCreateQpAt(int call);                          // the n-th ibv_create_qp (0-based) fails

// What was asked.
std::vector<MockPosted> posted();
void clearPosted();
std::vector<MockTransition> transitions();
std::vector<ibv_qp_init_attr> qpInits();
std::vector<std::string> qpDevices();  // the device each QP was created on, in order
std::vector<int> gidQueries();
std::vector<std::string> opened();
std::vector<int> mrAccess();
std::vector<void*> regMrAddrs();
struct DmabufReg {
  uint64_t offset;
  size_t length;
  uint64_t iova;
  int fd;
};
std::vector<DmabufReg> dmabufRegs();
uint64_t queryQpCalls();
uint64_t forkInitCalls();
uint64_t badTransitions();  // modify_qp calls refused (wrong order or mask)
uint64_t cqOverruns();
const char* wcStatusText(ibv_wc_status status);

}  // namespace mock

}  // namespace rcn::test

#endif  // ROCENANTE_HAVE_IBVERBS
