// SPDX-License-Identifier: BSD-3-Clause
// The host backend: the one-shot protocol with buffers in host memory and the
// reduction on the CPU, over the shm or tcp wire (no GPU needed). The calling
// thread does everything synchronously: stage the chunk into its own slot,
// put it to every peer followed by the flag, wait (bounded) for every peer's
// flag, reduce the slots in rank order. Messages larger than a slot go through
// in chunks, one protocol call each, since there is no NCCL to fall back to.
// Each slot starts with the call's header (collective, count, type, op), so
// ranks that make different calls get an error naming both, not each other's
// bytes. An all-gather puts a rank's share to every peer as the all-reduce
// does, then copies every slot to its place; a reduce-scatter stages one
// segment per peer in its own slot and puts each peer only its block.
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/params.h"
#include "transport/host/host_reduce.h"
#include "transport/transport.h"
#include "transport/wire/exchange_layout.h"
#include "transport/wire/wire.h"

namespace rcn {

namespace {

// What a rank puts in front of its data: the whole call, so that every chunk
// of it can be checked against every peer's. 16 bytes keep the data aligned.
struct CallHeader {
  uint64_t count;  // the API's count: all-reduce count, sendcount, recvcount
  int32_t dtype;
  int16_t op;
  int16_t coll;  // Collective
  bool operator==(const CallHeader& o) const {
    return count == o.count && dtype == o.dtype && op == o.op && coll == o.coll;
  }
};
static_assert(sizeof(CallHeader) == 16, "the data after the header stays 16-byte aligned");

CallHeader headerOf(Collective coll, size_t count, rcnDataType_t dtype, rcnRedOp_t op) {
  return CallHeader{count, static_cast<int32_t>(dtype), static_cast<int16_t>(op), static_cast<int16_t>(coll)};
}

std::string describe(const CallHeader& h) {
  const Collective coll = static_cast<Collective>(h.coll);
  std::string text = std::string(collectiveName(coll)) + " of " + std::to_string(h.count) + " x " +
                     dtypeName(static_cast<rcnDataType_t>(h.dtype));
  if (coll != Collective::AllGather) text += std::string(" ") + opName(static_cast<rcnRedOp_t>(h.op));
  return text;
}

class HostPath final : public FastPath {
 public:
  HostPath(const FastPathContext& ctx, const ExchangeLayout& layout, std::unique_ptr<Wire> wire)
      : rank_(ctx.rank), nranks_(ctx.nranks), timeoutMs_(ctx.timeoutMs), layout_(layout),
        wire_(std::move(wire)), spinUs_(paramInt(ParamId::ProxySpinUs)) {
    std::snprintf(name_, sizeof name_, "host-%s", wire_->name());
  }

  ~HostPath() override {
    if (wireBroken_.load()) wire_->abort();
    else wire_->close();  // after a mismatched call too: peers still waiting must not see a lost rank
  }

  rcnPath_t path() const override { return rcnPathHost; }
  const char* transportName() const override { return name_; }
  // Any size: larger messages go through the slots in chunks.
  size_t maxBytes() const override { return std::numeric_limits<size_t>::max(); }
  size_t maxShareBytes() const override { return std::numeric_limits<size_t>::max(); }
  bool runs(Collective) const override { return true; }

  rcnResult_t enqueue(const void* send, void* recv, size_t count, rcnDataType_t dtype,
                      rcnRedOp_t op, cudaStream_t) override {
    size_t elemSize = dtypeSize(dtype);
    size_t chunkElems = (layout_.slotBytes() - sizeof(CallHeader)) / elemSize;
    const CallHeader call = headerOf(Collective::AllReduce, count, dtype, op);
    for (size_t done = 0; done < count; done += chunkElems) {
      size_t n = std::min(chunkElems, count - done);
      RCN_CHECK(oneCall(call, static_cast<const uint8_t*>(send) + done * elemSize,
                        static_cast<uint8_t*>(recv) + done * elemSize, n));
    }
    return rcnSuccess;
  }

  rcnResult_t enqueueAllGather(const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                               cudaStream_t) override {
    const size_t elemSize = dtypeSize(dtype);
    const size_t chunkElems = (layout_.slotBytes() - sizeof(CallHeader)) / elemSize;
    const CallHeader call = headerOf(Collective::AllGather, sendCount, dtype, rcnSum);
    for (size_t done = 0; done < sendCount; done += chunkElems)
      RCN_CHECK(oneGather(call, static_cast<const uint8_t*>(send), static_cast<uint8_t*>(recv), done,
                          std::min(chunkElems, sendCount - done)));
    return rcnSuccess;
  }

