// SPDX-License-Identifier: BSD-3-Clause
// One tensor-parallel rank of the model on one GPU. A forward pass takes n
// tokens, each placed in a sequence (KV-cache slot) at a position, so one
// code path serves batched prefill (n = batch * prompt) and decode (n = batch).
// The decode step can be captured once in a CUDA graph and replayed: every
// input it reads (tokens, positions) lives in device memory, and its last
// kernel writes the next tokens and advances the positions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gemv.h"
#include "gpu_kernels.h"
#include "model.h"
#include "shard.h"

namespace engine {

// Completes the row-parallel products across ranks (rcnAllReduce in rcn_engine).
class GpuAllReduce {
 public:
  virtual ~GpuAllReduce() = default;
  // In place, on `stream`; throws EngineError on failure.
  virtual void sum(void* data, size_t count, DType type, cudaStream_t stream) = 0;
  // Element-wise maximum of unsigned 64-bit keys (the vocab-parallel argmax).
  virtual void maxKeys(uint64_t* keys, size_t count, cudaStream_t stream) = 0;
  // rocenante's device API (rocenante/device.cuh), through which a product
  // can sum its outputs over the ranks without an all-reduce kernel; null
  // where there is none (NCCL, a transport other than p2p).
  virtual const rcnDeviceComm* exchange() const { return nullptr; }
  // --fused-norm (bf16): residual += the sum over the ranks of delta, then
  // out = RMSNorm(residual) * weight, all [n][dim] (rcnAllReduceResidualRmsNorm).
  virtual void sumResidualNorm(const void* delta, void* residual, const void* weight, void* out, int n, int dim,
                               float eps, cudaStream_t stream) {
    throw EngineError("this collective has no fused all-reduce + residual + RMSNorm");
  }
  // Throws EngineError when an all-reduce or exchange already enqueued gave
  // up waiting for a peer (its results are garbage). Call after a sync.
  virtual void checkPeers() {}
};

struct GpuModelOptions {
  DType dtype = DType::F32;
  int maxSeqs = 1;       // sequences decoded together (the batch)
  int maxTokens = 512;   // tokens in one forward pass (batch * prompt for prefill)
  int maxContext = 512;  // KV-cache positions per sequence
  bool gemv = true;      // bf16 decode products with the engine's own kernel instead of cuBLAS
  bool overlap = true;   // programmatic dependent launch between the engine's kernels
  int attentionSplits = 0;  // decode attention blocks per head, 1..kAttentionMaxSplits; 0: attentionSplits() picks
  int attentionBlocksPerSm = 0;  // the attention kernel's build, 1 or 2; 0: attentionBlocksPerSm() picks
  // With TP > 1: each rank computes its slice of the logits (vocab-parallel
  // LM head) and the argmax is agreed through one all-reduce; logits() then
  // gathers the full rows (a collective: every rank calls it in step).
  bool vocabParallel = true;
  // With TP > 1 and the collective's device API (GpuAllReduce::exchange), a
  // pass of 1-2 tokens on the GEMV path (decode of 1-2 sequences) fuses each
  // all-reduce into the product in front of it: the O and down products put
  // their outputs into every rank's window and sum them there (launchGemv's
  // sumWith), with no all-reduce kernel after them. false on any rank:
  // rcnAllReduce on every rank. Off by default (docs/ENGINE.md).
  bool fuseAllReduce = false;
  // With TP > 1 (or a lone shard) and bf16: the residual stream is bf16 and
  // each all-reduce also adds it into the stream and normalizes it for the
  // next product (GpuAllReduce::sumResidualNorm), one call where there were
  // an all-reduce and a norm fused into the next product. Off by default
  // (docs/ENGINE.md).
  bool fuseNorm = false;
};

class GpuModel {
 public:
  // allReduce may be null for TP = 1. Allocates everything; weights start as zeros.
  GpuModel(const ModelConfig& config, const ShardLayout& layout, const GpuModelOptions& options,
           GpuAllReduce* allReduce);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  // This rank's shard (shardWeights()), converted to the model's dtype.
  void loadWeights(const ModelWeights& shard);
  // Random weights generated on the GPU, for benchmarks of big shapes.
  void randomizeWeights(uint64_t seed);

  // Runs every prompt from position 0 (all of the same length), leaving the
  // logits of each prompt's last token and their argmax as the next tokens.
  void prefill(const std::vector<std::vector<int>>& prompts);
  // One decode step of every sequence from the next tokens; the argmax of
  // its logits becomes the next tokens. Replays the graph when one is captured.
  void decode();
  // Captures decode() in a CUDA graph (without the all-reduces when
  // withAllReduce is false: the benchmark's compute-only step).
  void captureDecodeGraph(bool withAllReduce = true);
  void dropDecodeGraph();

