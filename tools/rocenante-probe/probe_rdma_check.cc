// SPDX-License-Identifier: BSD-3-Clause
#include "probe_rdma_check.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/bootstrap_env.h"
#include "core/check.h"
#include "core/deadline.h"
#include "topology/topology.h"

namespace rcn::probe {

namespace {

// The check's exchange region: kSlots 64-byte payload slots, the bandwidth
// buffer, then the flags: one per slot and four for the handshakes.
constexpr int kSlots = 64;
constexpr size_t kSlotBytes = 64;
constexpr int kAckEvery = 16;
enum : size_t { kPing = kSlots, kPong, kAck, kDone, kFlagCount };

struct Layout {
  size_t bandwidthOffset = kSlots * kSlotBytes;
  WireLayout wire;
  explicit Layout(size_t bandwidthBytes) {
    wire.flagOffset = (bandwidthOffset + bandwidthBytes + 63) / 64 * 64;
    wire.flagCount = kFlagCount;
    wire.regionBytes = wire.flagOffset + kFlagCount * sizeof(uint32_t);
  }
};

// One pair's exchange over one wire; every wait bounded by timeoutMs.
class PairRun {
 public:
  PairRun(Wire& wire, const Layout& layout, const RdmaCheckOptions& options, int peer, uint32_t base)
      : wire_(wire), layout_(layout), options_(options), peer_(peer), base_(base) {}

  // The sender's side: latency, bandwidth, then the ordering stress.
  bool send(RdmaPairResult* r) {
    const uint32_t latencyBase = base_, bandwidthTag = base_ + uint32_t(options_.latencyRounds) + 1;
    auto start = Clock::now();
    for (int i = 1; i <= options_.latencyRounds; ++i) {
      if (!ok(wire_.putFlag(peer_, kPing, latencyBase + uint32_t(i))) || !waitEqual(kPong, latencyBase + uint32_t(i)))
        return fail(r);
    }
    r->latencyUs = seconds(start) * 1e6 / std::max(1, options_.latencyRounds) / 2;
    start = Clock::now();
    for (int w = 0; w < options_.bandwidthWrites; ++w)
      if (!ok(wire_.put(peer_, layout_.bandwidthOffset, layout_.bandwidthOffset, options_.bandwidthBytes)))
        return fail(r);
    if (!ok(wire_.putFlag(peer_, kDone, bandwidthTag)) || !waitEqual(kAck, bandwidthTag)) return fail(r);
    r->bandwidthGBs = double(options_.bandwidthBytes) * options_.bandwidthWrites / seconds(start) / 1e9;
    const uint32_t orderBase = bandwidthTag + 1;
    for (int64_t k = 1; k <= options_.orderingWrites; ++k) {
      // A slot is rewritten only once the receiver has checked its last payload.
      if (k > kSlots && !waitAtLeast(kAck, orderBase, uint32_t(k - kSlots))) return fail(r);
      const uint32_t tag = orderBase + uint32_t(k);
      const size_t slot = size_t(k % kSlots);
      uint64_t* words = reinterpret_cast<uint64_t*>(wire_.region() + slot * kSlotBytes);
      for (size_t i = 0; i < kSlotBytes / 8; ++i) words[i] = uint64_t(tag) << 32 | tag;
      if (!ok(wire_.putWithFlag(peer_, slot * kSlotBytes, slot * kSlotBytes, kSlotBytes, slot, tag))) return fail(r);
    }
    if (!waitAtLeast(kAck, orderBase, uint32_t(options_.orderingWrites))) return fail(r);
    r->ok = true;
    return true;
  }

  // The receiver's side: answers the pings and the bandwidth flag, checks
  // every tagged payload once its flag is seen.
  bool receive(RdmaPairResult* r) {
    const uint32_t latencyBase = base_, bandwidthTag = base_ + uint32_t(options_.latencyRounds) + 1;
    for (int i = 1; i <= options_.latencyRounds; ++i)
      if (!waitEqual(kPing, latencyBase + uint32_t(i)) || !ok(wire_.putFlag(peer_, kPong, latencyBase + uint32_t(i))))
        return fail(r);
    if (!waitEqual(kDone, bandwidthTag) || !ok(wire_.putFlag(peer_, kAck, bandwidthTag))) return fail(r);
    const uint32_t orderBase = bandwidthTag + 1;
    for (int64_t k = 1; k <= options_.orderingWrites; ++k) {
      const uint32_t tag = orderBase + uint32_t(k);
      const size_t slot = size_t(k % kSlots);
      if (!waitEqual(slot, tag)) return fail(r);
      const uint64_t* words = reinterpret_cast<const uint64_t*>(wire_.region() + slot * kSlotBytes);
      for (size_t i = 0; i < kSlotBytes / 8; ++i) {
        if (__atomic_load_n(&words[i], __ATOMIC_ACQUIRE) != (uint64_t(tag) << 32 | tag)) {
          ++r->stale;
          break;
        }
      }
      ++r->writes;
      if ((k % kAckEvery == 0 || k == options_.orderingWrites) && !ok(wire_.putFlag(peer_, kAck, tag))) return fail(r);
    }
    r->ok = true;
    return true;
  }

