// SPDX-License-Identifier: BSD-3-Clause
/*
 * rocenante: one-shot all-reduce for small, latency-bound messages.
 *
 * The API mirrors NCCL's so that users already know it: same argument order,
 * same numeric values for data types, reduction ops and result codes (checked
 * at compile time against nccl.h). Every call the fast path does not take is
 * sent to a stock NCCL communicator built over the same ranks, so
 * rcnAllReduce is complete for every size, type and op.
 */
#ifndef ROCENANTE_ROCENANTE_H_
#define ROCENANTE_ROCENANTE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ROCENANTE_MAJOR 0
#define ROCENANTE_MINOR 1
#define ROCENANTE_PATCH 0
#define ROCENANTE_VERSION_CODE (ROCENANTE_MAJOR * 10000 + ROCENANTE_MINOR * 100 + ROCENANTE_PATCH)

/* cudaStream_t without pulling in the CUDA headers. */
typedef struct CUstream_st* rcnStream_t;

typedef enum {
  rcnSuccess = 0,
  rcnUnhandledCudaError = 1,
  rcnSystemError = 2,
  rcnInternalError = 3,
  rcnInvalidArgument = 4,
  rcnInvalidUsage = 5,
  rcnRemoteError = 6,
  rcnInProgress = 7,
  rcnNumResults = 8
} rcnResult_t;

typedef enum {
  rcnInt8 = 0,
  rcnUint8 = 1,
  rcnInt32 = 2,
  rcnUint32 = 3,
  rcnInt64 = 4,
  rcnUint64 = 5,
  rcnFloat16 = 6,
  rcnFloat32 = 7,
  rcnFloat64 = 8,
  rcnBfloat16 = 9,
  rcnFloat8e4m3 = 10,
  rcnFloat8e5m2 = 11,
  rcnNumTypes = 12
} rcnDataType_t;

typedef enum {
  rcnSum = 0,
  rcnProd = 1,
  rcnMax = 2,
  rcnMin = 3,
  rcnAvg = 4,
  rcnNumOps = 5
} rcnRedOp_t;

#define RCN_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[RCN_UNIQUE_ID_BYTES];
} rcnUniqueId;

typedef struct rcnComm* rcnComm_t;

/* Which path a communicator's small all-reduces take. */
typedef enum {
  rcnPathNccl = 0,  /* fast path off: every call goes to NCCL */
  rcnPathP2p = 1,   /* same host, GPU stores into peer memory */
  rcnPathProxy = 2, /* GPU kernel + host proxy thread moving bytes over a wire */
  rcnPathHost = 3   /* no GPU: buffers in host memory, reduction on the CPU */
} rcnPath_t;

/* What rcnCommQuery reports about a communicator. */
typedef struct {
  int rank;
  int nranks;
  int cudaDev;             /* -1 on the host backend */
  rcnPath_t path;          /* the path small all-reduces take */
  char transport[32];      /* "p2p-ipc", "p2p-local", "proxy-shm", "host-tcp", "nccl", ... */
  size_t maxBytes;         /* largest message the fast path takes; larger ones go to NCCL
                              (SIZE_MAX on the host backend, which has no NCCL and takes all;
                              with ROCENANTE_NATIVE_NCCL=0 larger ones fail, or, with
                              one rank, are copies) */
  int selfTestPassed;      /* 1 if the startup self-test passed on every rank */
  double selfTestUsFast;   /* self-test: the fast path's us per call, fastest batch, summed over sizes to 256 KB (0 if not run) */
  double selfTestUsNccl;   /* same for NCCL on the same communicator (0 if not run) */
  char reason[256];        /* why this path was chosen, or why the fast path is off */
} rcnCommInfo;

rcnResult_t rcnGetVersion(int* version);
/* The id holds the root's address and a random secret that every connection
 * of the communicator must prove it knows: whoever has the id can join, so
 * hand it to the ranks as you would a password (not on a command line). */
rcnResult_t rcnGetUniqueId(rcnUniqueId* uniqueId);

/* One rank per call; every rank of the communicator calls it with the same id. */
rcnResult_t rcnCommInitRank(rcnComm_t* comm, int nranks, rcnUniqueId commId, int rank);

