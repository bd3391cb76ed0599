// SPDX-License-Identifier: BSD-3-Clause
// Putting discovery together: probe (or load ROCENANTE_TOPO_FILE), exchange
// over the bootstrap, classify, and dump when asked.
#include "topology/topology.h"

#include <cstring>

#include "core/check.h"
#include "core/params.h"

namespace rcn {

rcnResult_t topoProbeLocal(const TopoProbeOptions& opt, int rank, RankTopo* out) {
  RankTopo t;
  t.rank = rank;
  t.cudaDev = opt.cudaDev;
  t.source = "probe";
  RCN_CHECK(discoverHost(opt, &t));
  RCN_CHECK(discoverNetifs(opt, &t));
  RCN_CHECK(discoverGpus(opt, &t));
  RCN_CHECK(discoverRdma(opt, &t));
  RCN_CHECK(discoverLocality(opt, &t));
  *out = std::move(t);
  return rcnSuccess;
}

rcnResult_t topoDiscoverLocal(int rank, int cudaDev, RankTopo* out, int nranks) {
  std::string file = paramStr(ParamId::TopoFile);
  if (file.empty()) {
    TopoProbeOptions opt;
    opt.cudaDev = cudaDev;
    return topoProbeLocal(opt, rank, out);
  }
  std::vector<RankTopo> ranks;
  RCN_CHECK(topoLoadFile(file, &ranks));
  RCN_ARG_CHECK(nranks < 0 || ranks.size() == size_t(nranks),
                "ROCENANTE_TOPO_FILE %s describes %zu ranks, the communicator has %d", file.c_str(), ranks.size(),
                nranks);
  for (RankTopo& t : ranks) {
    if (t.rank != rank) continue;
    *out = t;
    out->source = file;
    RCN_INFO(RCN_LOG_TOPO, "rank %d: topology from ROCENANTE_TOPO_FILE %s", rank, file.c_str());
    return rcnSuccess;
  }
  RCN_WARN(RCN_LOG_TOPO, "ROCENANTE_TOPO_FILE %s: no entry for rank %d (it describes %zu ranks)", file.c_str(),
           rank, ranks.size());
  return rcnInvalidArgument;
}

rcnResult_t topoGather(Bootstrap& bootstrap, const RankTopo& local, CommTopo* out) {
  int n = bootstrap.nranks(), me = bootstrap.rank();
  std::string blob = topoEncode(local);
  // Blobs differ in length: agree on the longest first, then exchange padded.
  std::vector<uint64_t> sizes(n, 0);
  sizes[me] = blob.size();
  RCN_CHECK(bootstrap.allGather(sizes.data(), sizeof(uint64_t)));
  uint64_t longest = 0;
  for (uint64_t s : sizes) longest = std::max(longest, s);
  RCN_ARG_CHECK(longest > 0 && longest < (64u << 20), "topology exchange: implausible blob size %llu",
                static_cast<unsigned long long>(longest));
  std::vector<char> all(static_cast<size_t>(longest) * n, 0);
  memcpy(all.data() + static_cast<size_t>(longest) * me, blob.data(), blob.size());
  RCN_CHECK(bootstrap.allGather(all.data(), longest));
  out->ranks.assign(n, RankTopo{});
  for (int r = 0; r < n; r++) {
    std::string theirs(all.data() + static_cast<size_t>(longest) * r, sizes[r]);
    RCN_CHECK(topoDecode(theirs, &out->ranks[r]));
    RCN_ARG_CHECK(out->ranks[r].rank == r, "topology exchange: rank %d sent the description of rank %d "
                  "(ROCENANTE_TOPO_FILE entries must match the ranks)", r, out->ranks[r].rank);
  }
  return rcnSuccess;
}

rcnResult_t topoBuild(Bootstrap& bootstrap, int cudaDev, CommTopo* out) {
  RankTopo local;
  RCN_CHECK(topoDiscoverLocal(bootstrap.rank(), cudaDev, &local, bootstrap.nranks()));
  CommTopo topo;
  RCN_CHECK(topoGather(bootstrap, local, &topo));
  RCN_CHECK(topoClassify(&topo));
  RCN_INFO(RCN_LOG_TOPO | RCN_LOG_INIT, "topology: %s, %d node%s: %s", topoClassName(topo.cls), topo.nnodes,
           topo.nnodes == 1 ? "" : "s", topo.reason.c_str());
  if (bootstrap.rank() == 0) topoDumpIfAsked(topo);
  *out = std::move(topo);
  return rcnSuccess;
}

// A dump that cannot be written is not fatal (rank 0 alone would fail):
// topoWriteFile has warned with the reason.
void topoDumpIfAsked(const CommTopo& topo) {
  std::string dump = paramStr(ParamId::TopoDumpFile);
  if (!dump.empty() && topoWriteFile(dump, topo) != rcnSuccess)
    RCN_INFO(RCN_LOG_TOPO, "ROCENANTE_TOPO_DUMP_FILE %s not written; continuing", dump.c_str());
}

}  // namespace rcn
