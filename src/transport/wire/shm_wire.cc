// SPDX-License-Identifier: BSD-3-Clause
// The shm wire: ranks on one host. Each rank's exchange region is a POSIX
// shared-memory segment that every peer maps; a put is a memcpy into the
// peer's mapping and a flag is a release store after it, which is the same
// ordering an RC queue pair gives the verbs wire. Segments are named by a
// per-communicator random id and unlinked as soon as every rank mapped them,
// so nothing is left in /dev/shm even if a process dies later. Past each
// region lies its rank's goodbye word, set by close(): a rank that exits
// after it left on purpose has failed nothing, and one still waiting for it
// knows nothing more will come (the flags it raised before stay readable).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "transport/wire/peer_identity.h"
#include "transport/wire/shm_segment.h"
#include "transport/wire/wire.h"

namespace rcn {

namespace {

struct ShmBlob {
  uint64_t commId;  // rank 0's value names every segment
  PeerIdentity identity;
  int32_t ok;       // used by the later agreement rounds
};

void segmentName(uint64_t commId, int rank, char* name, size_t size) {
  std::snprintf(name, size, "/rcn-%016llx-%d", static_cast<unsigned long long>(commId), rank);
}

// Copies a payload into a peer's segment with stores that bypass this CPU's
// cache: the reader is the peer (its GPU over PCIe on the proxy path), so
// ordinary stores would only add read-for-ownership traffic now and snoops
// later. Non-temporal stores are weakly ordered and may sit in write-combining
// buffers; putFlag and flushPuts fence them, not each copy, because a fence
// per 2 KB LL piece stalls the proxy lane until the piece drained.
void copyToPeer(uint8_t* dst, const uint8_t* src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= 1024 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    size_t lines = bytes / 64;
    for (size_t i = 0; i < lines; ++i) {
      const __m128i* s = reinterpret_cast<const __m128i*>(src + 64 * i);
      __m128i* d = reinterpret_cast<__m128i*>(dst + 64 * i);
      __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
      __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
    std::memcpy(dst + 64 * lines, src + 64 * lines, bytes - 64 * lines);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

class ShmWire final : public Wire {
 public:
  ~ShmWire() override {
    for (size_t r = 0; r < mapped_.size(); ++r)
      if (mapped_[r]) munmap(mapped_[r], segmentBytes());
    if (ownName_[0]) shm_unlink(ownName_);  // only still linked if setup failed
  }

  const char* name() const override { return "shm"; }
  // Copies to disjoint slots and flag stores need no lock.
  bool concurrentPuts() const override { return true; }
  uint8_t* region() const override { return mapped_[rank_]; }

  rcnResult_t setup(const FastPathContext& ctx, const WireLayout& layout, std::string* why);

  rcnResult_t put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) override {
    RCN_CHECK(checkPut(peer, localOffset, remoteOffset, bytes));
    copyToPeer(mapped_[peer] + remoteOffset, mapped_[rank_] + localOffset, bytes);
    return rcnSuccess;
  }

  rcnResult_t putFlag(int peer, size_t flagIndex, uint32_t value) override {
    RCN_CHECK(checkPutFlag(peer, flagIndex));
    uint32_t* flags = reinterpret_cast<uint32_t*>(mapped_[peer] + layout_.flagOffset);
    // The fence orders the payload's non-temporal stores, the release its
    // ordinary ones.
    flushPuts();
    __atomic_store_n(&flags[flagIndex], value, __ATOMIC_RELEASE);
    return rcnSuccess;
  }

  void flushPuts() override {
#if defined(__x86_64__)
    _mm_sfence();
#endif
  }

  // A killed peer never raises its flag: notice that it is gone, unless it said goodbye first.
  rcnResult_t progress() override {
    if (failure_.failed()) return rcnRemoteError;
    const std::string gone = exitWatch_.check([this](int peer) { return peerLeft(peer); });
    if (gone.empty()) return rcnSuccess;
    failure_.record(gone);
    return rcnRemoteError;
  }

  rcnResult_t error(std::string* why) const override { return failure_.get(why); }

  void abort() override { aborted_.store(true, std::memory_order_release); }

  // After this rank's last flags, which the fence orders before the word.
  // Not after an abort or a failure: then this rank did not leave on purpose.
  void close() override {
    if (mapped_.empty() || !mapped_[rank_] || aborted_.load(std::memory_order_acquire) || failure_.failed()) return;
    flushPuts();
    __atomic_store_n(goodbyeWord(rank_), 1u, __ATOMIC_RELEASE);
  }

  bool peerLeft(int peer) const override {
    return peer >= 0 && peer < nranks_ && peer != rank_ && mapped_[peer] &&
           __atomic_load_n(goodbyeWord(peer), __ATOMIC_ACQUIRE) != 0;
  }

 private:
  bool stopped() const override { return aborted_.load(std::memory_order_acquire); }
  size_t segmentBytes() const { return shmSegmentBytes(layout_); }
  uint32_t* goodbyeWord(int r) const { return shmGoodbyeWord(mapped_[r], layout_); }
  rcnResult_t createOwnSegment(std::string* why);
  rcnResult_t mapPeerSegment(int r, std::string* why);

  uint64_t commId_ = 0;
  std::vector<uint8_t*> mapped_;  // [rank]: this rank's own region at [rank_]
  char ownName_[64] = {};
  PeerExitWatch exitWatch_;
  std::atomic<bool> aborted_{false};
  WireFailure failure_;
};

rcnResult_t ShmWire::createOwnSegment(std::string* why) {
  segmentName(commId_, rank_, ownName_, sizeof ownName_);
  int fd = shm_open(ownName_, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    const int err = errno;  // read before the text allocates
    *why = std::string("shm_open(") + ownName_ + ") failed: " + strerror(err);
    ownName_[0] = 0;
    return rcnSystemError;
  }
  size_t bytes = segmentBytes();
  // posix_fallocate reserves the pages in /dev/shm now: a full one fails here
  // with ENOSPC, where ftruncate alone would leave a hole whose first write
  // (the memset below, or a peer's put) raises SIGBUS.
  void* base = MAP_FAILED;
  int err = 0;
  do err = posix_fallocate(fd, 0, off_t(bytes));
  while (err == EINTR);  // a signal (a profiler's, Python's) while it reserves a large segment
  if (err == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) err = errno;
  }
  ::close(fd);
  if (base == MAP_FAILED) {
    *why = std::string("sizing/mapping ") + ownName_ + " (" + std::to_string(bytes) +
           " bytes) failed: " + strerror(err) + " (is /dev/shm large enough?)";
    return rcnSystemError;
  }
  std::memset(base, 0, bytes);  // maps every page now rather than in the middle of a call
  mapped_[rank_] = static_cast<uint8_t*>(base);
  return rcnSuccess;
}

rcnResult_t ShmWire::mapPeerSegment(int r, std::string* why) {
  char name[64];
  segmentName(commId_, r, name, sizeof name);
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) {
    const int err = errno;
    *why = std::string("shm_open(") + name + ") of rank " + std::to_string(r) +
           " failed: " + strerror(err);
    return rcnSystemError;
  }
  const rcnResult_t res = mapShmSegment(fd, layout_, r, &mapped_[r], why);
  ::close(fd);
  return res;
}

rcnResult_t ShmWire::setup(const FastPathContext& ctx, const WireLayout& layout, std::string* why) {
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  layout_ = layout;
  mapped_.assign(nranks_, nullptr);
  std::vector<ShmBlob> blobs(nranks_);
  std::memset(static_cast<void*>(blobs.data()), 0, blobs.size() * sizeof(ShmBlob));  // padding too: it travels
  blobs[rank_].commId = randomId64();
  blobs[rank_].identity = localPeerIdentity();
  RCN_CHECK(ctx.bootstrap->allGather(blobs.data(), sizeof(ShmBlob)));
  // Another host is the same verdict on every rank.
  if (exitWatch_.watch(identitiesOf(blobs), rank_, name(), why) != rcnSuccess) return rcnInvalidUsage;
  commId_ = blobs[0].commId;

  std::string localWhy;
  bool ok = createOwnSegment(&localWhy) == rcnSuccess;
  rcnResult_t res =
      agreeOnStep(ctx.bootstrap, rank_, nranks_, ok, localWhy, name(), "create its shared-memory segment", why);
  if (res != rcnSuccess) return res;

  for (int r = 0; r < nranks_ && ok; ++r)
    if (r != rank_) ok = mapPeerSegment(r, &localWhy) == rcnSuccess;
  res = agreeOnStep(ctx.bootstrap, rank_, nranks_, ok, localWhy, name(), "map a peer's shared-memory segment", why);
  // Every rank mapped every segment (or gave up): the names are no longer needed.
  shm_unlink(ownName_);
  ownName_[0] = 0;
  return res;
}

}  // namespace

rcnResult_t createShmWire(const FastPathContext& ctx, const WireLayout& layout,
                          std::unique_ptr<Wire>* out, std::string* why) {
  auto wire = std::make_unique<ShmWire>();
  rcnResult_t res = wire->setup(ctx, layout, why);
  if (res == rcnInvalidUsage) return rcnSuccess;  // does not fit: *out stays null
  if (res != rcnSuccess) {
    RCN_WARN(RCN_LOG_TRANSPORT, "%s", why->c_str());
    return res;
  }
  RCN_INFO(RCN_LOG_TRANSPORT, "shm wire: rank %d mapped %d segments of %zu bytes", ctx.rank,
           ctx.nranks, layout.regionBytes);
  *out = std::move(wire);
  return rcnSuccess;
}

}  // namespace rcn
