// SPDX-License-Identifier: BSD-3-Clause
// The proxy of one communicator: threads that poll the kernel's doorbells
// and, for each block that rang, have the wire put the block's slice into
// every peer's slot and then raise that peer's flag (carrying the call's
// signature), in that order (flags protocol), or put the block's LL lines as
// they are found complete, with no flag (LL protocol: the lines carry their
// own tags), or, staged LL, puts a block's lines unread once its doorbell
// rings (regions in device memory). On wires
// where the CPU itself copies (shm), several threads ("lanes") share the
// blocks (block b goes to lane b % lanes), so copies of one call run in
// parallel; wires with ordered connections (tcp, verbs) get one lane.
// Threads spin while work is recent and back off to short sleeps when idle
// (ROCENANTE_PROXY_SPIN_US). A wire error stops every lane, raises the abort
// flag the kernels watch, and shuts the wire so peers learn of it too.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/deadline.h"
#include "rocenante/rocenante.h"
#include "transport/proxy/proxy_kernel.h"
#include "transport/wire/exchange_layout.h"
#include "transport/wire/wire.h"

namespace rcn {

class ProxyEngine {
 public:
  // doorbells and abortFlag are host pointers to host-mapped memory;
  // timeoutMs bounds the wait for the kernel's own LL lines; firstCall is
  // the kernel's first call number (1 unless a test starts near the wrap).
  ProxyEngine(Wire* wire, const ExchangeLayout& layout, int rank, ProxyDoorbell* doorbells,
              volatile uint32_t* abortFlag, int64_t spinUs, int lanes, uint64_t timeoutMs,
              uint32_t firstCall = 1);
  ~ProxyEngine();

  void start();
  // Stops the threads (joins them). Never waits for a peer.
  void stop();
  // Waits (bounded) until every call up to `epoch` has been forwarded.
  rcnResult_t drain(uint32_t epoch, uint64_t timeoutMs);
  rcnResult_t error(std::string* why) const;
  int lanes() const { return int(lanes_.size()); }

 private:
  // One thread's share: blocks b with b % lanes == index.
  struct Lane {
    int index = 0;
    uint32_t call = 1;          // the call being forwarded
    uint32_t blocksOfCall = 0;  // the call's grid size, once known
    uint32_t servedOfCall = 0;
    std::vector<uint8_t> served;  // [block] of the current call
    std::atomic<uint32_t> lastDone{0};
    std::thread thread;
  };

  void loop(Lane& lane);
  bool serveDoorbells(Lane& lane);
  bool finishCallIfDone(Lane& lane);
  rcnResult_t forwardBlock(uint32_t call, int block, const ProxyDoorbell& d, int phase);
  rcnResult_t forward(uint32_t call, int block, const ProxyDoorbell& d, int phase);
  rcnResult_t forwardLines(uint32_t call, int block, const ProxyDoorbell& d, int phase);
  rcnResult_t forwardStagedLines(const ProxyDoorbell& d, int phase);
  rcnResult_t putToPeers(size_t offset, size_t bytes);
  bool linesArrived(const uint8_t* lines, size_t bytes, uint32_t call,
                    Deadline deadline) const;
  bool stoppedOrFailed() const;
  void fail(const std::string& text);

  Wire* wire_;
  ExchangeLayout layout_;
  int rank_;
  ProxyDoorbell* doorbells_;
  volatile uint32_t* abortFlag_;
  int64_t spinUs_;
  uint64_t timeoutMs_;
  std::vector<std::unique_ptr<Lane>> lanes_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex errorMutex_;
  std::string errorText_;
};

}  // namespace rcn
