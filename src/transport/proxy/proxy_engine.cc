#include "transport/proxy/proxy_engine.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace rcn {

namespace {

using Clock = std::chrono::steady_clock;

// Call numbers skip 0 (it means "cleared"), as the kernel's do.
uint32_t nextCall(uint32_t call) { return call + 1 == 0 ? 2 : call + 1; }

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ProxyEngine::ProxyEngine(Wire* wire, const ExchangeLayout& layout, int rank, ProxyDoorbell* doorbells,
                         volatile uint32_t* abortFlag, int64_t spinUs)
    : wire_(wire), layout_(layout), rank_(rank), doorbells_(doorbells), abortFlag_(abortFlag),
      spinUs_(spinUs), served_(layout.blocks, 0) {}

ProxyEngine::~ProxyEngine() { stop(); }

void ProxyEngine::start() { thread_ = std::thread([this] { loop(); }); }

void ProxyEngine::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

rcnResult_t ProxyEngine::error(std::string* why) const {
  if (!failed_.load(std::memory_order_acquire)) return rcnSuccess;
  std::lock_guard<std::mutex> lock(errorMutex_);
  if (why) *why = errorText_;
  return rcnRemoteError;
}

void ProxyEngine::fail(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (failed_.load()) return;
    errorText_ = text;
    failed_.store(true, std::memory_order_release);
  }
  RCN_WARN(RCN_LOG_PROXY, "%s", text.c_str());
  *abortFlag_ = 1;  // kernels stop waiting for flags that will not come
  wire_->abort();   // and peers see the wire go down
}

rcnResult_t ProxyEngine::drain(uint32_t epoch, uint64_t timeoutMs) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  while (lastDone_.load(std::memory_order_acquire) != epoch && epoch != 0) {
    if (failed_.load() || Clock::now() > deadline) return rcnRemoteError;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return rcnSuccess;
}

// Payload first, then the flag, to every peer (starting after this rank so
// that not every rank writes to rank 0 first).
rcnResult_t ProxyEngine::forward(int block, const ProxyDoorbell& d, int phase) {
  size_t offset = layout_.slotOffset(phase, rank_) + d.offset;
  for (int i = 1; i < layout_.nranks; ++i) {
    int peer = (rank_ + i) % layout_.nranks;
    if (d.bytes) RCN_CHECK(wire_->put(peer, offset, offset, d.bytes));
    RCN_CHECK(wire_->putFlag(peer, layout_.flagIndex(phase, rank_, block), call_));
  }
  return rcnSuccess;
}

bool ProxyEngine::serveDoorbells() {
  const int phase = int(call_ & 1);
  bool worked = false;
  for (int b = 0; b < layout_.blocks; ++b) {
    if (served_[b]) continue;
    ProxyDoorbell* bell = doorbells_ + size_t(phase) * layout_.blocks + b;
    if (__atomic_load_n(&bell->call, __ATOMIC_ACQUIRE) != call_) continue;
    ProxyDoorbell d;
    d.blocks = __atomic_load_n(&bell->blocks, __ATOMIC_RELAXED);
    d.offset = __atomic_load_n(&bell->offset, __ATOMIC_RELAXED);
    d.bytes = __atomic_load_n(&bell->bytes, __ATOMIC_RELAXED);
    if (d.blocks == 0 || int(d.blocks) > layout_.blocks || d.offset > layout_.slotBytes() ||
        d.bytes > layout_.slotBytes() - d.offset) {
      fail("proxy: rank " + std::to_string(rank_) + " read a malformed doorbell (block " +
           std::to_string(b) + ")");
      return false;
    }
    if (forward(b, d, phase) != rcnSuccess) {
      std::string why;
      if (wire_->error(&why) == rcnSuccess) why = "a put failed";
      fail("proxy: rank " + std::to_string(rank_) + ": " + why);
      return false;
    }
    served_[b] = 1;
    blocksOfCall_ = d.blocks;
    ++servedOfCall_;
    worked = true;
  }
  if (blocksOfCall_ != 0 && servedOfCall_ == blocksOfCall_) {
    lastDone_.store(call_, std::memory_order_release);
    call_ = nextCall(call_);
    blocksOfCall_ = servedOfCall_ = 0;
    std::fill(served_.begin(), served_.end(), 0);
  }
  return worked;
}

void ProxyEngine::loop() {
  auto lastWork = Clock::now();
  int64_t sleepUs = 0;
  while (!stop_.load(std::memory_order_acquire) && !failed_.load(std::memory_order_acquire)) {
    if (serveDoorbells()) {
      lastWork = Clock::now();
      sleepUs = 0;
      continue;
    }
    if (wire_->progress() != rcnSuccess) {
      std::string why;
      wire_->error(&why);
      fail("proxy: rank " + std::to_string(rank_) + ": " + why);
      return;
    }
    auto idleUs = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - lastWork).count();
    if (idleUs < spinUs_) {
      cpuRelax();
      continue;
    }
    // Idle for a while: sleep, longer each time, up to 1 ms.
    sleepUs = std::min<int64_t>(1000, sleepUs ? sleepUs * 2 : 20);
    timespec ts{0, long(sleepUs * 1000)};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace rcn
