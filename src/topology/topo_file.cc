// SPDX-License-Identifier: BSD-3-Clause
// The topology file: written as JSON by a small hand-written writer (JSON is
// also YAML), read with yaml-cpp, so one reader takes both the dumps and
// hand-written YAML. Reading is strict: an unknown key, a wrong type or a
// missing required key is an error naming the file, the line and the key.
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "core/check.h"
#include "core/user_file.h"
#include "topology/topology.h"

#ifdef ROCENANTE_HAVE_YAML
#include "core/yaml_strict.h"
#endif

namespace rcn {

// ---------------------------------------------------------------- writing ---

std::string jsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

static std::string q(const std::string& s) { return jsonQuote(s); }

static const char* b(bool v) { return v ? "true" : "false"; }

static void writeGpu(std::ostringstream& o, const GpuInfo& g) {
  o << "        {\"index\": " << g.index << ", \"pci\": " << q(g.pciBusId) << ", \"name\": " << q(g.name)
    << ", \"cc\": " << q(std::to_string(g.ccMajor) + "." + std::to_string(g.ccMinor))
    << ", \"integrated\": " << b(g.integrated) << ", \"gdr\": " << q(supportName(g.gdr))
    << ", \"dmabuf\": " << q(supportName(g.dmaBuf)) << ",\n         \"nic\": " << q(g.nearestNic)
    << ", \"nic_distance\": " << q(pciDistanceName(g.nicDistance)) << ", \"links\": [";
  for (size_t i = 0; i < g.links.size(); i++) {
    const GpuLink& l = g.links[i];
    o << (i ? ",\n           " : "\n           ") << "{\"peer\": " << l.peer << ", \"access\": " << b(l.access)
      << ", \"nvlink\": " << b(l.nvlink) << ", \"perf_rank\": " << l.perfRank << "}";
  }
  o << "]}";
}

static void writeNic(std::ostringstream& o, const NicInfo& n) {
  o << "        {\"name\": " << q(n.name) << ", \"pci\": " << q(n.pciBusId) << ", \"ports\": [";
  for (size_t p = 0; p < n.ports.size(); p++) {
    const PortInfo& port = n.ports[p];
    o << (p ? ",\n" : "\n") << "          {\"port\": " << port.port << ", \"state\": " << q(port.state)
      << ", \"link_layer\": " << q(port.linkLayer) << ", \"mtu\": " << port.mtu << ", \"netdev\": " << q(port.netdev)
      << ", \"gids\": [";
    for (size_t i = 0; i < port.gids.size(); i++) {
      const GidInfo& g = port.gids[i];
      o << (i ? ",\n" : "\n") << "            {\"index\": " << g.index << ", \"gid\": " << q(g.gid)
        << ", \"type\": " << q(g.type) << ", \"netdev\": " << q(g.netdev)
        << ", \"ipv4\": " << q(g.ipv4.valid() ? g.ipv4.text() : "") << "}";
    }
    o << "]}";
  }
  o << "]}";
}

static void writeRank(std::ostringstream& o, const RankTopo& t) {
  o << "    {\"rank\": " << t.rank << ", \"host\": " << q(t.host) << ", \"boot_id\": " << q(t.bootId)
    << ", \"cuda_dev\": " << t.cudaDev << ", \"peermem\": " << q(t.peerMemModule) << ",\n     \"gpus\": [";
  for (size_t i = 0; i < t.gpus.size(); i++) {
    o << (i ? ",\n" : "\n");
    writeGpu(o, t.gpus[i]);
  }
  o << "],\n     \"nics\": [";
  for (size_t i = 0; i < t.nics.size(); i++) {
    o << (i ? ",\n" : "\n");
    writeNic(o, t.nics[i]);
  }
  o << "],\n     \"netifs\": [";
  for (size_t i = 0; i < t.netifs.size(); i++)
    o << (i ? ", " : "") << "{\"name\": " << q(t.netifs[i].name) << ", \"ipv4\": " << q(t.netifs[i].ipv4.text()) << "}";
  o << "]}";
}

std::string topoToJson(const CommTopo& topo, const std::string& extra) {
  std::ostringstream o;
  o << "{\n  \"version\": 1,\n";
  if (!extra.empty()) o << "  \"rocenante\": " << extra << ",\n";
  o << "  \"class\": " << q(topoClassName(topo.cls)) << ",\n  \"nnodes\": " << topo.nnodes
    << ",\n  \"wire\": " << q(topo.wire) << ",\n  \"p2p_eligible\": " << b(topo.p2pEligible)
    << ",\n  \"reason\": " << q(topo.reason) << ",\n  \"ranks\": [\n";
  for (size_t r = 0; r < topo.ranks.size(); r++) {
    if (r) o << ",\n";
    writeRank(o, topo.ranks[r]);
  }
  o << "\n  ]\n}\n";
  return o.str();
}

rcnResult_t topoWriteFile(const std::string& path, const CommTopo& topo) {
  std::string why;
  RCN_ARG_CHECK(writeOutputFile(path, topoToJson(topo), &why), "cannot write topology file %s", why.c_str());
  return rcnSuccess;
}

// ---------------------------------------------------------------- reading ---

#ifdef ROCENANTE_HAVE_YAML

namespace {

// Reads one mapping strictly; the first problem becomes the error text.
class Fields {
 public:
  Fields(const YAML::Node& node, const std::string& file, const std::string& path, std::string* err)
      : node_(node), file_(file), path_(path), err_(err) {
    if (err_->empty() && !node.IsMap()) fail(node, path_, "expected a mapping");
  }