  std::vector<float> logits(int seq);
  std::vector<int> nextTokens();
  void setNextTokens(const std::vector<int>& tokens);
  // Moves every sequence back to `position` (the benchmark replays the same steps).
  void rewind(int position);

  // Eager decode steps with an event after every operation: the mean
  // microseconds per step spent in each kind of operation (gemm.qkv, attention, ...).
  std::vector<std::pair<std::string, double>> profileDecode(int steps);

  int position() const { return position_; }
  int maxContext() const { return options_.maxContext; }
  size_t weightBytes() const { return weightBytes_; }
  size_t kvBytesRead(int context) const;  // KV cache read by one decode step at this context
  cudaStream_t stream() const { return stream_; }
  const ModelConfig& config() const { return config_; }

 private:
  struct Layer {
    void *attnNorm, *qkv, *qkvBias, *wo, *ffnNorm, *gateUp, *down, *qNorm, *kNorm, *keyCache, *valueCache;
  };
  void* allocate(size_t bytes);
  void copyToDevice(void* dst, const void* src, size_t bytes, const char* what);
  void upload(void* dst, const std::vector<float>& src);
  // The GEMV kernels take a product of n tokens (bf16 only); fusedNorm: its
  // input is the residual stream, normalized in the kernel.
  bool usesGemv(int n, int in, bool fusedNorm) const;
  GemvInput normalize(const void* delta, const void* weight, int n);
  void gemm(void* y, bool yIsFloat, const void* w, const GemvInput& input, int n, int out, int in,
            const rcnDeviceComm* sumWith = nullptr);
  // The exchange when a pass of n tokens fuses its all-reduces, else null.
  const rcnDeviceComm* fusedExchange(int n, bool withAllReduce) const;
  // The exchange every rank agreed to fuse through (a collective, at
  // construction), or null: a rank that puts while a peer runs rcnAllReduce
  // would only see its waits time out.
  const rcnDeviceComm* agreeOnExchange();
  void gateUpSwiGlu(const void* gateUp, const GemvInput& input, int n, int hid, int d);
  void forward(int n, int seqs, bool advance, bool withAllReduce);
  // --fused-norm: the all-reduce of delta_ added into residualHalf_ and
  // normalized with `weight` into xb_.
  GemvInput sumResidualNorm(const void* weight, int n);
  void lmHeadAndArgmax(int seqs, bool advance, bool withAllReduce);
  // Kernels overlap their launch with the previous one, except while
  // profiling (the events between them would serialize them anyway).
  Launch on() const { return {stream_, options_.overlap && !profiling_}; }
  void placeDecode(int seqs, int position);
  void resetArgmaxKeys();
  struct AttentionLaunch {
    int splits, blocksPerSm;
    int prefetchRows;  // the most cache rows a block asks L2 for ahead (attentionPrefetchRows)
  };
  AttentionLaunch attentionLaunchFor(int n) const;
  void mark(const char* op);  // records the end of `op` when profiling

  ModelConfig config_;
  ShardLayout layout_;
  GpuModelOptions options_;
  GpuAllReduce* allReduce_;
  const rcnDeviceComm* exchange_ = nullptr;  // agreeOnExchange
  AttentionShape attn_;
  int sms_ = 0;             // multiprocessors of this rank's GPU
  int sharedPerSm_ = 0;     // and the shared memory of one
  int l2Bytes_ = 0;         // its L2 cache
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublasWorkspace_ = nullptr;
  cudaGraphExec_t graph_ = nullptr;
  std::vector<void*> allocations_;
  size_t weightBytes_ = 0;

  void *embedding_, *finalNorm_, *lmHead_;
  float* ropeFreqs_ = nullptr;  // [headDim/2] fp32, only when the config rescales RoPE
  std::vector<Layer> layers_;
  // The fp32 residual stream. A norm fused into a GEMV writes the updated
  // stream to the other buffer (every block of it reads the current one).
  float *x_, *xAlt_, *residual_ = nullptr;
  void* residualHalf_ = nullptr;  // --fused-norm: the residual stream in bf16 [maxTokens][dim]
  float* logits_;
  // Vocab-parallel LM head: this rank's rows [vocabStart_, vocabStart_ + vocabCount_).
  bool vocabParallel_ = false;
  int vocabStart_ = 0, vocabCount_ = 0;
  float* localLogits_ = nullptr;   // [seqs][vocabCount_]
  uint64_t* argmaxKeys_ = nullptr; // [seqs]
  bool logitsGathered_ = false;    // logits_ holds this step's full rows (gathered once per step)
  void *xb_, *qkvOut_, *att_, *delta_, *gateUpOut_, *act_, *xbLast_;
  int *tokens_, *pos_, *seq_, *lastRow_;
  int* nonFiniteLogits_;  // set by the argmax when a winning logit is NaN or infinite; tokens_ follow it
  int seqs_ = 0, position_ = 0;
  bool profiling_ = false;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
};

}  // namespace engine