/* One process drives ndev GPUs: comm[i] is rank i on devlist[i] (or device i if
 * devlist is NULL). */
rcnResult_t rcnCommInitAll(rcnComm_t* comm, int ndev, const int* devlist);

/* Where an external launcher (torchrun, mpirun, srun) put this process, read
 * from its environment: RANK/WORLD_SIZE/LOCAL_RANK (torchrun),
 * OMPI_COMM_WORLD_* (OpenMPI), PMI_RANK/PMI_SIZE (PMI), SLURM_PROCID/
 * SLURM_STEP_NUM_TASKS/SLURM_LOCALID (Slurm, inside an srun step), checked
 * in that order. */
typedef struct {
  int rank;
  int nranks;
  int localRank;   /* rank among this host's processes; -1 when the launcher does not say */
  char source[32]; /* "torchrun", "OpenMPI", "PMI" or "Slurm" */
} rcnLaunchInfo;

/* rcnSuccess and info filled when a launcher started this process.
 * rcnInvalidUsage when no launcher variables are set (info->nranks is then 0;
 * a query, so this is logged at INFO only, not as a warning).
 * rcnInvalidArgument when they are set but wrong (a rank outside the world, a
 * value that is not a number, a bad MASTER_PORT, several ranks without
 * MASTER_ADDR); the logged reason (rcnGetLastError) names the variable. */
rcnResult_t rcnGetLaunchInfo(rcnLaunchInfo* info);

/* rcnCommInitRank for a process started by a launcher: every rank calls it,
 * rank 0 listens on MASTER_PORT (default 29500) and hands the unique id to the
 * others, which connect to MASTER_ADDR:MASTER_PORT; each wait is bounded by
 * ROCENANTE_BOOTSTRAP_TIMEOUT_MS. With ROCENANTE_BOOTSTRAP_KEY (or
 * ROCENANTE_BOOTSTRAP_KEY_FILE) set alike on every rank, only processes that
 * prove they hold that key get the id; without one, anyone who reaches
 * MASTER_PORT can, as with torchrun's own store. Like rcnCommInitRank it uses the current
 * CUDA device (set it first, e.g. from localRank), or host memory when
 * ROCENANTE_BACKEND=host. Errors as rcnGetLaunchInfo, then as rcnCommInitRank. */
rcnResult_t rcnCommInitFromLaunch(rcnComm_t* comm);

/* Waits for the communicator's outstanding work (a call on another thread
 * included) and frees it. Each wait is bounded by ROCENANTE_TIMEOUT_MS: past
 * it, device memory is leaked with a warning rather than freed under a
 * running kernel. Destroy and abort may race from different threads; the
 * first frees the communicator, and a later call on the handle returns
 * rcnInvalidArgument ("already destroyed"). docs/design.md has the details. */
rcnResult_t rcnCommDestroy(rcnComm_t comm);

/* Stops every pending wait of this communicator and frees it. Always returns,
 * its own waits within ROCENANTE_TIMEOUT_MS in all (plus what ncclCommAbort
 * takes), even while work that is not rocenante's keeps the GPU busy (its
 * device memory is then left allocated). A call it interrupts on another
 * thread returns rcnRemoteError, and rcnGetLastError says the communicator
 * was aborted. */
rcnResult_t rcnCommAbort(rcnComm_t comm);

/* Like ncclAllReduce; every rank makes the same call (count, type, op).
 * Calls on one communicator are ordered (one stream, or streams ordered with
 * events) and come from one thread at a time (a concurrent call returns
 * rcnInvalidUsage). Buffers are device pointers aligned to the element size
 * (host memory on the host backend, where the call returns with the result);
 * sendbuff == recvbuff is in place, other overlaps are refused. Small calls
 * take the fast path, the rest go to NCCL. A fast-path error (a peer that did
 * not arrive within ROCENANTE_TIMEOUT_MS, a peer whose call differed) is
 * recorded for rcnCommGetAsyncError and returned at once by every later
 * fast-path call: abort the communicator. docs/design.md says what each path
 * checks. */
rcnResult_t rcnAllReduce(const void* sendbuff, void* recvbuff, size_t count, rcnDataType_t datatype,
                         rcnRedOp_t op, rcnComm_t comm, rcnStream_t stream);

