// SPDX-License-Identifier: BSD-3-Clause
// rocenante-probe: prints what rocenante sees. Alone, it describes this
// machine (GPUs, links, RDMA NICs, GIDs, locality, GPUDirect support).
// Started by a launcher on several ranks (torchrun / mpirun / srun variables,
// MASTER_ADDR and MASTER_PORT), it gathers every rank's view and prints the
// communicator's class and whether rocenante would be used, and why; with
// --comm it then builds a real communicator to show what creation decided.
#include <sys/stat.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bootstrap_env.h"
#include "core/check.h"
#include "core/cli_args.h"
#include "core/launch_env.h"
#include "probe_comm.h"
#include "probe_rdma_check.h"
#include "probe_verdict.h"
#include "topology/topology.h"

namespace {

struct Options {
  bool json = false;
  bool comm = false;  // also build a communicator (rcnCommInitRank) and run one all-reduce
  bool rdmaCheck = false;  // check the verbs wire between every pair of ranks instead (probe_rdma_check.h)
  std::string root;  // probe a sysfs tree instead of this machine (tests, demos)
  int gpu = -2;      // -2: pick from the local rank
};

const char* kUsage =
    "usage: rocenante-probe [--json] [--comm | --rdma-check] [--gpu N] [--root DIR]\n"
    "  Alone: prints this machine's GPUs, GPU links, RDMA devices, ports, GIDs\n"
    "  (RoCE version, IPv4 subnet), GPU-to-NIC locality and GPUDirect RDMA support.\n"
    "  Under a launcher (RANK/WORLD_SIZE with MASTER_ADDR/MASTER_PORT, or the\n"
    "  OMPI_COMM_WORLD_*, PMI_* or SLURM_* equivalents): every rank probes, rank 0\n"
    "  prints the communicator's topology class and whether rocenante would be used.\n"
    "  --json     machine-readable output (the ROCENANTE_TOPO_FILE format)\n"
    "  --comm     under a launcher: then build a communicator (rcnCommInitRank), run\n"
    "             one checked all-reduce and print what rcnCommQuery reports on every\n"
    "             rank (path, transport, self-test, reason), or why creation failed\n"
    "  --rdma-check  instead: the verbs wire between every pair of ranks (one rank\n"
    "             per host, under a launcher): device, port, GID, MTU, link layer,\n"
    "             latency, bandwidth, an ordering stress of each flag protocol,\n"
    "             and whether the RDMA fast path will be used (docs/MULTINODE.md)\n"
    "  --gpu N    this rank's GPU, -1 for none (default: local rank modulo the GPU count)\n"
    "  --root DIR read sysfs/procfs under DIR instead of / (no CUDA; for tests)\n"
    "  Environment: ROCENANTE_TOPO_FILE, ROCENANTE_TOPO_DUMP_FILE (docs/TOPOLOGY.md).\n";

// Every option the probe takes; applyOption sets them.
const std::vector<rcn::CliOption> kProbeOptions = {
    {"-h", false},   {"--help", false}, {"--json", false},       {"--comm", false},
    {"--gpu", true}, {"--root", true},  {"--rdma-check", false},
};

bool applyOption(const rcn::CliArg& arg, Options* opt) {
  if (arg.name == "-h" || arg.name == "--help") {
    fputs(kUsage, stdout);
    exit(0);
  } else if (arg.name == "--json") {
    opt->json = true;
  } else if (arg.name == "--comm") {
    opt->comm = true;
  } else if (arg.name == "--rdma-check") {
    opt->rdmaCheck = true;
  } else if (arg.name == "--root") {
    struct stat st;
    if (stat(arg.value.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      fprintf(stderr, "rocenante-probe: --root '%s' is not a directory\n", arg.value.c_str());
      return false;
    }
    opt->root = arg.value;
  } else if (arg.name == "--gpu") {
    char* end = nullptr;
    const long g = strtol(arg.value.c_str(), &end, 10);
    if (arg.value.empty() || *end || g < -1 || g > 1024) {
      fprintf(stderr, "rocenante-probe: --gpu '%s' is not a GPU index (0 or more, or -1 for none)\n",
              arg.value.c_str());
      return false;
    }
    opt->gpu = static_cast<int>(g);
  }
  return true;
}

bool parseArgs(int argc, char** argv, Options* opt) {
  std::vector<rcn::CliArg> args;
  std::string why;
  if (!rcn::parseCli(argc, argv, kProbeOptions, &args, &why)) {
    fprintf(stderr, "rocenante-probe: %s\n%s", why.c_str(), kUsage);
    return false;
  }
  for (const rcn::CliArg& arg : args)
    if (!applyOption(arg, opt)) return false;
  return true;
}

int pickGpu(const Options& opt, const rcn::LauncherInfo& launch) {
  if (!opt.root.empty()) return opt.gpu >= 0 ? opt.gpu : -1;
  int count = rcn::visibleGpuCount();
  if (count == 0) return -1;
  if (opt.gpu != -2) return opt.gpu < count ? opt.gpu : -1;
  int local = launch.localRank >= 0 ? launch.localRank : launch.rank;
  return local % count;
}

rcnResult_t discover(const Options& opt, int rank, int gpu, rcn::RankTopo* out) {
  if (opt.root.empty()) return rcn::topoDiscoverLocal(rank, gpu, out);
  rcn::TopoProbeOptions po;
  po.root = opt.root;
  po.cudaDev = gpu;
  po.useCuda = false;
  return rcn::topoProbeLocal(po, rank, out);
}

std::string verdictJson(const rcn::probe::Verdict& v) {
  return std::string("{\"used\": ") + (v.used ? "true" : "false") + ", \"path\": " + rcn::jsonQuote(v.path) +
         ", \"reason\": " + rcn::jsonQuote(v.reason) + "}";
}

// The line every rank prints in the multi-rank mode, so a launcher's merged
// output shows that all ranks reached the same verdict.
std::string summaryLine(int rank, const rcn::CommTopo& topo, const rcn::probe::Verdict& v) {
  return "rank " + std::to_string(rank) + "/" + std::to_string(topo.ranks.size()) +
         ": class=" + rcn::topoClassName(topo.cls) + " nodes=" + std::to_string(topo.nnodes) +
         " rocenante=" + (v.used ? "yes" : "no") + " path=" + v.path + " reason: " +
         (v.used ? topo.reason : v.reason);
}

void printNodes(const rcn::CommTopo& topo) {
  printf("nodes:\n");
  for (int n = 0; n < topo.nnodes; n++) {
    std::string ranks, subnets;
    for (size_t r = 0; r < topo.ranks.size(); r++) {
      if (topo.nodeOfRank[r] != n) continue;
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      for (const std::string& s : rcn::rdmaSubnets(topo.ranks[r]))
        if (subnets.find(s) == std::string::npos) subnets += " " + s;
    }
    printf("  %-20s ranks %-12s RDMA subnets:%s\n", topo.nodeNames[n].c_str(), ranks.c_str(),
           subnets.empty() ? " none" : subnets.c_str());
  }
}

int runAlone(const Options& opt, const rcn::LauncherInfo& launch) {
  rcn::CommTopo topo;
  topo.ranks.resize(1);
  if (discover(opt, 0, pickGpu(opt, launch), &topo.ranks[0]) != rcnSuccess) return 1;
  if (rcn::topoClassify(&topo) != rcnSuccess) return 1;
  rcn::probe::Verdict v = rcn::probe::verdictFor(topo);
  rcn::topoDumpIfAsked(topo);
  if (opt.json) {
    fputs(rcn::topoToJson(topo, verdictJson(v)).c_str(), stdout);
    return 0;
  }
  fputs(rcn::topoLocalTable(topo.ranks[0]).c_str(), stdout);
  printf("\nRun it under a launcher (torchrun, mpirun, srun) on every rank to see the\n"
         "communicator's class and whether rocenante will be used.\n");
  return 0;
}

int runRanks(const Options& opt, const rcn::LauncherInfo& launch) {
  std::unique_ptr<rcn::Bootstrap> boot;
  if (rcn::bootstrapInitFromEnv(launch.rank, launch.nranks, launch.masterAddr.c_str(), launch.masterPort, &boot) !=
      rcnSuccess) {
    fprintf(stderr, "rocenante-probe: rank %d could not join the others at %s:%d (see the warning above)\n",
            launch.rank, launch.masterAddr.c_str(), launch.masterPort);
    return 1;
  }
  rcn::RankTopo local;
  rcn::CommTopo topo;
  int gpu = pickGpu(opt, launch);
  if (discover(opt, launch.rank, gpu, &local) != rcnSuccess ||
      rcn::topoGather(*boot, local, &topo) != rcnSuccess || rcn::topoClassify(&topo) != rcnSuccess) {
    fprintf(stderr, "rocenante-probe: rank %d: topology exchange failed (see the warning above)\n", launch.rank);
    return 1;
  }
  rcn::probe::Verdict v = rcn::probe::verdictFor(topo);
  if (launch.rank == 0) rcn::topoDumpIfAsked(topo);
  if (launch.rank == 0 && opt.json) {
    fputs(rcn::topoToJson(topo, verdictJson(v)).c_str(), stdout);
  } else if (launch.rank == 0) {
    printf("rank 0's machine:\n%s\n", rcn::topoLocalTable(local).c_str());
    printNodes(topo);
    printf("class: %s (%d node%s, %zu ranks)\n", rcn::topoClassName(topo.cls), topo.nnodes,
           topo.nnodes == 1 ? "" : "s", topo.ranks.size());
    printf("why: %s\n", topo.reason.c_str());
    const char* use = v.used ? "will be used"
                      : v.path == "nccl" ? "will not be used; NCCL takes every call"
                                         : "will not be used";
    printf("rocenante: %s (%s)\n", use, v.reason.c_str());
  }
  // Summaries go to stderr under --json so stdout stays one JSON document.
  FILE* summaries = opt.json ? stderr : stdout;
  fprintf(summaries, "%s\n", summaryLine(launch.rank, topo, v).c_str());
  fflush(stdout);
  if (opt.comm) {
    std::string line;
    // Under --root the GPU index names the fixture's device, not one of this machine's.
    int commGpu = opt.root.empty() ? gpu : -1;
    rcnResult_t res = rcn::probe::tryComm(*boot, launch.rank, launch.nranks, commGpu, &line);
    if (!line.empty()) fprintf(summaries, "%s\n", line.c_str());
    fflush(summaries);
    if (res != rcnSuccess) {
      fprintf(stderr, "rocenante-probe: rank %d: the communicator check failed (see above)\n", launch.rank);
      return 1;
    }
  }
  // Keep rank 0's bootstrap alive until everyone has its answer.
  return boot->barrier() == rcnSuccess ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parseArgs(argc, argv, &opt)) return 2;
  rcn::LauncherInfo launch;
  std::string why;
  if (!rcn::parseLauncherEnv(rcn::processEnv(), &launch, &why)) {
    fprintf(stderr, "rocenante-probe: %s\n", why.c_str());
    return 2;
  }
  if (opt.rdmaCheck) return rcn::probe::runRdmaCheck(launch, opt.json);
  if (launch.external && launch.nranks > 1) return runRanks(opt, launch);
  return runAlone(opt, launch);
}
