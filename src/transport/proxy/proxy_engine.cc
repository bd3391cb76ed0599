#include "transport/proxy/proxy_engine.h"

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
                         volatile uint32_t* abortFlag, int64_t spinUs, int lanes)
    : wire_(wire), layout_(layout), rank_(rank), doorbells_(doorbells), abortFlag_(abortFlag),
      spinUs_(spinUs) {
  lanes = wire->concurrentPuts() ? std::max(1, std::min(lanes, layout.blocks)) : 1;
  for (int i = 0; i < lanes; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->index = i;
    lanes_.back()->served.assign(layout.blocks, 0);
  }
}

ProxyEngine::~ProxyEngine() { stop(); }

void ProxyEngine::start() {
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->thread = std::thread([this, l] { loop(*l); });
  }
}

void ProxyEngine::stop() {
  stop_.store(true, std::memory_order_release);
  for (auto& lane : lanes_)
    if (lane->thread.joinable()) lane->thread.join();
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
  for (auto& lane : lanes_) {
    while (epoch != 0 && lane->lastDone.load(std::memory_order_acquire) != epoch) {
      if (failed_.load() || Clock::now() > deadline) return rcnRemoteError;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return rcnSuccess;
}

// Payload first, then the flag, to every peer (starting after this rank so
// that not every rank writes to rank 0 first).
rcnResult_t ProxyEngine::forward(uint32_t call, int block, const ProxyDoorbell& d, int phase) {
  size_t offset = layout_.slotOffset(phase, rank_) + d.offset;
  for (int i = 1; i < layout_.nranks; ++i) {
    int peer = (rank_ + i) % layout_.nranks;
    if (d.bytes) RCN_CHECK(wire_->put(peer, offset, offset, d.bytes));
    RCN_CHECK(wire_->putFlag(peer, layout_.flagIndex(phase, rank_, block), call));
  }
  return rcnSuccess;
}

// The lane's share of the call is done once every block of it below the
// call's grid size was forwarded. A lane that owns none of the call's blocks
// learns the grid size from block 0's doorbell; if that doorbell has already
// moved two calls on, this lane owned nothing in the call (it would otherwise
// have held the call up) and simply follows.
bool ProxyEngine::finishCallIfDone(Lane& lane) {
  const int lanes = int(lanes_.size());
  if (lane.blocksOfCall == 0 && lane.index != 0) {
    const ProxyDoorbell* first = doorbells_ + size_t(lane.call & 1) * layout_.blocks;
    uint32_t seen = __atomic_load_n(&first->call, __ATOMIC_ACQUIRE);
    if (seen == lane.call) lane.blocksOfCall = __atomic_load_n(&first->blocks, __ATOMIC_RELAXED);
    else if (seen != 0 && int32_t(seen - lane.call) > 0) lane.blocksOfCall = 1;  // a grid below index: none mine
  }
  if (lane.blocksOfCall == 0) return false;
  uint32_t mine = lane.blocksOfCall > uint32_t(lane.index)
                      ? (lane.blocksOfCall - lane.index + lanes - 1) / lanes
                      : 0;
  if (lane.servedOfCall < mine) return false;
  lane.lastDone.store(lane.call, std::memory_order_release);
  lane.call = nextCall(lane.call);
  lane.blocksOfCall = lane.servedOfCall = 0;
  std::fill(lane.served.begin(), lane.served.end(), 0);
  return true;
}

bool ProxyEngine::serveDoorbells(Lane& lane) {
  const int phase = int(lane.call & 1);
  const int lanes = int(lanes_.size());
  bool worked = false;
  for (int b = lane.index; b < layout_.blocks; b += lanes) {
    if (lane.served[b]) continue;
    ProxyDoorbell* bell = doorbells_ + size_t(phase) * layout_.blocks + b;
    if (__atomic_load_n(&bell->call, __ATOMIC_ACQUIRE) != lane.call) continue;
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
    if (forward(lane.call, b, d, phase) != rcnSuccess) {
      std::string why;
      if (wire_->error(&why) == rcnSuccess) why = "a put failed";
      fail("proxy: rank " + std::to_string(rank_) + ": " + why);
      return false;
    }
    lane.served[b] = 1;
    lane.blocksOfCall = d.blocks;
    ++lane.servedOfCall;
    worked = true;
  }
  return finishCallIfDone(lane) || worked;
}

void ProxyEngine::loop(Lane& lane) {
  auto lastWork = Clock::now();
  int64_t sleepUs = 0;
  while (!stop_.load(std::memory_order_acquire) && !failed_.load(std::memory_order_acquire)) {
    if (serveDoorbells(lane)) {
      lastWork = Clock::now();
      sleepUs = 0;
      continue;
    }
    // One lane reaps completions and watches peers (wires expect one caller).
    if (lane.index == 0 && wire_->progress() != rcnSuccess) {
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