/* Like ncclAllGather: recvbuff holds nranks * sendcount elements, rank r's
 * sendbuff landing at element offset r * sendcount on every rank. In place
 * when sendbuff == recvbuff + rank * sendcount (elements); buffers that
 * overlap otherwise are refused (rcnInvalidArgument). Every rank gets the
 * same bytes. The fast path takes it while nranks * sendcount * size is at
 * most ROCENANTE_ALLGATHER_MAX_BYTES (docs/COLLECTIVES.md), else NCCL; the
 * rest of rcnAllReduce's contract (ordering, errors, host backend) holds. */
rcnResult_t rcnAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, rcnDataType_t datatype, rcnComm_t comm,
                         rcnStream_t stream);

/* Like ncclReduceScatter: sendbuff holds nranks * recvcount elements; rank r
 * receives the reduction over ranks of block r. In place when
 * recvbuff == sendbuff + rank * recvcount (elements); buffers that overlap
 * otherwise are refused. Reduced in rank order with rcnAllReduce's
 * accumulation, so each block is bit-identical to what rcnAllReduce gives
 * for it. The fast path takes it while nranks * recvcount * size is at most
 * ROCENANTE_REDUCESCATTER_MAX_BYTES, else NCCL. */
rcnResult_t rcnReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, rcnDataType_t datatype,
                             rcnRedOp_t op, rcnComm_t comm, rcnStream_t stream);

/* All-reduce (sum) of sendbuff [tokens x hidden] fused with the residual add and RMSNorm that
 * follow it in a transformer layer:
 *   residual <- residual + sum_over_ranks(sendbuff)           (datatype, written back)
 *   normOut  <- RMSNorm(residual) * weight                     (weight: [hidden], datatype)
 * datatype is rcnBfloat16 or rcnFloat16, accumulation in fp32. normType is datatype, or
 * rcnFloat8e4m3 with normScale a device pointer to one float (normOut = e4m3(norm / *normScale));
 * normScale is NULL otherwise. eps is finite and >= 0.
 * The bits are those of rcnAllReduce (sum in rank order, rounded to datatype), then
 * residual = datatype(residual + sum), then x * (1 / sqrt(mean(x^2) + eps)) * weight in fp32
 * (x the new residual, the mean's order fixed by hidden), rounded once to normType (e4m3
 * saturates): bit-identical on every rank and on every path. On the p2p path, for a call
 * whose all-reduce rcnAllReduce would send there, whose hidden is a multiple of 4 and whose
 * tokens * hidden * 2 bytes fit ROCENANTE_LL_MAX_BYTES, it is one kernel; elsewhere it is the all-reduce
 * (rocenante's fast path or NCCL, as rcnAllReduce routes it) followed by rocenante's norm kernel,
 * with the same result contract. residual and normOut must not overlap each other, sendbuff or
 * weight. Ordering, errors and the host backend (host pointers, normScale too; the stream is
 * ignored) as for rcnAllReduce; tokens == 0 does nothing. */
rcnResult_t rcnAllReduceResidualRmsNorm(const void* sendbuff, void* residual, const void* weight, void* normOut,
                                        size_t tokens, size_t hidden, rcnDataType_t datatype, rcnDataType_t normType,
                                        const float* normScale, float eps, rcnComm_t comm, rcnStream_t stream);

/* rcnSuccess, or the error a kernel or proxy recorded (rcnRemoteError for a
 * missing peer, rcnInvalidUsage for a peer whose call differed or a device-API
 * call of this rank's that broke its rules); rcnGetLastError then names it. */
rcnResult_t rcnCommGetAsyncError(rcnComm_t comm, rcnResult_t* asyncError);

rcnResult_t rcnCommQuery(rcnComm_t comm, rcnCommInfo* info);

/* *takesFastPath = 1 when an rcnAllReduce of count elements of datatype with
 * op on stream would take comm's fast path, 0 when it would go to NCCL (or,
 * without NCCL beside the path, be refused). Decided as rcnAllReduce decides:
 * from the call's size, type and op, whether the stream is being captured
 * into a CUDA graph, and the policy every rank agreed on, never from pointers
 * or timing, so every rank gets the same answer for the same call. */
