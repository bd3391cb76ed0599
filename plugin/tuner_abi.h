// SPDX-License-Identifier: BSD-3-Clause
// NCCL's tuner plugin ABI, as NCCL's ext-tuner headers lay it out (our own
// declarations of the same layout): NCCL looks the exported table up by name,
// newest first, and calls through it.
//   v6 (NCCL 2.30+): v5's table plus getChunkSize (optional: null keeps NCCL's)
//   v5 (NCCL 2.28):  init takes the communicator id, NVLink-domain info and
//                    NCCL's constants; finalize replaces destroy
//   v4 (NCCL 2.27):  init(nRanks, nNodes, logger, context)
// NCCL 2.32 also defines a v7 (a larger constants block) and still loads v6.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace rcn::tuner_abi {

// ncclDebugLogger_t: NCCL's own log function, passed to init.
typedef void (*Logger)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
// ncclDebugLogLevel and the NCCL_TUNING subsystem flag.
constexpr int kNcclLogWarn = 2, kNcclLogInfo = 3, kNcclLogTrace = 5;
constexpr unsigned long kSubsysTuning = 64;

// The collective (ncclFunc_t) and the cost table: numAlgo rows of numProto floats.
typedef ncclResult_t (*GetCollInfoFn)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                                      int numAlgo, int numProto, int regBuff, int* nChannels);

struct NvlDomainInfo {  // ncclNvlDomainInfo_v5_t (v6 uses the same)
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};

// init of v5 and v6: `constants` points at NCCL's latency/bandwidth table,
// which a plugin may edit (we leave it alone).
typedef ncclResult_t (*InitV5Fn)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, Logger logFunction,
                                 NvlDomainInfo* nvlDomainInfo, void* constants);

struct TunerV4 {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, Logger logFunction, void** context);
  GetCollInfoFn getCollInfo;
  ncclResult_t (*destroy)(void* context);
};

struct TunerV5 {
  const char* name;
  InitV5Fn init;
  GetCollInfoFn getCollInfo;
  ncclResult_t (*finalize)(void* context);
};

struct TunerV6 {
  const char* name;
  InitV5Fn init;
  GetCollInfoFn getCollInfo;
  ncclResult_t (*finalize)(void* context);
  ncclResult_t (*getChunkSize)(void* context, int collType, size_t nBytes, int algo, int proto, int nChannels,
                               size_t* chunkSize);
};

}  // namespace rcn::tuner_abi