  rcnResult_t enqueueReduceScatter(const void* send, void* recv, size_t recvCount, rcnDataType_t dtype, rcnRedOp_t op,
                                   cudaStream_t) override {
    // Each peer's segment (header, then its block's chunk) starts 16-byte aligned.
    const size_t elemSize = dtypeSize(dtype);
    const size_t segmentRoom = layout_.slotBytes() / size_t(nranks_) / 16 * 16;
    const size_t chunkElems = segmentRoom > sizeof(CallHeader) ? (segmentRoom - sizeof(CallHeader)) / elemSize : 0;
    RCN_ARG_CHECK(chunkElems > 0,
                  "host backend: %zu-byte slots cannot hold a reduce-scatter segment for each of %d "
                  "ranks (raise ROCENANTE_MAX_BYTES)",
                  layout_.slotBytes(), nranks_);
    const CallHeader call = headerOf(Collective::ReduceScatter, recvCount, dtype, op);
    for (size_t done = 0; done < recvCount; done += chunkElems)
      RCN_CHECK(oneScatter(call, static_cast<const uint8_t*>(send), static_cast<uint8_t*>(recv), done,
                           std::min(chunkElems, recvCount - done), segmentRoom));
    return rcnSuccess;
  }

  rcnResult_t asyncError(std::string* why) override {
    if (!failed_.load(std::memory_order_acquire)) return rcnSuccess;
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (why) *why = errorText_;
    return errorCode_;
  }

  // The peers hear why (a wire that carries text), not only a closed connection.
  void abort() override {
    aborted_.store(true, std::memory_order_release);
    wire_->abortWith("host backend: rank " + std::to_string(rank_) + " aborted its communicator");
  }

 private:
  rcnResult_t oneCall(const CallHeader& call, const uint8_t* send, uint8_t* recv, size_t n);
  // Chunk [done, done + n) of every rank's share of an all-gather.
  rcnResult_t oneGather(const CallHeader& call, const uint8_t* send, uint8_t* recv, size_t done, size_t n);
  // Chunk [done, done + n) of every block of a reduce-scatter, segments `segment` bytes apart.
  rcnResult_t oneScatter(const CallHeader& call, const uint8_t* send, uint8_t* recv, size_t done, size_t n,
                         size_t segment);
  // The next call's number; *phase its phase.
  uint32_t beginCall(int* phase);
  // Puts peer p the `bytes` (header first) staged at this rank's own slot +
  // p * peerStride into its slot of this rank, raises the flag, waits for
  // every peer's and checks that they made the same call.
  rcnResult_t exchange(const CallHeader& call, uint32_t epoch, int phase, size_t bytes, size_t peerStride);
  // The data rank r sent this call (after its header), in this rank's region.
  const uint8_t* received(int phase, int r) const {
    return wire_->region() + layout_.slotOffset(phase, r) + sizeof(CallHeader);
  }
  rcnResult_t waitForPeers(uint32_t epoch, int phase);
  // Why a wait for peer's flag of call `epoch` should stop, or "" to go on.
  std::string reasonToGiveUp(int peer, uint32_t epoch, Deadline deadline);
  rcnResult_t checkPeersCall(const CallHeader& call, int phase);
  rcnResult_t fail(rcnResult_t code, const std::string& text, bool tellPeers = true);
  void pause(Clock::time_point waitStart);