  // Every key present must be one of `allowed` (catches typos), and none twice.
  void allow(std::initializer_list<const char*> allowed) {
    if (!err_->empty() || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      std::string key = kv.first.Scalar();
      bool known = false;
      for (const char* a : allowed) known = known || key == a;
      if (!known) return fail(kv.first, sub(key), "unknown key");
    }
    if (const YAML::Node twice = repeatedKey(node_); !twice.IsNull()) fail(twice, sub(twice.Scalar()), "given twice");
  }

  template <class T>
  void get(const char* key, T* out, bool required = false) {
    if (!err_->empty() || !node_.IsMap()) return;
    YAML::Node v = node_[key];
    if (!v) {
      if (required) fail(node_, sub(key), "missing required key");
      return;
    }
    if (v.IsNull()) return;
    if (!v.IsScalar()) return fail(v, sub(key), std::string("expected ") + kindName<T>());
    try {
      *out = v.as<T>();
    } catch (const YAML::Exception&) {
      fail(v, sub(key), std::string("expected ") + kindName<T>() + ", got '" + v.Scalar() + "'");
    }
  }

  // A list under key (absent: empty).
  YAML::Node list(const char* key) {
    if (!err_->empty() || !node_.IsMap()) return YAML::Node(YAML::NodeType::Sequence);
    YAML::Node v = node_[key];
    if (err_->empty() && v && !v.IsNull() && !v.IsSequence()) fail(v, sub(key), "expected a list");
    return (v && v.IsSequence()) ? v : YAML::Node(YAML::NodeType::Sequence);
  }

  void fail(const YAML::Node& at, const std::string& key, const std::string& what) {
    if (!err_->empty()) return;
    int line = at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
    *err_ = file_ + ":" + std::to_string(line) + ": " + (key.empty() ? std::string("top level") : "key '" + key + "'") +
            ": " + what;
  }

  // A value that parsed but cannot be right: the error names the key and why.
  void check(bool ok, const char* key, const std::string& what) {
    if (ok || !err_->empty() || !node_.IsMap()) return;
    fail(node_[key] ? node_[key] : node_, sub(key), what);
  }

