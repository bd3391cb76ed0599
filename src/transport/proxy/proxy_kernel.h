// SPDX-License-Identifier: BSD-3-Clause
// The one-shot kernel of the proxy path, as the host sees it. Each block
// stages its slice of the input into this rank's own slot (pinned host
// memory mapped into the GPU), rings its doorbell with the call number, waits
// (bounded) for every peer's data in the local region, which the proxy
// threads of the peers write through the wire, and reduces in rank order.
// Two protocols, as on the p2p path (kernels/one_shot.h):
//  - flags: the slice is staged, fenced, then the doorbell rings; the proxy
//    puts the slice and then a flag per block, which the kernel waits for.
//  - ll: the doorbell rings first and every 16-byte line staged carries 8
//    data bytes and two copies of the call number; the proxy puts lines as
//    it finds them complete, and the kernel polls the lines themselves. No
//    system fence and no flag round trip: fewer PCIe trips, twice the bytes.
//  - ll-staged: the same lines, but the block stages them all, fences and
//    only then rings, and the proxy puts them unread. For regions in device
//    memory (GPUDirect RDMA), which the proxy's CPU cannot poll; the tags
//    still make the receiver independent of the order the NIC's writes land.
// A peer that made another call (count, type or op) is an error in both:
//  - every flag holds callTag(call, signature) (kernels/one_shot.h); the
//    doorbell carries the call's signature to the proxy, which writes it;
//  - every LL tag holds proxyLineTag(call, signature): the call in its low
//    half, which the proxy checks, and the signature's low 16 bits in its
//    high half, which only the reading kernel checks. Lines are not cleared
//    after reading, so a stale line must read as an older call: a tag whose
//    call half is this call's and whose signature half is not is a peer's
//    different call; any other tag is stale.
// Two ranks on two sides of ROCENANTE_PROXY_LL_MAX_BYTES wait in different
// protocols: each wait also looks, now and then (a flag wait every 64 spins,
// an LL wait every 4096), where the other protocol would leave the peer's
// mark (proxy_kernel.cu), as the p2p kernel does.
// The call number lives in device memory and the kernel advances it, so CUDA
// graph replays stay in step; the region layout is the p2p kernel's own.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/one_shot.h"
#include "rocenante/rocenante.h"