rcnResult_t rcnCommTakesFastPath(rcnComm_t comm, size_t count, rcnDataType_t datatype, rcnRedOp_t op,
                                 rcnStream_t stream, int* takesFastPath);

rcnResult_t rcnCommCount(rcnComm_t comm, int* count);
rcnResult_t rcnCommUserRank(rcnComm_t comm, int* rank);
rcnResult_t rcnCommCuDevice(rcnComm_t comm, int* device);

/* The device-side exchange of a communicator whose fast path is p2p (ranks
 * on one host whose GPUs reach each other's memory), for kernels that fuse
 * the one-shot all-reduce into their own work: a producer kernel stores its
 * partial values straight into every rank's window, a later consumer kernel
 * sums them, and no all-reduce kernel runs between. rocenante/device.cuh has
 * the device functions and the rules of a call. */
#define RCN_DEVICE_MAX_RANKS 16
/* What a failed wait leaves for the host (host-mapped memory); every kernel
 * of a communicator, rocenante's and the device API's, writes the one record. */
typedef enum {
  rcnWaitOk = 0,
  rcnWaitTimeout = 1,
  rcnWaitAborted = 2,
  rcnWaitBadUse = 3,
  rcnWaitMismatch = 4
} rcnWaitResult_t;
typedef struct {
  uint32_t code;  /* rcnWaitResult_t, written last, after the fields below; rcnWaitBadUse: a device-API
                   * call broke its rules (a block past maxBlocks, an index past maxValues or odd);
                   * rcnWaitMismatch: the peer's rcnAllReduce had another count, type or op */
  uint32_t peer;  /* the peer that did not arrive (or made the other call) */
  uint32_t block;
  uint32_t call;
} rcnDeviceError;
typedef struct {
  int rank;
  int nranks;
  uint64_t* window[RCN_DEVICE_MAX_RANKS]; /* rank r's window, mapped in this process */
  size_t maxValues;                  /* floats one call exchanges at most (ROCENANTE_DEVICE_WINDOW_BYTES / 4, rounded up to even) */
  uint32_t* calls;                   /* device: the last call number of each block slot */
  int maxBlocks;                     /* most blocks a kernel taking part may launch */
  uint32_t* failed;                  /* device: set once a wait failed (rcnAllReduce's calls see it too) */
  rcnDeviceError* error;             /* device pointer to the host-mapped first-error record */
  const volatile uint32_t* abortFlag; /* device pointer to host-mapped memory, set by rcnCommAbort */
  uint64_t timeoutNs;                /* ROCENANTE_TIMEOUT_MS (under the shim, unset: ROCENANTE_SHIM_TIMEOUT_MS) */
} rcnDeviceComm;

/* rcnSuccess and *dev filled when comm's fast path is p2p with a window
 * (ROCENANTE_DEVICE_WINDOW_BYTES > 0); rcnInvalidUsage, the reason logged at
 * INFO, on any other path (fast path off, proxy, host). Valid
 * until rcnCommDestroy or rcnCommAbort. A failed wait in a device function
 * shows in rcnCommGetAsyncError, as one in rcnAllReduce does. */
rcnResult_t rcnCommGetDeviceComm(rcnComm_t comm, rcnDeviceComm* dev);

/* For programs running under the NCCL shim (LD_PRELOAD / VLLM_NCCL_SO_PATH):
 * what rocenante decided for an NCCL communicator, the same fields
 * rcnCommQuery reports. A communicator rocenante built no state for
 * (disabled, non-blocking, one rank) reports rcnPathNccl and says why in
 * reason; rcnInvalidArgument for an unknown handle. */
struct ncclComm;
rcnResult_t rcnShimCommQuery(struct ncclComm* comm, rcnCommInfo* info);

const char* rcnGetErrorString(rcnResult_t result);

/* The last error message logged by this thread. Every rcn* call that returns
 * an rcnResult_t clears it first, so after a failed call it holds that call's
 * cause (a call that succeeds may leave a warning there). */
const char* rcnGetLastError(rcnComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* ROCENANTE_ROCENANTE_H_ */
