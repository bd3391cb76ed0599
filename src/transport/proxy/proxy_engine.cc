// SPDX-License-Identifier: BSD-3-Clause
#include "transport/proxy/proxy_engine.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "core/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rcn {

namespace {

// Call numbers skip 0 (it means "cleared"), as the kernel's do.
uint32_t nextCall(uint32_t call) { return call + 1 == 0 ? 2 : call + 1; }

// Lines are checked and put in pieces this size, so the first peer's copy
// starts while the kernel is still staging the rest of the block.
constexpr size_t kLinePieceBytes = 2048;

// The doorbell of `call`, once every field's tag says so (see ProxyDoorbell);
// the signature only in the flags protocol, the only one that writes it.
bool readDoorbell(const ProxyDoorbell* bell, uint32_t call, ProxyDoorbell* out) {
  const uint64_t* words = reinterpret_cast<const uint64_t*>(bell);
  uint32_t value[kProxyDoorbellFields] = {};
  auto readField = [&](int i) {
    const uint64_t w = __atomic_load_n(&words[i], __ATOMIC_ACQUIRE);
    value[i] = uint32_t(w);
    return uint32_t(w >> 32) == call;
  };
  const int signature = kProxyDoorbellFields - 1;
  for (int i = 0; i < signature; ++i)
    if (!readField(i)) return false;
  if (value[1] == kProxyFlags && !readField(signature)) return false;
  *out = ProxyDoorbell{value[0], call, value[1], call, value[2], call, value[3], call, value[4], call};
  return true;
}

// ThreadSanitizer cannot see that an aligned 16-byte load reads each 8-byte
// half whole, and the writer it sees in tests is a thread standing in for the
// GPU or the NIC: under it, the portable path's atomic loads are used.
#if defined(__SANITIZE_THREAD__)
#define RCN_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RCN_THREAD_SANITIZER 1
#endif
#endif
#ifndef RCN_THREAD_SANITIZER
#define RCN_THREAD_SANITIZER 0
#endif

// How many leading bytes of `lines` (a multiple of 16, at most `bytes`)
// already carry this call in both tags of every line ({data, tag, data,
// tag}). Only the tags' call half (proxyLineCall) is checked: the lines are
// this rank's own kernel's, and the signature half is for the peers that
// read them. This scan is most of a lane's work in LL, so x86 checks a line
// per compare.
size_t completeLineBytes(const uint8_t* lines, size_t bytes, uint32_t call) {
  std::atomic_signal_fence(std::memory_order_seq_cst);  // re-read memory on every scan
  const uint32_t want = proxyLineCall(call);
  size_t done = 0;
#if defined(__x86_64__) && !RCN_THREAD_SANITIZER
  // An aligned 16-byte load reads each 8-byte half whole, which is all the
  // tags need: a half whose tag matches carries its data word.
  const __m128i wanted = _mm_set1_epi32(int(want));
  const __m128i mask = _mm_set1_epi32(int(kProxyLineCallMask));
  for (; done < bytes; done += 16) {
    const __m128i line = _mm_load_si128(reinterpret_cast<const __m128i*>(lines + done));
    const __m128i calls = _mm_and_si128(line, mask);
    const int equal = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(calls, wanted)));
    if ((equal & 0xA) != 0xA) break;
  }
#else
  const uint64_t* words = reinterpret_cast<const uint64_t*>(lines);
  auto carries = [&](size_t word) {
    return (uint32_t(__atomic_load_n(&words[word], __ATOMIC_ACQUIRE) >> 32) & kProxyLineCallMask) == want;
  };
  for (; done < bytes; done += 16)
    if (!carries(done / 8) || !carries(done / 8 + 1)) break;