 private:
  static double seconds(Clock::time_point since) {
    return std::max(1e-9, std::chrono::duration<double>(Clock::now() - since).count());
  }
  bool ok(rcnResult_t res) {
    if (res == rcnSuccess) return true;
    if (wire_.error(&why_) == rcnSuccess) why_ = "a put to rank " + std::to_string(peer_) + " was refused";
    return false;
  }
  bool fail(RdmaPairResult* r) {
    r->why = why_;
    return false;
  }
  uint32_t flag(size_t index) const { return __atomic_load_n(&wire_.flags()[index], __ATOMIC_ACQUIRE); }
  template <typename Pred>
  bool waitFor(Pred done) {
    const Deadline deadline = deadlineAfterMs(int64_t(options_.timeoutMs));
    for (uint32_t spins = 0; !done(); ++spins) {
      if (!ok(wire_.progress())) return false;
      if ((spins & 255) == 0 && expired(deadline)) {
        why_ = "waited " + std::to_string(options_.timeoutMs) + " ms for rank " + std::to_string(peer_);
        return false;
      }
    }
    return true;
  }
  bool waitEqual(size_t index, uint32_t value) {
    return waitFor([&] { return flag(index) == value; });
  }
  bool waitAtLeast(size_t index, uint32_t base, uint32_t count) {
    return waitFor([&] { return int32_t(flag(index) - base) >= int32_t(count); });
  }

  Wire& wire_;
  const Layout& layout_;
  const RdmaCheckOptions& options_;
  int peer_;
  uint32_t base_;
  std::string why_;
};

// What each rank says about its rails.
struct RailSlot {
  int32_t port, gidIndex, mtuBytes;
  char device[64];
  char gid[48];
  char linkLayer[24];
};
struct PortSlot {
  int32_t ok;
  int32_t rails;
  RailSlot rail[kMaxVerbsRails];
  char why[400];
};

// What each rank says about the pair just run.
struct PairSlot {
  double latencyUs, bandwidthGBs;
  int64_t writes, stale;
  int32_t ok, pad;
  char why[240];
};

template <size_t N>
void copyText(char (&dst)[N], const std::string& src) {
  std::snprintf(dst, N, "%s", src.c_str());
}

rcnResult_t gatherPorts(Bootstrap& boot, RdmaCheckReport* out) {
  const int n = boot.nranks();
  std::vector<PortSlot> slots(n);
  PortSlot& mine = slots[boot.rank()];
  mine = PortSlot{};
  std::vector<VerbsPortSummary> rails;
  std::string why;
  mine.ok = verbsRailSummaries(&rails, &why) ? 1 : 0;
  mine.rails = int32_t(std::min(rails.size(), kMaxVerbsRails));
  for (int32_t i = 0; i < mine.rails; ++i) {
    RailSlot& slot = mine.rail[i];
    copyText(slot.device, rails[i].device);
    copyText(slot.gid, rails[i].gid);
    copyText(slot.linkLayer, rails[i].linkLayer);
    slot.port = rails[i].port;
    slot.gidIndex = rails[i].gidIndex;
    slot.mtuBytes = rails[i].mtuBytes;
  }
  copyText(mine.why, why);
  RCN_CHECK(boot.allGather(slots.data(), sizeof(PortSlot)));
  for (const PortSlot& s : slots) {
    std::vector<VerbsPortSummary> theirs;
    for (int32_t i = 0; i < s.rails && i < int32_t(kMaxVerbsRails); ++i)
      theirs.push_back({s.rail[i].device, s.rail[i].port, s.rail[i].gidIndex, s.rail[i].gid, s.rail[i].mtuBytes,
                        s.rail[i].linkLayer});
    out->rankHasPort.push_back(s.ok != 0 && !theirs.empty());
    out->ports.push_back(theirs.empty() ? VerbsPortSummary{} : theirs[0]);
    out->rails.push_back(theirs);
    out->rankWhy.push_back(s.ok ? "" : s.why);
  }
  return rcnSuccess;
}

// Every pair a -> b in turn over one wire; the others wait at the gather.
rcnResult_t runPairs(Bootstrap& boot, Wire& wire, const Layout& layout, const RdmaCheckOptions& options,
                     const std::string& protocol, int rail, uint32_t* base, RdmaCheckReport* out) {
  const int n = boot.nranks(), me = boot.rank();
  const uint32_t stride = uint32_t(options.latencyRounds + options.orderingWrites + 8);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      RdmaPairResult mine;
      if (me == a) PairRun(wire, layout, options, b, *base).send(&mine);
      if (me == b) PairRun(wire, layout, options, a, *base).receive(&mine);
      *base += stride;
      std::vector<PairSlot> slots(n);
      PairSlot& s = slots[me];
      s = PairSlot{mine.latencyUs, mine.bandwidthGBs, mine.writes, mine.stale, mine.ok ? 1 : 0, 0, {}};
      copyText(s.why, mine.why);
      RCN_CHECK(boot.allGather(slots.data(), sizeof(PairSlot)));
      RdmaPairResult r;
      r.from = a;
      r.to = b;
      r.protocol = protocol;
      r.rail = rail;
      r.ok = slots[a].ok && slots[b].ok;
      r.why = !slots[a].ok   ? "rank " + std::to_string(a) + ": " + slots[a].why
              : !slots[b].ok ? "rank " + std::to_string(b) + ": " + slots[b].why
                             : "";
      r.latencyUs = slots[a].latencyUs;
      r.bandwidthGBs = slots[a].bandwidthGBs;
      r.writes = slots[b].writes;
      r.stale = slots[b].stale;
      out->pairs.push_back(r);
    }
  }
  return rcnSuccess;
}