namespace rcn {

enum ProxyProtocol : uint32_t { kProxyFlags = 0, kProxyLL = 1, kProxyLLStaged = 2 };

// The two halves of an LL line's tag (see above). The call half keeps 15
// bits of the call and is odd, so a scrubbed line (0) never matches; it
// repeats every 2^15 calls, which is why lines are scrubbed at least every
// 2^14 (ROCENANTE_PROXY_SCRUB_CALLS): a line then lives at most 2^15 - 2
// calls, at the 2^32 wrap, whose skipped calls 0 and 1 skip two scrubs. Two different calls share the
// signature half with odds of 2^-16.
constexpr uint32_t kProxyLineCallMask = 0xFFFFu;
__host__ __device__ inline uint32_t proxyLineCall(uint32_t call) { return ((call & 0x7FFFu) << 1) | 1u; }
__host__ __device__ inline uint32_t proxyLineTag(uint32_t call, uint32_t signature) {
  return proxyLineCall(call) | (signature << 16);
}

// One per (phase, block), in host-mapped memory, written by the block as two
// 16-byte stores (and, in the flags protocol, one of 8 bytes for the
// signature). Every field shares an 8-byte word with a copy of the call
// number, and a GPU store reaches host memory in whole 8-byte words, so the
// proxy trusts a field once its tag equals the call it expects: the LL
// protocol rings without a fence. Each has its own cache line, so a GPU
// write to one does not disturb the proxy threads polling the others.
struct alignas(64) ProxyDoorbell {
  uint32_t blocks, blocksTag;      // grid size of this call: how many doorbells to serve
  uint32_t protocol, protocolTag;  // ProxyProtocol
  uint32_t offset, offsetTag;      // byte offset of the block's slice (or lines) in its slot
  uint32_t bytes, bytesTag;        // length of the slice (a multiple of 16, possibly 0)
  uint32_t signature, signatureTag;  // flags protocol: callSignature of the call, which its flags carry
};
constexpr int kProxyDoorbellFields = 5;

// Per-communicator device state of the proxy kernel (local to this rank).
struct ProxyState {
  uint32_t epoch;   // calls completed; call k uses epoch k (k = epoch + 1 at start)
  uint32_t done;    // blocks of the current call that finished (the last one resets it)
  uint32_t failed;  // set once a wait timed out or was aborted: later calls do nothing
  uint32_t pad;
};

// What a proxy kernel call computes from the exchanged slices. The bytes
// move alike for all three (each rank stages its input, its proxy puts it
// to every peer), so the proxy threads never know which it is.
enum ProxyCollective : uint32_t {
  kProxyAllReduce = 0,
  kProxyAllGather = 1,      // count: a rank's share; rank r's lands at recv + r * count
  kProxyReduceScatter = 2,  // count: the whole input; recv gets elements [blockBegin, blockEnd) of the reduction
};

struct ProxyKernelArgs : AllReduceCallArgs {
  char* region;              // this rank's exchange region (device pointer to host memory)
  RegionLayout layout;
  ProxyDoorbell* doorbells;  // [2 phases][maxBlocks], device pointer to host memory
  ProxyState* state;         // device memory
  OneShotError* error;       // device pointer to host-mapped memory
  const volatile uint32_t* abortFlag;
  uint64_t timeoutNs;
  // LL lines are never cleared after reading (that would cost a second
  // write per line across PCIe); instead the last block of every call whose
  // number is 0, 1 or 2 modulo scrubCalls (a power of two, at most 2^14)
  // zeroes the lines that are safe to zero then, so no line keeps a tag long
  // enough for its call half (15 bits) to come round again.
  uint32_t scrubCalls;
  uint32_t collective;          // ProxyCollective
  size_t blockBegin, blockEnd;  // reduce-scatter: this rank's block, in elements of the whole input
};

// A block's share of a call's `units` items (16-byte chunks, or LL lines of 8
// data bytes), the same on the host and in the kernel: whole multiples of 4
// items, so no 64-byte cache line is split between two blocks and hence
// between two proxy threads.
__host__ __device__ inline size_t proxyBlockShare(size_t units, int blocks) {
  return ((units + blocks - 1) / blocks + 3) / 4 * 4;
}

// Block `block`'s items [begin, end) of `units` over a grid of `blocks`.
struct ProxyBlockRange {
  size_t begin, end;
};
__host__ __device__ inline ProxyBlockRange proxyBlockRange(size_t units, int blocks, size_t block) {
  const size_t perBlock = proxyBlockShare(units, blocks);
  const size_t begin = block * perBlock < units ? block * perBlock : units;
  return {begin, begin + perBlock < units ? begin + perBlock : units};
}

// The grid that leaves no block empty: rounding the shares up can leave the
// last blocks nothing, and in LL an empty block's doorbell is the only sign
// of the call its proxy thread gets, which a later call may overwrite first.
inline int proxyBlocksFor(size_t units, int blocks) {
  if (units == 0) return 1;
  const size_t share = proxyBlockShare(units, blocks);
  return static_cast<int>((units + share - 1) / share);
}

// Loads every instance on the current device now (preloadKernels in
// kernels/kernel_launch.cuh says why).
rcnResult_t preloadProxyKernels();

// Enqueues one all-reduce; grid from oneShotGrid with the proxy's LL limit,
// then proxyBlocksFor. staged: LL calls use kProxyLLStaged instead of kProxyLL.
// programmaticLaunch: let it be scheduled while the previous kernel on the
// stream runs (PDL, ROCENANTE_PDL); it still waits for that kernel to finish.
rcnResult_t launchProxyKernel(const ProxyKernelArgs& args, rcnDataType_t dtype, rcnRedOp_t op,
                              const OneShotGrid& grid, bool staged, bool programmaticLaunch,
                              cudaStream_t stream);

}  // namespace rcn
