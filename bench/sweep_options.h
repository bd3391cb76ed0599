// SPDX-License-Identifier: BSD-3-Clause
// What the sweep was asked to do: command-line options and the size list.
// Pure (no CUDA, no NCCL), so tests/test_bench_*.cc check it on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn::bench {

struct SweepOptions {
  int nprocs = 0;                 // --gpus/--nprocs: local processes to start; 0: one per GPU (2 without GPU)
  size_t minBytes = 8;            // --min-bytes
  size_t maxBytes = 64u << 20;    // --max-bytes
  bool maxBytesGiven = false;     // the host backend lowers the default when not given
  double factor = 4.0;            // --factor
  rcnDataType_t dtype = rcnBfloat16;  // --dtype bf16|fp16|fp32
  rcnRedOp_t op = rcnSum;         // --op sum|max|min
  bool graph = true;              // --mode graph|eager|both
  bool eager = true;
  std::vector<std::string> methods;  // --methods a,b,...: empty means all
  int trials = 5;                 // --trials: timed trials per point (median and spread over these)
  int opsPerGraph = 20;           // --graph-ops: all-reduces captured in one CUDA graph
  size_t rotateBytes = 128u << 20;    // --rotate-bytes: buffer pool each of send/recv rotates through
  size_t oneShotMaxBytes = 64u << 20; // --oneshot-max-bytes: slot size of the forced one-shot comm
  bool verify = true;             // --no-verify turns the #wrong check off
  bool progress = true;           // --no-progress
  std::string jsonPath;           // --json FILE
  std::string csvPath;            // --csv FILE
  std::string policyPath;         // --write-policy FILE
  std::string note;               // --note TEXT: recorded in JSON (commit, host, ...)
  bool help = false;
};

// The most message sizes one sweep lists (listSweepSizes refuses more).
constexpr int kMaxSweepSizes = 256;
constexpr int kMaxTrials = 1000;  // --trials

// Parses argv. Returns false with a one-line reason naming the bad option.
// Sizes accept K/M/G suffixes (powers of 1024), like ROCENANTE_* integers.
bool parseSweepArgs(int argc, const char* const* argv, SweepOptions* out, std::string* why);

// The usage text printed by --help and after a bad option.
std::string sweepUsage(const char* program);

// Message sizes from minBytes to maxBytes, each `factor` times the previous
// (rounded to whole bytes, strictly increasing), rounded down to a whole number
// of elements of elemSize, up where that would fall below minBytes; none
// beyond maxBytes. With a limit, stops after limit + 1 sizes (enough to tell
// that there are more than limit).
std::vector<size_t> sweepSizes(size_t minBytes, size_t maxBytes, double factor, size_t elemSize,
                               size_t limit = SIZE_MAX);

// The sizes of o (sweepSizes, with --max-bytes final), or false with why
// when there are more than kMaxSweepSizes.
bool listSweepSizes(const SweepOptions& o, std::vector<size_t>* sizes, std::string* why);

// "bf16", "fp16", "fp32" (and NCCL's spellings) to a data type.
bool parseDtype(const std::string& text, rcnDataType_t* out);
const char* dtypeShortName(rcnDataType_t t);

// 1024 -> "1K", 65536 -> "64K", 3 << 20 -> "3M", 1000 -> "1000".
std::string formatBytes(size_t bytes);

}  // namespace rcn::bench