// Every pair over one verbs wire with this protocol and HCA list ("": the
// environment's); *why says why the wire did not connect ("" when it did).
rcnResult_t measureWire(Bootstrap& boot, const Layout& layout, const RdmaCheckOptions& options, const char* protocol,
                        const std::string& hca, int rail, uint32_t* base, RdmaCheckReport* out, std::string* why) {
  FastPathContext ctx;
  ctx.rank = boot.rank();
  ctx.nranks = boot.nranks();
  ctx.timeoutMs = options.timeoutMs;
  ctx.bootstrap = &boot;
  std::unique_ptr<Wire> wire;
  why->clear();
  if (createVerbsWireWithFlags(ctx, layout.wire, protocol, &wire, why, hca) != rcnSuccess) return rcnSuccess;
  RCN_CHECK(runPairs(boot, *wire, layout, options, protocol, rail, base, out));
  wire->close();
  wire.reset();
  return boot.barrier();
}

void decide(RdmaCheckReport* r) {
  for (int i = 0; i < r->nranks; ++i) {
    if (r->rankHasPort[i]) continue;
    r->verdict = "the RDMA fast path will not be used: rank " + std::to_string(i) + " has no usable RDMA port (" +
                 r->rankWhy[i] + "); ROCENANTE_WIRE=auto then takes tcp";
    return;
  }
  if (r->nranks < 2) {
    r->verdict = "this host has a usable RDMA port; run on two or more hosts (under a launcher) to check the wire";
    return;
  }
  int64_t staleImm = 0, staleOrdered = 0, writesOrdered = 0;
  std::string failure;
  for (const RdmaPairResult& p : r->pairs) {
    if (p.protocol == "imm") {
      staleImm += p.stale;
      if (!p.ok && failure.empty()) failure = p.why;
    } else {
      staleOrdered += p.stale;
      writesOrdered += p.writes;
    }
  }
  for (size_t k = 0; k < r->railWhy.size(); ++k)
    if (!r->railWhy[k].empty()) failure = "rail " + std::to_string(k) + " alone: " + r->railWhy[k];
  if (!r->wireWhy[0].empty()) failure = r->wireWhy[0];
  if (!failure.empty()) {
    r->verdict = "the RDMA fast path will not be used: the verbs wire failed (" + failure + ")";
    return;
  }
  if (staleImm > 0) {
    r->verdict = "the RDMA fast path must not be used: " + std::to_string(staleImm) +
                 " payloads were stale after their write-with-immediate completion, which verbs forbids; "
                 "set ROCENANTE_WIRE=tcp and report the NIC and firmware";
    return;
  }
  r->fastPath = true;
  r->protocol = "imm";
  r->verdict =
      "the RDMA fast path will be used across hosts: verbs wire, flags by RDMA WRITE WITH IMMEDIATE "
      "(ROCENANTE_IB_FLAGS=imm, the default)";
  if (staleOrdered > 0)
    r->verdict += "; ordered flags read " + std::to_string(staleOrdered) + " stale payloads in " +
                  std::to_string(writesOrdered) + " writes: never set ROCENANTE_IB_FLAGS=ordered on this cluster";
  else if (r->wireWhy.size() > 1 && r->wireWhy[1].empty())
    r->verdict += "; ordered flags read no stale payload in " + std::to_string(writesOrdered) +
                  " writes (evidence, not a proof: keep the default)";
}

}  // namespace