#endif
  return done;
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ProxyEngine::ProxyEngine(Wire* wire, const ExchangeLayout& layout, int rank, ProxyDoorbell* doorbells,
                         volatile uint32_t* abortFlag, int64_t spinUs, int lanes, uint64_t timeoutMs,
                         uint32_t firstCall)
    : wire_(wire), layout_(layout), rank_(rank), doorbells_(doorbells), abortFlag_(abortFlag),
      spinUs_(spinUs), timeoutMs_(timeoutMs) {
  lanes = wire->concurrentPuts() ? std::max(1, std::min(lanes, layout.blocks)) : 1;
  for (int i = 0; i < lanes; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->index = i;
    lanes_.back()->served.assign(layout.blocks, 0);
    lanes_.back()->call = firstCall;
    lanes_.back()->lastDone.store(firstCall - 1);  // the kernel's epoch before its first call
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
  *abortFlag_ = 1;         // kernels stop waiting for flags that will not come
  wire_->abortWith(text);  // and peers see the wire go down, told why
}

rcnResult_t ProxyEngine::drain(uint32_t epoch, uint64_t timeoutMs) {
  if (epoch == 0) return rcnSuccess;  // no call yet (call numbers skip 0)
  const Deadline deadline = deadlineAfterMs(int64_t(timeoutMs));
  for (auto& lane : lanes_) {
    // A failed engine forwards nothing more: stop waiting at once, not at the deadline.
    bool failed = false;
    const bool ended = pollUntil(deadline, std::chrono::microseconds(50), [&] {
      if (lane->lastDone.load(std::memory_order_acquire) == epoch) return true;
      failed = failed_.load();
      return failed;
    });
    if (!ended || failed) return rcnRemoteError;
  }
  return rcnSuccess;
}

// Payload first, then the flag, to every peer (starting after this rank so
// that not every rank writes to rank 0 first).
rcnResult_t ProxyEngine::forward(uint32_t call, int block, const ProxyDoorbell& d, int phase) {
  size_t offset = layout_.slotOffset(phase, rank_) + d.offset;
  for (int i = 1; i < layout_.nranks; ++i) {
    int peer = (rank_ + i) % layout_.nranks;
    RCN_CHECK(wire_->putWithFlag(peer, offset, offset, d.bytes, layout_.flagIndex(phase, rank_, block),
                                 callTag(call, d.signature)));
  }
  return rcnSuccess;
}

// True once every line carries `call` in both tags; false if the engine is
// stopping, the communicator failed or was aborted, or the deadline passed.
bool ProxyEngine::linesArrived(const uint8_t* lines, size_t bytes, uint32_t call,
                               Deadline deadline) const {
  uint32_t spins = 0;
  for (size_t done = 0; (done += completeLineBytes(lines + done, bytes - done, call)) < bytes;) {
    cpuRelax();
    if ((++spins & 1023u) != 0) continue;
    if (stoppedOrFailed() || expired(deadline)) return false;
  }
  return true;
}

// LL: piece by piece, once the kernel's lines are all there, to every peer
// (no flag: the receiving kernel checks the tags itself). The whole block
// gets one timeout. A late kernel is this engine's own failure to name; an
// earlier cause (stopping, abort, a failed lane or wire) names itself.
rcnResult_t ProxyEngine::forwardLines(uint32_t call, int block, const ProxyDoorbell& d, int phase) {
  const size_t base = layout_.llSlotOffset(phase, rank_) + d.offset;
  const Deadline deadline = deadlineAfterMs(int64_t(timeoutMs_));
  for (size_t done = 0; done < d.bytes; done += kLinePieceBytes) {
    const size_t piece = std::min<size_t>(kLinePieceBytes, d.bytes - done);
    if (!linesArrived(wire_->region() + base + done, piece, call, deadline)) {
      if (!stoppedOrFailed() && wire_->error(nullptr) == rcnSuccess)
        fail("proxy: rank " + std::to_string(rank_) + ": block " + std::to_string(block) + " of call " +
             std::to_string(call) + ": the kernel's lines did not arrive within " +
             std::to_string(timeoutMs_) + " ms");
      return rcnInternalError;
    }
    RCN_CHECK(putToPeers(base + done, piece));
  }
  wire_->flushPuts();
  return rcnSuccess;
}

// Staged LL: the kernel fenced its lines before ringing, so the whole block
// goes at once; this CPU never reads them (they may be in device memory).
rcnResult_t ProxyEngine::forwardStagedLines(const ProxyDoorbell& d, int phase) {
  return putToPeers(layout_.llSlotOffset(phase, rank_) + d.offset, d.bytes);
}

// The bytes at `offset` of this rank's region to the same place on every
// peer, starting after this rank as forward() does.
rcnResult_t ProxyEngine::putToPeers(size_t offset, size_t bytes) {
  for (int i = 1; i < layout_.nranks; ++i) RCN_CHECK(wire_->put((rank_ + i) % layout_.nranks, offset, offset, bytes));
  return rcnSuccess;
}

rcnResult_t ProxyEngine::forwardBlock(uint32_t call, int block, const ProxyDoorbell& d, int phase) {
  switch (d.protocol) {
    case kProxyLL: return forwardLines(call, block, d, phase);
    case kProxyLLStaged: return forwardStagedLines(d, phase);
    default: return forward(call, block, d, phase);
  }
}

bool ProxyEngine::stoppedOrFailed() const {
  return stop_.load(std::memory_order_relaxed) || failed_.load(std::memory_order_relaxed) || *abortFlag_;
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
    ProxyDoorbell d;
    uint32_t seen = __atomic_load_n(&first->bytesTag, __ATOMIC_ACQUIRE);
    if (readDoorbell(first, lane.call, &d)) lane.blocksOfCall = d.blocks;
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
    ProxyDoorbell d;
    if (!readDoorbell(doorbells_ + size_t(phase) * layout_.blocks + b, lane.call, &d)) continue;
    const bool ll = d.protocol != kProxyFlags;
    const size_t slotBytes = ll ? layout_.llSlotBytes() : layout_.slotBytes();
    if (d.blocks == 0 || int(d.blocks) > layout_.blocks || d.protocol > kProxyLLStaged ||
        d.offset > slotBytes || d.bytes > slotBytes - d.offset || d.offset % 16 != 0 || d.bytes % 16 != 0) {
      fail("proxy: rank " + std::to_string(rank_) + " read a malformed doorbell (block " +
           std::to_string(b) + ")");
      return false;
    }
    if (forwardBlock(lane.call, b, d, phase) != rcnSuccess) {
      // Stopping, aborted, or a lane failed first (late LL lines fail in
      // forwardLines): that names the cause.
      if (stoppedOrFailed()) return false;
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