  // The dotted name of a key of this mapping, for messages.
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  template <class T>
  static const char* kindName() {
    if (std::is_same<T, bool>::value) return "true or false";
    if (std::is_integral<T>::value) return "an integer";
    return "a string";
  }
  YAML::Node node_;
  std::string file_, path_;
  std::string* err_;
};

Support parseSupport(Fields& f, const YAML::Node& node, const char* key) {
  std::string text = "unknown";
  f.get(key, &text);
  if (text == "yes" || text == "true") return Support::Yes;
  if (text == "no" || text == "false") return Support::No;
  if (text != "unknown") f.fail(node[key], f.sub(key), "expected yes, no or unknown, got '" + text + "'");
  return Support::Unknown;
}

void parseIpv4Field(Fields& f, const YAML::Node& node, const char* key, Ipv4Net* out, bool required) {
  std::string text;
  f.get(key, &text, required);
  if (text.empty()) return;
  // The prefix says which hosts share the subnet: without one it would read as /32.
  if (text.find('/') == std::string::npos || !parseIpv4Net(text, out))
    f.fail(node[key], f.sub(key), "expected a.b.c.d/prefix, got '" + text + "'");
}

// A GID is an IPv6 address: sysfs's full form (fe80:0000:...) or a short one (::ffff:10.0.1.1).
bool isGidText(const std::string& text) {
  in6_addr address;
  return inet_pton(AF_INET6, text.c_str(), &address) == 1;
}

bool isGpuIndex(int index) { return index >= 0 && index <= kMaxTopoGpuIndex; }

std::string item(const std::string& path, const char* list, size_t i) {
  return path + "." + list + "[" + std::to_string(i) + "]";
}

GpuInfo parseGpu(const YAML::Node& node, const std::string& file, const std::string& path, std::string* err) {
  GpuInfo g;
  Fields f(node, file, path, err);
  f.allow({"index", "pci", "name", "cc", "integrated", "gdr", "dmabuf", "nic", "nic_distance", "links"});
  f.get("index", &g.index, true);
  f.check(isGpuIndex(g.index), "index",
          "expected a GPU index 0.." + std::to_string(kMaxTopoGpuIndex) + ", got " + std::to_string(g.index));
  f.get("pci", &g.pciBusId);
  f.get("name", &g.name);
  std::string cc;
  f.get("cc", &cc);
  if (!cc.empty() && sscanf(cc.c_str(), "%d.%d", &g.ccMajor, &g.ccMinor) != 2)
    f.fail(node["cc"], path + ".cc", "expected major.minor, got '" + cc + "'");
  f.get("integrated", &g.integrated);
  g.gdr = parseSupport(f, node, "gdr");
  g.dmaBuf = parseSupport(f, node, "dmabuf");
  f.get("nic", &g.nearestNic);
  std::string dist = "unknown";
  f.get("nic_distance", &dist);
  if (!parsePciDistance(dist, &g.nicDistance))
    f.fail(node["nic_distance"], path + ".nic_distance", "expected PIX, PXB, PHB, SYS or unknown, got '" + dist + "'");
  YAML::Node links = f.list("links");
  std::set<int> peers;
  for (size_t i = 0; i < links.size() && err->empty(); i++) {
    GpuLink l;
    Fields lf(links[i], file, item(path, "links", i), err);
    lf.allow({"peer", "access", "nvlink", "perf_rank"});
    lf.get("peer", &l.peer, true);
    lf.check(isGpuIndex(l.peer) && l.peer != g.index, "peer",
             "expected another GPU's index 0.." + std::to_string(kMaxTopoGpuIndex) + ", got " + std::to_string(l.peer));
    lf.check(peers.insert(l.peer).second, "peer", "GPU " + std::to_string(l.peer) + " has a link given twice");
    lf.get("access", &l.access);
    lf.get("nvlink", &l.nvlink);
    lf.get("perf_rank", &l.perfRank);
    g.links.push_back(l);
  }
  return g;
}

PortInfo parsePort(const YAML::Node& node, const std::string& file, const std::string& path, std::string* err) {
  PortInfo p;
  Fields f(node, file, path, err);
  f.allow({"port", "state", "link_layer", "mtu", "netdev", "gids"});
  f.get("port", &p.port);
  f.get("state", &p.state);
  f.get("link_layer", &p.linkLayer);
  f.get("mtu", &p.mtu);
  f.check(p.mtu >= 0, "mtu", "must not be negative, got " + std::to_string(p.mtu));
  f.get("netdev", &p.netdev);
  YAML::Node gids = f.list("gids");
  for (size_t i = 0; i < gids.size() && err->empty(); i++) {
    GidInfo g;
    Fields gf(gids[i], file, item(path, "gids", i), err);
    gf.allow({"index", "gid", "type", "netdev", "ipv4"});
    gf.get("index", &g.index);
    gf.get("gid", &g.gid);
    gf.check(g.gid.empty() || isGidText(g.gid), "gid", "expected an IPv6 address (fe80:0000:... or ::ffff:a.b.c.d), got '" + g.gid + "'");
    gf.get("type", &g.type);
    gf.get("netdev", &g.netdev);
    parseIpv4Field(gf, gids[i], "ipv4", &g.ipv4, false);
    if (g.netdev.empty()) g.netdev = p.netdev;
    p.gids.push_back(g);
  }
  return p;
}

NicInfo parseNic(const YAML::Node& node, const std::string& file, const std::string& path, std::string* err) {
  NicInfo n;
  Fields f(node, file, path, err);
  f.allow({"name", "pci", "ports"});
  f.get("name", &n.name, true);
  f.get("pci", &n.pciBusId);
  YAML::Node ports = f.list("ports");
  for (size_t i = 0; i < ports.size() && err->empty(); i++)
    n.ports.push_back(parsePort(ports[i], file, item(path, "ports", i), err));
  return n;
}

RankTopo parseRank(const YAML::Node& node, const std::string& file, const std::string& path, std::string* err) {
  RankTopo t;
  Fields f(node, file, path, err);
  f.allow({"rank", "host", "boot_id", "cuda_dev", "peermem", "gpus", "nics", "netifs"});
  f.get("rank", &t.rank, true);
  f.get("host", &t.host, true);
  f.check(!t.host.empty(), "host", "must not be empty (ranks on one host share its name)");
  f.get("boot_id", &t.bootId);
  f.get("cuda_dev", &t.cudaDev);
  f.get("peermem", &t.peerMemModule);
  YAML::Node gpus = f.list("gpus");
  std::unordered_set<int> indices;  // a set, not gpuByIndex: a long list stays linear
  for (size_t i = 0; i < gpus.size() && err->empty(); i++) {
    const GpuInfo g = parseGpu(gpus[i], file, item(path, "gpus", i), err);
    if (err->empty() && !indices.insert(g.index).second)
      f.fail(gpus[i], item(path, "gpus", i), "GPU index " + std::to_string(g.index) + " given twice");
    t.gpus.push_back(g);
  }
  // The rank's own GPU is one of those it lists (a probe lists every GPU it sees).
  f.check(t.cudaDev == -1 || indices.count(t.cudaDev), "cuda_dev",
          "GPU " + std::to_string(t.cudaDev) + " is not in this rank's gpus (-1 for none)");
  YAML::Node nics = f.list("nics");
  for (size_t i = 0; i < nics.size() && err->empty(); i++)
    t.nics.push_back(parseNic(nics[i], file, item(path, "nics", i), err));
  YAML::Node netifs = f.list("netifs");
  for (size_t i = 0; i < netifs.size() && err->empty(); i++) {
    NetIf n;
    Fields nf(netifs[i], file, item(path, "netifs", i), err);
    nf.allow({"name", "ipv4"});
    nf.get("name", &n.name, true);
    parseIpv4Field(nf, netifs[i], "ipv4", &n.ipv4, true);
    t.netifs.push_back(n);
  }
  t.source = file;
  return t;
}

}  // namespace

rcnResult_t topoParseText(const std::string& text, const std::string& fileName, std::vector<RankTopo>* ranks) {
  YAML::Node root;
  try {
    const YamlDocuments documents = loadYamlDocuments(text);
    if (documents.extra) {
      RCN_WARN(RCN_LOG_TOPO, "topology file %s:%d: a topology file is one YAML document", fileName.c_str(),
               documents.extraLine);
      return rcnInvalidArgument;
    }
    root = documents.first;
  } catch (const YAML::ParserException& e) {
    RCN_WARN(RCN_LOG_TOPO, "topology file %s:%d: not valid YAML/JSON: %s", fileName.c_str(), e.mark.line + 1,
             e.msg.c_str());
    return rcnInvalidArgument;
  }
  std::string err;
  Fields top(root, fileName, "", &err);
  // class, nnodes, wire, p2p_eligible, reason and rocenante are what a dump
  // says it found; they are recomputed on load, never trusted.
  top.allow({"version", "rocenante", "class", "nnodes", "wire", "p2p_eligible", "reason", "ranks"});
  int version = 0;
  top.get("version", &version, true);
  if (err.empty() && version != 1) top.fail(root["version"], "version", "only version 1 is known, got " + std::to_string(version));
  YAML::Node list = top.list("ranks");
  if (err.empty() && list.size() == 0) top.fail(root, "ranks", "missing or empty list of ranks");
  std::vector<RankTopo> out;
  for (size_t i = 0; i < list.size() && err.empty(); i++) {
    out.push_back(parseRank(list[i], fileName, "ranks[" + std::to_string(i) + "]", &err));
    if (err.empty() && out.back().rank != static_cast<int>(i))
      Fields(list[i], fileName, "ranks[" + std::to_string(i) + "]", &err)
          .fail(list[i]["rank"], "ranks[" + std::to_string(i) + "].rank",
                "ranks must be listed in order 0..n-1, got " + std::to_string(out.back().rank));
  }
  if (!err.empty()) {
    RCN_WARN(RCN_LOG_TOPO, "topology file %s", err.c_str());
    return rcnInvalidArgument;
  }
  *ranks = std::move(out);
  return rcnSuccess;
}

#else

rcnResult_t topoParseText(const std::string&, const std::string& fileName, std::vector<RankTopo>*) {
  RCN_WARN(RCN_LOG_TOPO, "topology file %s: this build has no yaml-cpp, so it cannot read topology files",
           fileName.c_str());
  return rcnInvalidUsage;
}

#endif

rcnResult_t topoLoadFile(const std::string& path, std::vector<RankTopo>* ranks) {
  std::string text, why;
  RCN_ARG_CHECK(readConfigFile(path, &text, &why, kMaxTopoFileBytes), "cannot read topology file %s", why.c_str());
  return topoParseText(text, path, ranks);
}

}  // namespace rcn