rcnResult_t rdmaCheck(Bootstrap& boot, const RdmaCheckOptions& options, RdmaCheckReport* out) {
  *out = RdmaCheckReport{};
  out->nranks = boot.nranks();
  RCN_CHECK(gatherPorts(boot, out));
  const bool everyRank = std::all_of(out->rankHasPort.begin(), out->rankHasPort.end(), [](bool b) { return b; });
  if (everyRank && out->nranks > 1) {
    const Layout layout(options.bandwidthBytes);
    uint32_t base = 1;
    for (const char* protocol : {"imm", "ordered"}) {
      std::string why;
      RCN_CHECK(measureWire(boot, layout, options, protocol, "", -1, &base, out, &why));
      out->wireWhy.push_back(why);
    }
    // Each rail alone, where there are several: every rank's k-th rail.
    size_t rails = kMaxVerbsRails;
    for (const auto& rankRails : out->rails) rails = std::min(rails, rankRails.size());
    for (size_t k = 0; rails > 1 && k < rails; ++k) {
      const VerbsPortSummary& mine = out->rails[size_t(boot.rank())][k];
      std::string why;
      RCN_CHECK(measureWire(boot, layout, options, "imm", "=" + mine.device + ":" + std::to_string(mine.port), int(k),
                            &base, out, &why));
      out->railWhy.push_back(why);
    }
  }
  decide(out);
  return rcnSuccess;
}

std::string rdmaCheckText(const RdmaCheckReport& r) {
  std::string text = "RDMA check, " + std::to_string(r.nranks) + " rank" + (r.nranks == 1 ? "" : "s") + "\n";
  char line[512];
  for (int i = 0; i < r.nranks; ++i) {
    if (!r.rankHasPort[i]) {
      std::snprintf(line, sizeof line, "rank %d: no usable RDMA port: %s\n", i, r.rankWhy[i].c_str());
      text += line;
      continue;
    }
    const std::vector<VerbsPortSummary>& rails = r.rails[i];
    for (size_t k = 0; k < rails.size(); ++k) {
      const VerbsPortSummary& p = rails[k];
      const std::string railName = rails.size() > 1 ? " rail " + std::to_string(k) : "";
      std::snprintf(line, sizeof line, "rank %d%s: %s port %d, GID %d %s, MTU %d, %s\n", i, railName.c_str(),
                    p.device.c_str(), p.port, p.gidIndex, p.gid.c_str(), p.mtuBytes, p.linkLayer.c_str());
      text += line;
    }
  }
  if (!r.pairs.empty()) text += "pair   flags    rail  latency us  bandwidth GB/s  ordering (stale / writes)\n";
  for (const RdmaPairResult& p : r.pairs) {
    const std::string rail = p.rail < 0 ? "all" : std::to_string(p.rail);
    if (p.ok)
      std::snprintf(line, sizeof line, "%d->%-3d %-8s %-4s %10.2f  %14.2f  %lld / %lld\n", p.from, p.to,
                    p.protocol.c_str(), rail.c_str(), p.latencyUs, p.bandwidthGBs, (long long)p.stale,
                    (long long)p.writes);
    else
      std::snprintf(line, sizeof line, "%d->%-3d %-8s %-4s failed: %s\n", p.from, p.to, p.protocol.c_str(),
                    rail.c_str(), p.why.c_str());
    text += line;
  }
  const char* names[] = {"imm", "ordered"};
  for (size_t i = 0; i < r.wireWhy.size() && i < 2; ++i)
    if (!r.wireWhy[i].empty()) text += std::string("wire (") + names[i] + ") failed: " + r.wireWhy[i] + "\n";
  for (size_t k = 0; k < r.railWhy.size(); ++k)
    if (!r.railWhy[k].empty()) text += "wire (rail " + std::to_string(k) + " alone) failed: " + r.railWhy[k] + "\n";
  return text + "verdict: " + r.verdict + "\n";
}