  int rank_, nranks_;
  uint64_t timeoutMs_;
  ExchangeLayout layout_;
  std::unique_ptr<Wire> wire_;
  int64_t spinUs_;
  uint32_t epoch_ = 0;  // calls completed
  char name_[32];
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> wireBroken_{false};  // failed with the peers told (the wire aborted)
  std::mutex errorMutex_;
  rcnResult_t errorCode_ = rcnSuccess;
  std::string errorText_;
};

// tellPeers false: every peer fails the same way by itself (a mismatched
// call), and closing the wire would turn their error into a lost peer.
rcnResult_t HostPath::fail(rcnResult_t code, const std::string& text, bool tellPeers) {
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (!failed_.load()) {
      errorCode_ = code;
      errorText_ = text;
      failed_.store(true, std::memory_order_release);
      RCN_WARN(RCN_LOG_COLL, "%s", text.c_str());
    }
  }
  // Closing the wire tells peers (tcp: connections drop) instead of letting
  // them wait for their own timeout.
  if (tellPeers) {
    wireBroken_.store(true);
    wire_->abortWith(text);
  }
  return code;
}

uint32_t HostPath::beginCall(int* phase) {
  const uint32_t epoch = ++epoch_;
  *phase = int(epoch % ExchangeLayout::kPhases);
  return epoch;
}

rcnResult_t HostPath::exchange(const CallHeader& call, uint32_t epoch, int phase, size_t bytes, size_t peerStride) {
  const size_t own = layout_.slotOffset(phase, rank_);
  // Start with the next rank so that not every rank writes to rank 0 first.
  for (int i = 1; i < nranks_; ++i) {
    int peer = (rank_ + i) % nranks_;
    rcnResult_t res =
        wire_->putWithFlag(peer, own + size_t(peer) * peerStride, own, bytes, layout_.flagIndex(phase, rank_), epoch);
    if (res != rcnSuccess) {
      std::string why;
      if (wire_->error(&why) == rcnSuccess) why = "put to rank " + std::to_string(peer) + " failed";
      return fail(rcnRemoteError, "host backend: rank " + std::to_string(rank_) + ": " + why);
    }
  }
  RCN_CHECK(waitForPeers(epoch, phase));
  return checkPeersCall(call, phase);
}

rcnResult_t HostPath::oneCall(const CallHeader& call, const uint8_t* send, uint8_t* recv, size_t n) {
  const rcnDataType_t dtype = static_cast<rcnDataType_t>(call.dtype);
  int phase = 0;
  const uint32_t epoch = beginCall(&phase);
  size_t bytes = sizeof(CallHeader) + n * dtypeSize(dtype);
  uint8_t* own = wire_->region() + layout_.slotOffset(phase, rank_);
  std::memcpy(own, &call, sizeof call);
  std::memcpy(own + sizeof call, send, bytes - sizeof call);
  RCN_CHECK(exchange(call, epoch, phase, bytes, /*peerStride=*/0));
  const void* inputs[64];
  std::vector<const void*> many;
  const void** in = inputs;
  if (nranks_ > 64) {
    many.resize(nranks_);
    in = many.data();
  }
  for (int r = 0; r < nranks_; ++r) in[r] = received(phase, r);
  hostReduce(in, nranks_, recv, n, dtype, static_cast<rcnRedOp_t>(call.op));
  return rcnSuccess;
}

rcnResult_t HostPath::oneGather(const CallHeader& call, const uint8_t* send, uint8_t* recv, size_t done, size_t n) {
  const size_t elemSize = dtypeSize(static_cast<rcnDataType_t>(call.dtype));
  int phase = 0;
  const uint32_t epoch = beginCall(&phase);
  uint8_t* own = wire_->region() + layout_.slotOffset(phase, rank_);
  std::memcpy(own, &call, sizeof call);
  std::memcpy(own + sizeof call, send + done * elemSize, n * elemSize);
  RCN_CHECK(exchange(call, epoch, phase, sizeof call + n * elemSize, /*peerStride=*/0));
  // In place, this rank's share is copied onto itself from the staged copy.
  for (int r = 0; r < nranks_; ++r)
    std::memcpy(recv + (size_t(r) * call.count + done) * elemSize, received(phase, r), n * elemSize);
  return rcnSuccess;
}

rcnResult_t HostPath::oneScatter(const CallHeader& call, const uint8_t* send, uint8_t* recv, size_t done, size_t n,
                                 size_t segment) {
  const rcnDataType_t dtype = static_cast<rcnDataType_t>(call.dtype);
  const size_t elemSize = dtypeSize(dtype);
  int phase = 0;
  const uint32_t epoch = beginCall(&phase);
  uint8_t* own = wire_->region() + layout_.slotOffset(phase, rank_);
  // Every block's chunk is staged before recv is written: in place, recv is
  // this rank's own block of send.
  for (int p = 0; p < nranks_; ++p) {
    std::memcpy(own + size_t(p) * segment, &call, sizeof call);
    std::memcpy(own + size_t(p) * segment + sizeof call, send + (size_t(p) * call.count + done) * elemSize,
                n * elemSize);
  }
  RCN_CHECK(exchange(call, epoch, phase, sizeof call + n * elemSize, segment));
  std::vector<const void*> in(nranks_);
  for (int r = 0; r < nranks_; ++r) in[r] = r == rank_ ? own + size_t(r) * segment + sizeof call : received(phase, r);
  hostReduce(in.data(), nranks_, recv + done * elemSize, n, dtype, static_cast<rcnRedOp_t>(call.op));
  return rcnSuccess;
}

// Every peer made this call: the same count, type and op (the first that did
// not is named; the peer finds this rank's header different in turn).
rcnResult_t HostPath::checkPeersCall(const CallHeader& call, int phase) {
  const uint8_t* region = wire_->region();
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;  // a reduce-scatter's own header is not at the slot's start
    CallHeader theirs;
    std::memcpy(&theirs, region + layout_.slotOffset(phase, r), sizeof theirs);
    if (theirs == call) continue;
    return fail(rcnInvalidUsage,
                "host backend: rank " + std::to_string(rank_) + " called " + describe(call) + ", rank " +
                    std::to_string(r) + " with " + describe(theirs) + ": every rank must make the same call",
                /*tellPeers=*/false);
  }
  return rcnSuccess;
}

