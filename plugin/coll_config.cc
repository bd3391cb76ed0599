// SPDX-License-Identifier: BSD-3-Clause
// The per-call config of nccl<Coll>Config (NCCL 2.31+): whether it asks
// anything of the call. A config that asks nothing (null, or every attribute
// at its default) is the plain call by NCCL's own definition, so the shim
// routes it as the plain twin (an all-reduce may take the fast path). Any
// attribute set (CTA bounds, an algorithm selection, a profiler tag, a launch
// completion event, a vendor extension) is something only NCCL can honour, so
// the call goes to NCCL's Config entry point. NCCL requires the same config
// on every rank, so this decision is the same on every rank.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "core/log.h"
#include "plugin/real_nccl.h"

namespace rcn::shim {
namespace {

// The layout of ncclCollConfig_t as NCCL's nccl.h defines it (2.31 and 2.32;
// NCCL only appends members, and `size` says how many the caller has).
struct CollConfigAbi {
  size_t size;
  unsigned int magic;
  unsigned int version;
  void* ext;
  int minCTAs, maxCTAs, nvlsCTAs, cgaClusterSize;
  const char* algSelection;
  int forceAlgSelection;
  int ctaPolicy;
  uint64_t userProfilerTag;
  void* launchCompletionEvent;  // NCCL 2.32
};

constexpr unsigned int kConfigMagic = 0xcafebeef;  // NCCL's API magic
constexpr int kUndefInt = INT_MIN;                 // NCCL_CONFIG_UNDEF_INT

// Whether the caller's config has `member` (its size covers it).
#define HAS_MEMBER(cfg, member) ((cfg)->size >= offsetof(CollConfigAbi, member) + sizeof((cfg)->member))

// The first attribute the config sets, or null when it sets none. A config
// NCCL would refuse (bad magic, too small) is "set" too: NCCL reports it.
const char* firstSetAttribute(const CollConfigAbi* c) {
  if (c->magic != kConfigMagic || !HAS_MEMBER(c, userProfilerTag)) return "size/magic (not initialized)";
  if (c->ext) return "ext";
  if (c->minCTAs != kUndefInt) return "minCTAs";
  if (c->maxCTAs != kUndefInt) return "maxCTAs";
  if (c->nvlsCTAs != kUndefInt) return "nvlsCTAs";
  if (c->cgaClusterSize != kUndefInt) return "cgaClusterSize";
  if (c->algSelection && *c->algSelection) return "algSelection";
  if (c->ctaPolicy != kUndefInt) return "CTAPolicy";
  if (c->userProfilerTag != 0) return "userProfilerTag";
  if (HAS_MEMBER(c, launchCompletionEvent) && c->launchCompletionEvent) return "launchCompletionEvent";
  return nullptr;  // forceAlgSelection only matters with an algSelection
}

#undef HAS_MEMBER

// One INFO line per entry point and attribute: the first call that goes to
// NCCL because of what its config asks.
void logSentToNccl(const char* name, const char* attribute) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mutex);
  if (!logged.insert(std::string(name) + "/" + attribute).second) return;
  RCN_INFO(RCN_LOG_SHIM, "%s: the config sets %s, which only NCCL honours; such calls go to NCCL", name, attribute);
}

}  // namespace

bool collConfigIsPlain(const ncclCollConfig_t* config, const char* name) {
  if (!config) return true;
  const char* set = firstSetAttribute(reinterpret_cast<const CollConfigAbi*>(config));
  if (!set) return true;
  logSentToNccl(name, set);
  return false;
}

}  // namespace rcn::shim