std::string rdmaCheckJson(const RdmaCheckReport& r) {
  std::string j = "{\"nranks\": " + std::to_string(r.nranks) + ", \"ranks\": [";
  for (int i = 0; i < r.nranks; ++i) {
    const VerbsPortSummary& p = r.ports[i];
    j += std::string(i ? ", " : "") + "{\"rank\": " + std::to_string(i) +
         ", \"usable\": " + (r.rankHasPort[i] ? "true" : "false") + ", \"device\": " + jsonQuote(p.device) +
         ", \"port\": " + std::to_string(p.port) + ", \"gid_index\": " + std::to_string(p.gidIndex) +
         ", \"gid\": " + jsonQuote(p.gid) + ", \"mtu\": " + std::to_string(p.mtuBytes) +
         ", \"link_layer\": " + jsonQuote(p.linkLayer) + ", \"rails\": [";
    for (size_t k = 0; k < r.rails[i].size(); ++k) {
      const VerbsPortSummary& rail = r.rails[i][k];
      j += std::string(k ? ", " : "") + "{\"device\": " + jsonQuote(rail.device) +
           ", \"port\": " + std::to_string(rail.port) + ", \"gid_index\": " + std::to_string(rail.gidIndex) +
           ", \"gid\": " + jsonQuote(rail.gid) + ", \"mtu\": " + std::to_string(rail.mtuBytes) +
           ", \"link_layer\": " + jsonQuote(rail.linkLayer) + "}";
    }
    j += "], \"why\": " + jsonQuote(r.rankWhy[i]) + "}";
  }
  j += "], \"pairs\": [";
  for (size_t i = 0; i < r.pairs.size(); ++i) {
    const RdmaPairResult& p = r.pairs[i];
    char nums[200];
    std::snprintf(nums, sizeof nums, "\"latency_us\": %.3f, \"bandwidth_gbs\": %.3f, \"writes\": %lld, \"stale\": %lld",
                  p.latencyUs, p.bandwidthGBs, (long long)p.writes, (long long)p.stale);
    j += std::string(i ? ", " : "") + "{\"from\": " + std::to_string(p.from) + ", \"to\": " + std::to_string(p.to) +
         ", \"flags\": " + jsonQuote(p.protocol) + ", \"rail\": " + std::to_string(p.rail) +
         ", \"ok\": " + (p.ok ? "true" : "false") + ", " + nums + ", \"why\": " + jsonQuote(p.why) + "}";
  }
  j += std::string("], \"fast_path\": ") + (r.fastPath ? "true" : "false") +
       ", \"protocol\": " + jsonQuote(r.protocol) + ", \"verdict\": " + jsonQuote(r.verdict) + "}\n";
  return j;
}

int runRdmaCheck(const rcn::LauncherInfo& launch, bool json) {
  std::unique_ptr<Bootstrap> boot;
  if (launch.external && launch.nranks > 1) {
    if (bootstrapInitFromEnv(launch.rank, launch.nranks, launch.masterAddr.c_str(), launch.masterPort, &boot) !=
        rcnSuccess) {
      std::fprintf(stderr, "rocenante-probe: rank %d could not join the others at %s:%d (see the warning above)\n",
                   launch.rank, launch.masterAddr.c_str(), launch.masterPort);
      return 1;
    }
  } else {
    boot = bootstrapInitLocal(makeLocalBootstrapGroup(1), 0);
  }
  RdmaCheckReport report;
  if (rdmaCheck(*boot, RdmaCheckOptions{}, &report) != rcnSuccess) {
    std::fprintf(stderr, "rocenante-probe: rank %d: the RDMA check's exchange failed (see above)\n", boot->rank());
    return 1;
  }
  if (boot->rank() == 0) std::fputs((json ? rdmaCheckJson(report) : rdmaCheckText(report)).c_str(), stdout);
  std::fflush(stdout);
  return boot->barrier() == rcnSuccess ? 0 : 1;
}

}  // namespace rcn::probe