// Spin first (a peer is usually microseconds away), then sleep in short
// steps so idle ranks leave the cores to the ranks still working.
void HostPath::pause(Clock::time_point waitStart) {
  auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - waitStart);
  if (waited.count() < spinUs_) {
    sched_yield();
    return;
  }
  timespec ts{0, 20000};
  nanosleep(&ts, nullptr);
}

std::string HostPath::reasonToGiveUp(int peer, uint32_t epoch, Deadline deadline) {
  // Built only on the way out: this runs on every spin of the wait.
  auto waiting = [&] {
    return "host backend: rank " + std::to_string(rank_) + " waiting for rank " + std::to_string(peer);
  };
  if (wire_->progress() != rcnSuccess) {
    std::string why;
    wire_->error(&why);
    return waiting() + ": " + why;
  }
  if (wire_->peerLeft(peer))
    return waiting() + " (call " + std::to_string(epoch) + "): it destroyed its communicator without making this call";
  if (!expired(deadline)) return "";
  char text[200];
  std::snprintf(text, sizeof text, "host backend: rank %d timed out after %llu ms waiting for rank %d (call %u)",
                rank_, static_cast<unsigned long long>(timeoutMs_), peer, epoch);
  return text;
}

rcnResult_t HostPath::waitForPeers(uint32_t epoch, int phase) {
  const uint32_t* flags = wire_->flags();
  const auto start = Clock::now();  // pause() spins first, counting from here
  const Deadline deadline = start + std::chrono::milliseconds(timeoutMs_);
  for (int i = 1; i < nranks_; ++i) {
    int peer = (rank_ + i) % nranks_;
    const uint32_t* flag = &flags[layout_.flagIndex(phase, peer)];
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != epoch) {
      if (aborted_.load(std::memory_order_acquire))
        return fail(rcnRemoteError, "host backend: rank " + std::to_string(rank_) + " aborted");
      const std::string why = reasonToGiveUp(peer, epoch, deadline);
      if (why.empty()) {
        pause(start);
        continue;
      }
      // A peer that made this call and then left (its exit fails the wire,
      // its goodbye follows its flag) or a flag that came at the deadline:
      // the flag may have landed after the loop read it, so read it again
      // before blaming anyone.
      if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == epoch) break;
      return fail(rcnRemoteError, why);
    }
  }
  return rcnSuccess;
}

}  // namespace

rcnResult_t createHostPath(const FastPathContext& ctx, std::unique_ptr<FastPath>* out,
                           std::string* why) {
  out->reset();
  RCN_ARG_CHECK(ctx.nranks >= 1 && ctx.rank >= 0 && ctx.rank < ctx.nranks,
                "host backend: bad rank %d of %d", ctx.rank, ctx.nranks);
  RCN_ARG_CHECK(ctx.maxBytes >= 64, "host backend: slot size %zu is too small", ctx.maxBytes);
  WireKind kind;
  RCN_CHECK(wireKindFromParams(&kind));
  // Each slot holds a call's header, then up to maxBytes of its data.
  ExchangeLayout layout = ExchangeLayout::make(ctx.nranks, ctx.maxBytes + sizeof(CallHeader), /*blocks=*/1);
  std::unique_ptr<Wire> wire;
  RCN_CHECK(createWire(ctx, kind, layout.wireLayout(), &wire, why));
  if (!wire) return rcnSuccess;  // the wire does not fit; why says so
  *out = std::make_unique<HostPath>(ctx, layout, std::move(wire));
  RCN_INFO(RCN_LOG_INIT, "host backend: rank %d of %d over %s, %zu-byte slots", ctx.rank,
           ctx.nranks, (*out)->transportName(), layout.slotBytes());
  return rcnSuccess;
}

}  // namespace rcn
