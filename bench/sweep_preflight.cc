// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/dtype.h"

namespace rcn::bench {
namespace {

bool outputWritable(const std::string& path, std::string* why) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      *why = "cannot write " + path + ": it is a directory";
      return false;
    }
    if (access(path.c_str(), W_OK) == 0) return true;
    const int err = errno;
    *why = "cannot write " + path + ": " + std::strerror(err);
    return false;
  }
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(folder.c_str(), W_OK | X_OK) == 0) return true;
  const int err = errno;
  *why = "cannot write " + path + ": " + folder + ": " + std::strerror(err);
  return false;
}

// The host's MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
size_t availableHostMemory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

// Host memory one rank of a host-backend sweep holds at its largest size B,
// in bytes: the send and receive pools and the backend's staging (4 B), and
// for the check every rank's input (nranks B), the expected bits (B) and the
// reference's value and tolerance (two doubles an element; the check reads
// the pools where they are): 15 B for bf16 on 2 ranks, where a sweep at
// 32 MB and 128 MB peaked at 12.5 B (4 B unchecked).
double hostBytesPerRank(const SweepOptions& o, int nranks) {
  const double largest = double(o.maxBytes);
  const double checking = o.verify ? nranks + 1 + 16.0 / dtypeSize(o.dtype) : 0;
  return largest * (4 + checking);
}

}  // namespace

bool outputsWritable(const SweepOptions& o, std::string* why) {
  for (const std::string* path : {&o.jsonPath, &o.csvPath, &o.policyPath})
    if (!path->empty() && !outputWritable(*path, why)) return false;
  return true;
}

bool hostRanksFit(const SweepOptions& o, int localRanks, std::string* why) {
  if (localRanks > kMaxHostRanks) {
    *why = "--gpus " + std::to_string(localRanks) + ": the host backend starts at most " +
           std::to_string(kMaxHostRanks) + " local ranks";
    return false;
  }
  const size_t available = availableHostMemory();
  const double needed = hostBytesPerRank(o, localRanks) * localRanks;
  if (available == 0 || needed <= 0.8 * double(available)) return true;
  char text[240];
  std::snprintf(text, sizeof text,
                "the host backend's buffers would need about %.1f GB (%d ranks at --max-bytes %s, the check "
                "included), more than 80%% of the %.1f GB this machine has available: lower --max-bytes or --gpus%s",
                needed / 1e9, localRanks, formatBytes(o.maxBytes).c_str(), double(available) / 1e9,
                o.verify ? ", or add --no-verify" : "");
  *why = text;
  return false;
}

}  // namespace rcn::bench
