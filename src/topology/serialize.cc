// SPDX-License-Identifier: BSD-3-Clause
// The binary form of a RankTopo that ranks exchange over the bootstrap:
// a magic and version, then every field in declaration order; strings and
// lists are length-prefixed. Decoding checks every length against the blob,
// so a truncated or foreign blob is an error, never a crash.
#include <cstring>

#include "core/check.h"
#include "topology/topology.h"

namespace rcn {

static const uint32_t kTopoMagic = 0x52435450;  // "RCTP"
static const uint32_t kTopoVersion = 1;

namespace {

class Writer {
 public:
  void u32(uint32_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void i32(int v) { u32(static_cast<uint32_t>(v)); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes_ += s;
  }
  void net(const Ipv4Net& n) {
    u32(n.addr);
    i32(n.prefix);
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& b) : bytes_(b) {}
  bool ok() const { return ok_; }
  uint32_t u32() {
    uint32_t v = 0;
    if (!need(sizeof v)) return 0;
    memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  int i32() { return static_cast<int>(u32()); }
  std::string str() {
    uint32_t n = u32();
    if (!need(n)) return "";
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Ipv4Net net() {
    Ipv4Net n;
    n.addr = u32();
    n.prefix = i32();
    return n;
  }
  // A count of list entries, bounded by what the blob could hold.
  uint32_t count() {
    uint32_t n = u32();
    if (n > bytes_.size()) ok_ = false;
    return ok_ ? n : 0;
  }

 private:
  bool need(size_t n) {
    if (!ok_ || bytes_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  const std::string& bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace

std::string topoEncode(const RankTopo& t) {
  Writer w;
  w.u32(kTopoMagic);
  w.u32(kTopoVersion);
  w.i32(t.rank);
  w.str(t.host);
  w.str(t.bootId);
  w.i32(t.cudaDev);
  w.str(t.peerMemModule);
  w.str(t.source);
  w.u32(static_cast<uint32_t>(t.gpus.size()));
  for (const GpuInfo& g : t.gpus) {
    w.i32(g.index);
    w.str(g.pciBusId);
    w.str(g.name);
    w.i32(g.ccMajor);
    w.i32(g.ccMinor);
    w.i32(g.integrated);
    w.i32(static_cast<int>(g.gdr));
    w.i32(static_cast<int>(g.dmaBuf));
    w.str(g.nearestNic);
    w.i32(static_cast<int>(g.nicDistance));
    w.u32(static_cast<uint32_t>(g.links.size()));
    for (const GpuLink& l : g.links) {
      w.i32(l.peer);
      w.i32(l.access);
      w.i32(l.nvlink);
      w.i32(l.perfRank);
    }
  }
  w.u32(static_cast<uint32_t>(t.nics.size()));
  for (const NicInfo& n : t.nics) {
    w.str(n.name);
    w.str(n.pciBusId);
    w.u32(static_cast<uint32_t>(n.ports.size()));
    for (const PortInfo& p : n.ports) {
      w.i32(p.port);
      w.str(p.state);
      w.str(p.linkLayer);
      w.i32(p.mtu);
      w.str(p.netdev);
      w.u32(static_cast<uint32_t>(p.gids.size()));
      for (const GidInfo& g : p.gids) {
        w.i32(g.index);
        w.str(g.gid);
        w.str(g.type);
        w.str(g.netdev);
        w.net(g.ipv4);
      }
    }
  }
  w.u32(static_cast<uint32_t>(t.netifs.size()));
  for (const NetIf& n : t.netifs) {
    w.str(n.name);
    w.net(n.ipv4);
  }
  return w.take();
}

static Support supportOf(int v) {
  return (v == static_cast<int>(Support::Yes) || v == static_cast<int>(Support::No)) ? static_cast<Support>(v)
                                                                                   : Support::Unknown;
}

rcnResult_t topoDecode(const std::string& blob, RankTopo* out) {
  Reader r(blob);
  uint32_t magic = r.u32(), version = r.u32();
  RCN_ARG_CHECK(r.ok() && magic == kTopoMagic, "topology blob: bad magic (not a rocenante topology)");
  RCN_ARG_CHECK(version == kTopoVersion, "topology blob: version %u, this build reads %u", version, kTopoVersion);
  RankTopo t;
  t.rank = r.i32();
  t.host = r.str();
  t.bootId = r.str();
  t.cudaDev = r.i32();
  t.peerMemModule = r.str();
  t.source = r.str();
  t.gpus.resize(r.count());
  for (GpuInfo& g : t.gpus) {
    g.index = r.i32();
    g.pciBusId = r.str();
    g.name = r.str();
    g.ccMajor = r.i32();
    g.ccMinor = r.i32();
    g.integrated = r.i32() != 0;
    g.gdr = supportOf(r.i32());
    g.dmaBuf = supportOf(r.i32());
    g.nearestNic = r.str();
    int d = r.i32();
    g.nicDistance = (d >= 0 && d <= static_cast<int>(PciDistance::Sys)) ? static_cast<PciDistance>(d)
                                                                         : PciDistance::Unknown;
    g.links.resize(r.count());
    for (GpuLink& l : g.links) {
      l.peer = r.i32();
      l.access = r.i32() != 0;
      l.nvlink = r.i32() != 0;
      l.perfRank = r.i32();
    }
  }
  t.nics.resize(r.count());
  for (NicInfo& n : t.nics) {
    n.name = r.str();
    n.pciBusId = r.str();
    n.ports.resize(r.count());
    for (PortInfo& p : n.ports) {
      p.port = r.i32();
      p.state = r.str();
      p.linkLayer = r.str();
      p.mtu = r.i32();
      p.netdev = r.str();
      p.gids.resize(r.count());
      for (GidInfo& g : p.gids) {
        g.index = r.i32();
        g.gid = r.str();
        g.type = r.str();
        g.netdev = r.str();
        g.ipv4 = r.net();
      }
    }
  }
  t.netifs.resize(r.count());
  for (NetIf& n : t.netifs) {
    n.name = r.str();
    n.ipv4 = r.net();
  }
  RCN_ARG_CHECK(r.ok(), "topology blob: truncated (%zu bytes)", blob.size());
  *out = std::move(t);
  return rcnSuccess;
}

}  // namespace rcn
