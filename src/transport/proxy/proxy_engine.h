// The proxy thread of one communicator: it polls the kernel's doorbells and,
// for each block that rang, has the wire put the block's slice into every
// peer's slot and then raise that peer's flag, in that order. It spins while
// work is recent and backs off to short sleeps when idle
// (ROCENANTE_PROXY_SPIN_US). A wire error stops it, raises the abort flag the
// kernels watch, and closes the wire so that peers learn of it too.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rocenante/rocenante.h"
#include "transport/proxy/proxy_kernel.h"
#include "transport/wire/exchange_layout.h"
#include "transport/wire/wire.h"

namespace rcn {

class ProxyEngine {
 public:
  // doorbells and abortFlag are host pointers to host-mapped memory.
  ProxyEngine(Wire* wire, const ExchangeLayout& layout, int rank, ProxyDoorbell* doorbells,
              volatile uint32_t* abortFlag, int64_t spinUs);
  ~ProxyEngine();

  void start();
  // Stops the thread (joins it). Never waits for a peer.
  void stop();
  // Waits (bounded) until every call up to `epoch` has been forwarded.
  rcnResult_t drain(uint32_t epoch, uint64_t timeoutMs);

  rcnResult_t error(std::string* why) const;

 private:
  void loop();
  // Forwards whatever doorbells of the current call rang. True if any did.
  bool serveDoorbells();
  rcnResult_t forward(int block, const ProxyDoorbell& d, int phase);
  void fail(const std::string& text);

  Wire* wire_;
  ExchangeLayout layout_;
  int rank_;
  ProxyDoorbell* doorbells_;
  volatile uint32_t* abortFlag_;
  int64_t spinUs_;

  uint32_t call_ = 1;             // the call being forwarded
  uint32_t blocksOfCall_ = 0;     // known once its first doorbell rang
  uint32_t servedOfCall_ = 0;
  std::vector<uint8_t> served_;   // [block] of the current call
  std::atomic<uint32_t> lastDone_{0};  // the last call fully forwarded

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex errorMutex_;
  std::string errorText_;
};

}  // namespace rcn
