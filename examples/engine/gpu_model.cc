// SPDX-License-Identifier: BSD-3-Clause
#include "gpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "attention_plan.h"

namespace engine {
namespace {

void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw EngineError(std::string(what) + ": CUDA error " + cudaGetErrorString(e));
}

// Prefill runs attention unsplit, one block holding the scores of the whole
// context in shared memory: a context past that is refused here, by name,
// rather than as an invalid launch at the first forward pass.
void requireAttentionFits(int device, int maxContext, int headDim) {
  int allowed = 0;
  cudaCheck(cudaDeviceGetAttribute(&allowed, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "device attribute");
  const size_t needed = attentionLargestBlockBytes(maxContext, headDim);
  if (needed > size_t(allowed))
    throw EngineError("context " + std::to_string(maxContext) + ": attention needs " + std::to_string(needed >> 10) +
                      " KB of shared memory a block, the GPU allows " + std::to_string(allowed >> 10) + " KB");
}

void cublasCheck(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw EngineError(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

// fp32 -> bf16 with round-to-nearest-even (NaN kept a NaN).
uint16_t toBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

template <typename T>
std::vector<T> concat(const std::vector<T>& a, const std::vector<T>& b, const std::vector<T>& c = {}) {
  std::vector<T> out(a);
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

}  // namespace

GpuModel::GpuModel(const ModelConfig& config, const ShardLayout& layout, const GpuModelOptions& options,
                   GpuAllReduce* allReduce)
    : config_(config), layout_(layout), options_(options), allReduce_(allReduce) {
  const ModelConfig& c = config_;
  if (options.maxContext > c.seqLen)
    throw EngineError("context " + std::to_string(options.maxContext) + " exceeds the model's seq_len " +
                      std::to_string(c.seqLen));
  if (c.headDim > kAttentionMaxHeadDim || c.headDim % 4 != 0)
    throw EngineError("head size " + std::to_string(c.headDim) + ": the GPU attention kernel takes multiples of 4 up to " +
                      std::to_string(kAttentionMaxHeadDim));
  if (options.attentionSplits < 0 || options.attentionSplits > kAttentionMaxSplits)
    throw EngineError("attention splits " + std::to_string(options.attentionSplits) + ": 0 (automatic) to " +
                      std::to_string(kAttentionMaxSplits));
  if (options.attentionBlocksPerSm < 0 || options.attentionBlocksPerSm > kAttentionMaxBlocksPerSm)
    throw EngineError("attention blocks per SM " + std::to_string(options.attentionBlocksPerSm) +
                      ": 0 (automatic), 1 or 2");
  if (options.fuseNorm && (options.dtype != DType::BF16 || !allReduce))
    throw EngineError(
        "the fused all-reduce + residual + RMSNorm takes bf16 and an all-reduce over ranks "
        "(--tp > 1 or --shard-of)");
  if (options.fuseNorm && options.fuseAllReduce)
    throw EngineError(
        "--fused-norm and --fused-allreduce both replace the all-reduces after the O and down "
        "products: choose one");
  int device = 0;
  cudaCheck(cudaGetDevice(&device), "cudaGetDevice");
  requireAttentionFits(device, options.maxContext, c.headDim);
  cudaCheck(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device), "device attribute");
  cudaCheck(cudaDeviceGetAttribute(&sharedPerSm_, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
            "device attribute");
  cudaCheck(cudaDeviceGetAttribute(&l2Bytes_, cudaDevAttrL2CacheSize, device), "device attribute");
  attn_ = {layout.heads, layout.kvHeads, c.headDim, layout.group, layout.headStart, layout.kvStart,
           options.maxContext, c.ropeTheta, c.normEps, c.ropeInterleaved, nullptr};

  cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cublasCheck(cublasCreate(&cublas_), "cublasCreate");
  cublasCheck(cublasSetStream(cublas_, stream_), "cublasSetStream");
  // A fixed workspace keeps cuBLAS from allocating during graph capture.
  const size_t workspaceBytes = 32u << 20;
  cublasWorkspace_ = allocate(workspaceBytes);
  cublasCheck(cublasSetWorkspace(cublas_, cublasWorkspace_, workspaceBytes), "cublasSetWorkspace");

  const size_t e = dtypeSize(options.dtype), d = c.dim, hd = c.headDim, T = options.maxTokens;
  const size_t qDim = size_t(layout.heads) * hd, kvDim = size_t(layout.kvHeads) * hd, hid = layout.hidden;
  auto weight = [&](size_t elements) {
    weightBytes_ += elements * e;
    return allocate(elements * e);
  };
  vocabParallel_ = options.vocabParallel && allReduce && layout.size > 1;
  vocabStart_ = vocabParallel_ ? int(int64_t(c.vocab) * layout.rank / layout.size) : 0;
  vocabCount_ = vocabParallel_ ? int(int64_t(c.vocab) * (layout.rank + 1) / layout.size) - vocabStart_ : c.vocab;
  embedding_ = weight(size_t(c.vocab) * d);
  weightBytes_ -= size_t(c.vocab) * d * e;  // a decode step reads only a few embedding rows
  finalNorm_ = weight(d);
  if (c.tiedClassifier) {  // this rank's rows of the embedding, read whole by the LM head
    lmHead_ = static_cast<char*>(embedding_) + size_t(vocabStart_) * d * e;
    weightBytes_ += size_t(vocabCount_) * d * e;
  } else {
    lmHead_ = weight(size_t(vocabCount_) * d);
  }
  if (!c.ropeFreqs.empty()) {  // kept in fp32 whatever the dtype: angles grow with the position
    ropeFreqs_ = static_cast<float*>(allocate(c.ropeFreqs.size() * sizeof(float)));
    copyToDevice(ropeFreqs_, c.ropeFreqs.data(), c.ropeFreqs.size() * sizeof(float), "RoPE frequencies");
    attn_.ropeFreqs = ropeFreqs_;
  }
  const size_t cacheElements = size_t(options.maxSeqs) * options.maxContext * kvDim;
  for (int l = 0; l < c.layers; ++l) {
    Layer w{};
    w.attnNorm = weight(d);
    w.qkv = weight((qDim + 2 * kvDim) * d);
    if (c.qkvBias) w.qkvBias = weight(qDim + 2 * kvDim);
    w.wo = weight(d * qDim);
    w.ffnNorm = weight(d);
    w.gateUp = weight(2 * hid * d);
    w.down = weight(d * hid);
    if (c.qkNorm) {
      w.qNorm = weight(hd);
      w.kNorm = weight(hd);
    }
    w.keyCache = allocate(cacheElements * e);
    w.valueCache = allocate(cacheElements * e);
    layers_.push_back(w);
  }
  x_ = static_cast<float*>(allocate(T * d * sizeof(float)));
  xAlt_ = static_cast<float*>(allocate(size_t(options.maxSeqs) * d * sizeof(float)));  // decode only
  xb_ = allocate(T * std::max(d, qDim) * e);
  qkvOut_ = allocate(T * (qDim + 2 * kvDim) * e);
  att_ = allocate(T * qDim * e);
  delta_ = allocate(T * d * e);
  gateUpOut_ = allocate(T * 2 * hid * e);
  act_ = allocate(T * hid * e);
  xbLast_ = allocate(size_t(options.maxSeqs) * d * e);
  if (options.fuseNorm) residualHalf_ = allocate(T * d * e);
  logits_ = static_cast<float*>(allocate(size_t(options.maxSeqs) * c.vocab * sizeof(float)));
  if (vocabParallel_) {
    localLogits_ = static_cast<float*>(allocate(size_t(options.maxSeqs) * vocabCount_ * sizeof(float)));
  }
  argmaxKeys_ = static_cast<uint64_t*>(allocate(size_t(options.maxSeqs) * sizeof(uint64_t)));
  // The overflow flag just before the tokens, so one copy reads both.
  nonFiniteLogits_ = static_cast<int*>(allocate((T + 1) * sizeof(int)));
  tokens_ = nonFiniteLogits_ + 1;
  pos_ = static_cast<int*>(allocate(T * sizeof(int)));
  seq_ = static_cast<int*>(allocate(T * sizeof(int)));
  lastRow_ = static_cast<int*>(allocate(options.maxSeqs * sizeof(int)));
  exchange_ = agreeOnExchange();
}

const rcnDeviceComm* GpuModel::agreeOnExchange() {
  if (!allReduce_ || !allReduce_->exchange()) return nullptr;  // the same on every rank: the fast path is agreed
  uint64_t refused = options_.fuseAllReduce ? 0 : 1;
  copyToDevice(argmaxKeys_, &refused, sizeof refused, "exchange agreement");
  allReduce_->maxKeys(argmaxKeys_, 1, stream_);
  cudaCheck(cudaMemcpyAsync(&refused, argmaxKeys_, sizeof refused, cudaMemcpyDeviceToHost, stream_),
            "exchange agreement");
  cudaCheck(cudaStreamSynchronize(stream_), "exchange agreement");
  allReduce_->checkPeers();
  return refused ? nullptr : allReduce_->exchange();
}

GpuModel::~GpuModel() {
  if (graph_) cudaGraphExecDestroy(graph_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (void* p : allocations_) cudaFree(p);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* GpuModel::allocate(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 16));
  if (e != cudaSuccess)
    throw EngineError("cudaMalloc of " + std::to_string(bytes >> 20) + " MiB failed: " + cudaGetErrorString(e));
  allocations_.push_back(p);
  // On stream_, where every kernel runs: a non-blocking stream does not wait
  // for the legacy stream, so a plain cudaMemset could land after them.
  cudaCheck(cudaMemsetAsync(p, 0, std::max<size_t>(bytes, 16), stream_), "cudaMemsetAsync");
  return p;
}

// Ordered on stream_ like allocate's zeroing; waits, so src may go after.
void GpuModel::copyToDevice(void* dst, const void* src, size_t bytes, const char* what) {
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), what);
  cudaCheck(cudaStreamSynchronize(stream_), what);
}

void GpuModel::upload(void* dst, const std::vector<float>& src) {
  if (options_.dtype == DType::F32) {
    copyToDevice(dst, src.data(), src.size() * 4, "weight upload");
    return;
  }
  std::vector<uint16_t> half(src.size());
  for (size_t i = 0; i < src.size(); ++i) half[i] = toBf16(src[i]);
  copyToDevice(dst, half.data(), half.size() * 2, "weight upload");
}

void GpuModel::loadWeights(const ModelWeights& w) {
  upload(embedding_, w.embedding);
  upload(finalNorm_, w.finalNorm);
  if (!config_.tiedClassifier) {
    const auto rows = w.classifier.begin() + size_t(vocabStart_) * config_.dim;
    upload(lmHead_, std::vector<float>(rows, rows + size_t(vocabCount_) * config_.dim));
  }
  for (int l = 0; l < config_.layers; ++l) {
    const LayerWeights& s = w.layers[l];
    Layer& g = layers_[l];
    upload(g.attnNorm, s.attnNorm);
    upload(g.qkv, concat(s.wq, s.wk, s.wv));
    if (config_.qkvBias) upload(g.qkvBias, concat(s.bq, s.bk, s.bv));
    upload(g.wo, s.wo);
    upload(g.ffnNorm, s.ffnNorm);
    upload(g.gateUp, concat(s.wGate, s.wUp));
    upload(g.down, s.wDown);
    if (config_.qkNorm) {
      upload(g.qNorm, s.qNorm);
      upload(g.kNorm, s.kNorm);
    }
  }
}

void GpuModel::randomizeWeights(uint64_t seed) {
  const ModelConfig& c = config_;
  const DType t = options_.dtype;
  const size_t d = c.dim, hd = c.headDim, qDim = size_t(layout_.heads) * hd, kvDim = size_t(layout_.kvHeads) * hd,
               hid = layout_.hidden;
  uint64_t tensor = seed * 1000003ull + layout_.rank * 7919ull;
  auto fill = [&](void* p, size_t n, float scale, float offset) {
    cudaCheck(launchRandomFill(t, p, n, ++tensor * 0x100000001b3ull, scale, offset, {stream_, false}), "random weights");
  };
  fill(embedding_, size_t(c.vocab) * d, 1.0f, 0.0f);
  fill(finalNorm_, d, 0.1f, 1.0f);
  if (!c.tiedClassifier) fill(lmHead_, size_t(vocabCount_) * d, 1.0f / std::sqrt(float(d)), 0.0f);
  for (Layer& g : layers_) {
    fill(g.attnNorm, d, 0.1f, 1.0f);
    fill(g.qkv, (qDim + 2 * kvDim) * d, 1.0f / std::sqrt(float(d)), 0.0f);
    if (c.qkvBias) fill(g.qkvBias, qDim + 2 * kvDim, 0.5f, 0.0f);
    fill(g.wo, d * qDim, 1.0f / std::sqrt(float(c.heads * hd)), 0.0f);
    fill(g.ffnNorm, d, 0.1f, 1.0f);
    fill(g.gateUp, 2 * hid * d, 1.0f / std::sqrt(float(d)), 0.0f);
    fill(g.down, d * hid, 1.0f / std::sqrt(float(c.hidden)), 0.0f);
    if (c.qkNorm) {
      fill(g.qNorm, hd, 0.1f, 1.0f);
      fill(g.kNorm, hd, 0.1f, 1.0f);
    }
  }
  cudaCheck(cudaStreamSynchronize(stream_), "random weights");
}

bool GpuModel::usesGemv(int n, int in, bool fusedNorm) const {
  return options_.dtype == DType::BF16 && options_.gemv && n <= options_.maxSeqs && gemvFits(n, in, fusedNorm);
}

// The add + RMSNorm before a product of the dim-sized input: fused into the
// GEMV when it takes the product, else a kernel writing xb_.
GemvInput GpuModel::normalize(const void* delta, const void* weight, int n) {
  if (usesGemv(n, config_.dim, true)) {
    GemvInput input = normedInput(residual_, delta, weight, residual_ == x_ ? xAlt_ : x_, config_.normEps);
    residual_ = input.residualOut;
    return input;
  }
  cudaCheck(launchAddRmsNorm(options_.dtype, xb_, residual_, delta, weight, nullptr, n, config_.dim, config_.normEps,
                             on()),
            "rmsnorm");
  mark("rmsnorm");
  return vectorInput(xb_);
}

// y[n][out] = input[n][in] . W[out][in]^T, fp32 accumulation.
void GpuModel::gemm(void* y, bool yIsFloat, const void* w, const GemvInput& input, int n, int out, int in,
                    const rcnDeviceComm* sumWith) {
  if (usesGemv(n, in, input.normed())) {
    cudaCheck(launchGemv(input, y, yIsFloat, w, n, out, in, on(), sumWith), "gemv");
    return;
  }
  if (sumWith) throw EngineError("a fused all-reduce outside the GEMV path");
  const cudaDataType_t t = options_.dtype == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  const float alpha = 1.0f, beta = 0.0f;
  cublasCheck(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, w, t, in, input.x, t, in, &beta, y,
                           yIsFloat ? CUDA_R_32F : t, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
}

const rcnDeviceComm* GpuModel::fusedExchange(int n, bool withAllReduce) const {
  const rcnDeviceComm* exchange = withAllReduce ? exchange_ : nullptr;
  if (!exchange || n > kGemvExchangeMaxTokens || config_.dim % 4 != 0 || size_t(n) * config_.dim > exchange->maxValues)
    return nullptr;
  // The O and down products (plain inputs) sum over the ranks on the GEMV path.
  const int qDim = layout_.heads * config_.headDim;
  return usesGemv(n, qDim, false) && usesGemv(n, layout_.hidden, false) ? exchange : nullptr;
}

// act = silu(gate . input) * (up . input): one kernel on the GEMV path, else
// the product into gateUpOut_ and a separate SwiGLU kernel.
void GpuModel::gateUpSwiGlu(const void* gateUp, const GemvInput& input, int n, int hid, int d) {
  if (usesGemv(n, d, input.normed())) {
    cudaCheck(launchGemvSwiGlu(input, act_, gateUp, n, hid, d, on()), "gemv gate/up");
    mark("gemm.gate_up+swiglu");
    return;
  }
  gemm(gateUpOut_, false, gateUp, input, n, 2 * hid, d);
  mark("gemm.gate_up");
  cudaCheck(launchSwiGlu(options_.dtype, act_, gateUpOut_, n, hid, on()), "swiglu");
  mark("swiglu");
}

// How attention runs a pass of n tokens: decode passes take the forced
// split count or the plan's, prefill passes (longer than a batch) run
// unsplit; the kernel build is the forced one or the plan's.
GpuModel::AttentionLaunch GpuModel::attentionLaunchFor(int n) const {
  const int blocks = n * layout_.heads;
  AttentionLaunch a;
  if (n > options_.maxSeqs) a.splits = 1;
  else if (options_.attentionSplits > 0) a.splits = options_.attentionSplits;
  else a.splits = attentionSplits(options_.maxContext, blocks, config_.headDim, sms_);
  const size_t blockShared = attentionPassBytes(options_.maxContext, config_.headDim, a.splits);
  a.blocksPerSm = options_.attentionBlocksPerSm > 0
                      ? options_.attentionBlocksPerSm
                      : attentionBlocksPerSm(blocks * a.splits, sms_, blockShared, size_t(sharedPerSm_));
  a.prefetchRows = attentionPrefetchRows(n * layout_.kvHeads * a.splits, int(config_.headDim * dtypeSize(options_.dtype)),
                                         size_t(l2Bytes_));
  return a;
}

void GpuModel::forward(int n, int seqs, bool advance, bool withAllReduce) {
  const ModelConfig& c = config_;
  const DType t = options_.dtype;
  const int d = c.dim, qDim = layout_.heads * c.headDim, kvDim = layout_.kvHeads * c.headDim,
            hid = layout_.hidden;
  const TokenPlacement place{tokens_, pos_, seq_};
  const AttentionLaunch attention = attentionLaunchFor(n);
  auto allReduce = [&](void* data) {
    if (allReduce_ && withAllReduce) allReduce_->sum(data, size_t(n) * d, t, stream_);
    mark("allreduce");
  };

  mark("start");
  residual_ = x_;
  cudaCheck(launchEmbedding(t, x_, embedding_, tokens_, n, d, on()), "embedding");
  // --fused-norm keeps the stream in bf16 too (the embedding's values exactly);
  // the first norm still reads x_.
  const bool fuseNorm = options_.fuseNorm;
  if (fuseNorm) cudaCheck(launchGatherRows(t, residualHalf_, embedding_, tokens_, n, d, on()), "embedding");
  mark("embedding");
  const void* pending = nullptr;  // the previous layer's MLP output, added by the next norm
  // With an exchange, the O and down products sum over the ranks themselves.
  const rcnDeviceComm* exchange = fusedExchange(n, withAllReduce);
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& w = layers_[l];
    // Past the first layer, --fused-norm's last call left this layer's input in xb_.
    const GemvInput attnInput = fuseNorm && l > 0 ? vectorInput(xb_) : normalize(pending, w.attnNorm, n);
    if (usesGemv(n, d, attnInput.normed()) && !c.qkNorm) {  // RoPE and the cache writes in the product's epilogue
      const QkvEpilogue epilogue{place, attn_, w.qkvBias, w.keyCache, w.valueCache};
      cudaCheck(launchGemvQkv(attnInput, qkvOut_, w.qkv, epilogue, n, d, on()), "gemv qkv");
      mark("gemm.qkv+rope+kv");
    } else {
      gemm(qkvOut_, false, w.qkv, attnInput, n, qDim + 2 * kvDim, d);
      mark("gemm.qkv");
      cudaCheck(launchQkvToCache(t, qkvOut_, w.keyCache, w.valueCache, w.qkvBias, w.qNorm, w.kNorm, place, n, attn_,
                                 on()),
                "rope");
      mark("rope+kv");
    }
    cudaCheck(launchAttention(t, att_, qkvOut_, w.keyCache, w.valueCache, place, n, attention.splits,
                              attention.blocksPerSm, attention.prefetchRows, attn_, on()),
              "attention");
    mark("attention");
    gemm(delta_, false, w.wo, vectorInput(att_), n, d, qDim, exchange);
    mark("gemm.o");
    if (fuseNorm) {
      gateUpSwiGlu(w.gateUp, sumResidualNorm(w.ffnNorm, n), n, hid, d);
    } else {
      if (!exchange) allReduce(delta_);
      gateUpSwiGlu(w.gateUp, normalize(delta_, w.ffnNorm, n), n, hid, d);
    }
    gemm(delta_, false, w.down, vectorInput(act_), n, d, hid, exchange);
    mark("gemm.down");
    if (fuseNorm) {
      sumResidualNorm(l + 1 < layers_.size() ? layers_[l + 1].attnNorm : finalNorm_, n);
      continue;
    }
    if (!exchange) allReduce(delta_);
    pending = delta_;
  }
  if (fuseNorm) {
    cudaCheck(launchGatherRows(t, xbLast_, xb_, lastRow_, seqs, d, on()), "last rows");
    mark("last rows");
  } else {
    cudaCheck(launchAddRmsNorm(t, xbLast_, residual_, pending, finalNorm_, lastRow_, seqs, d, c.normEps, on()),
              "final norm");
    mark("rmsnorm");
  }
  lmHeadAndArgmax(seqs, advance, withAllReduce);
}

GemvInput GpuModel::sumResidualNorm(const void* weight, int n) {
  allReduce_->sumResidualNorm(delta_, residualHalf_, weight, xb_, n, config_.dim, config_.normEps, stream_);
  mark("allreduce+rmsnorm");
  return vectorInput(xb_);
}

// The logits of each sequence's last token and their argmax as the next
// tokens. Vocab-parallel: each rank's slice, then one all-reduce (max) of a
// 64-bit key per sequence (value, then lowest index) agrees on the token.
void GpuModel::lmHeadAndArgmax(int seqs, bool advance, bool withAllReduce) {
  float* logits = vocabParallel_ ? localLogits_ : logits_;
  gemm(logits, true, lmHead_, vectorInput(xbLast_), seqs, vocabCount_, config_.dim);
  mark("gemm.lm_head");
  cudaCheck(launchArgmaxKey(argmaxKeys_, logits, seqs, vocabCount_, vocabStart_, on()), "argmax");
  if (vocabParallel_ && withAllReduce) {
    mark("argmax");
    allReduce_->maxKeys(argmaxKeys_, seqs, stream_);
    mark("allreduce");
  }
  cudaCheck(launchTokensFromKeys(tokens_, pos_, argmaxKeys_, nonFiniteLogits_, seqs, advance, on()), "argmax");
  mark("argmax");
}

void GpuModel::mark(const char* op) {
  if (!profiling_) return;
  cudaEvent_t e;
  cudaCheck(cudaEventCreate(&e), "cudaEventCreate");
  cudaCheck(cudaEventRecord(e, stream_), "cudaEventRecord");
  marks_.push_back({op, e});
}

std::vector<std::pair<std::string, double>> GpuModel::profileDecode(int steps) {
  if (seqs_ == 0) throw EngineError("profile before prefill");
  std::vector<std::pair<std::string, double>> totals;
  profiling_ = true;
  for (int s = 0; s < steps; ++s) {
    forward(seqs_, seqs_, true, true);
    logitsGathered_ = false;  // new logits
    cudaCheck(cudaStreamSynchronize(stream_), "profile");
    if (allReduce_) allReduce_->checkPeers();
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      cudaCheck(cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second), "profile");
      auto it = std::find_if(totals.begin(), totals.end(), [&](auto& p) { return p.first == marks_[i].first; });
      if (it == totals.end()) totals.push_back({marks_[i].first, 0.0}), it = totals.end() - 1;
      it->second += 1000.0 * ms / steps;
    }
    for (auto& m : marks_) cudaEventDestroy(m.second);
    marks_.clear();
  }
  profiling_ = false;
  return totals;
}

void GpuModel::prefill(const std::vector<std::vector<int>>& prompts) {
  const int seqs = int(prompts.size());
  if (seqs < 1 || seqs > options_.maxSeqs)
    throw EngineError("prefill of " + std::to_string(seqs) + " sequences; the model holds " +
                      std::to_string(options_.maxSeqs));
  const int length = int(prompts[0].size());
  const int n = seqs * length;
  if (length < 1 || n > options_.maxTokens || length > options_.maxContext)
    throw EngineError("prefill of " + std::to_string(seqs) + " x " + std::to_string(length) +
                      " tokens exceeds the model's buffers");
  std::vector<int> tokens, pos, seq, lastRow;
  for (int b = 0; b < seqs; ++b) {
    if (int(prompts[b].size()) != length) throw EngineError("prefill prompts must have equal lengths");
    for (int i = 0; i < length; ++i) {
      if (prompts[b][i] < 0 || prompts[b][i] >= config_.vocab)
        throw EngineError("prompt token " + std::to_string(prompts[b][i]) + " out of vocabulary");
      tokens.push_back(prompts[b][i]);
      pos.push_back(i);
      seq.push_back(b);
    }
    lastRow.push_back(b * length + length - 1);
  }
  cudaCheck(cudaMemcpyAsync(tokens_, tokens.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream_), "prefill");
  cudaCheck(cudaMemcpyAsync(pos_, pos.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream_), "prefill");
  cudaCheck(cudaMemcpyAsync(seq_, seq.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream_), "prefill");
  cudaCheck(cudaMemcpyAsync(lastRow_, lastRow.data(), seqs * sizeof(int), cudaMemcpyHostToDevice, stream_), "prefill");
  resetArgmaxKeys();
  forward(n, seqs, false, true);
  logitsGathered_ = false;  // new logits
  placeDecode(seqs, length);
}

// Decode reads token b of sequence b at the sequence's position.
void GpuModel::placeDecode(int seqs, int position) {
  if (graph_ && seqs != seqs_) dropDecodeGraph();
  seqs_ = seqs;
  position_ = position;
  std::vector<int> pos(seqs, position), seq(seqs), lastRow(seqs);
  for (int b = 0; b < seqs; ++b) seq[b] = lastRow[b] = b;
  cudaCheck(cudaMemcpyAsync(pos_, pos.data(), seqs * sizeof(int), cudaMemcpyHostToDevice, stream_), "decode setup");
  cudaCheck(cudaMemcpyAsync(seq_, seq.data(), seqs * sizeof(int), cudaMemcpyHostToDevice, stream_), "decode setup");
  cudaCheck(cudaMemcpyAsync(lastRow_, lastRow.data(), seqs * sizeof(int), cudaMemcpyHostToDevice, stream_),
            "decode setup");
  cudaCheck(cudaStreamSynchronize(stream_), "decode setup");
}

// Every step's argmax leaves its keys at 0 (launchTokensFromKeys); a step cut
// short by an error would not, and a stale key outranks every later one.
void GpuModel::resetArgmaxKeys() {
  cudaCheck(cudaMemsetAsync(argmaxKeys_, 0, size_t(options_.maxSeqs) * sizeof(uint64_t), stream_), "argmax keys");
}

void GpuModel::rewind(int position) {
  resetArgmaxKeys();
  placeDecode(seqs_, position);
}

void GpuModel::decode() {
  if (seqs_ == 0) throw EngineError("decode before prefill");
  if (position_ >= options_.maxContext)
    throw EngineError("context full: " + std::to_string(options_.maxContext) + " positions");
  if (graph_) cudaCheck(cudaGraphLaunch(graph_, stream_), "cudaGraphLaunch");
  else forward(seqs_, seqs_, true, true);
  logitsGathered_ = false;  // new logits
  ++position_;
}

void GpuModel::captureDecodeGraph(bool withAllReduce) {
  if (seqs_ == 0) throw EngineError("capture before prefill");
  dropDecodeGraph();
  cudaCheck(cudaStreamSynchronize(stream_), "capture");
  cudaGraph_t graph;
  cudaCheck(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    forward(seqs_, seqs_, true, withAllReduce);
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    throw;
  }
  cudaCheck(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
  cudaError_t e = cudaGraphInstantiate(&graph_, graph, 0);
  cudaGraphDestroy(graph);
  cudaCheck(e, "cudaGraphInstantiate");
}

void GpuModel::dropDecodeGraph() {
  if (graph_) cudaGraphExecDestroy(graph_);
  graph_ = nullptr;
}

std::vector<float> GpuModel::logits(int seq) {
  std::vector<float> out(config_.vocab);
  if (vocabParallel_ && !logitsGathered_) {  // every rank adds its slice into zeros: the sum is exact
    const size_t rowBytes = size_t(config_.vocab) * sizeof(float);
    cudaCheck(cudaMemsetAsync(logits_, 0, seqs_ * rowBytes, stream_), "logits");
    cudaCheck(cudaMemcpy2DAsync(logits_ + vocabStart_, rowBytes, localLogits_, vocabCount_ * sizeof(float),
                                vocabCount_ * sizeof(float), seqs_, cudaMemcpyDeviceToDevice, stream_),
              "logits");
    allReduce_->sum(logits_, size_t(seqs_) * config_.vocab, DType::F32, stream_);
    logitsGathered_ = true;  // one gather serves every sequence of this step
  }
  cudaCheck(cudaStreamSynchronize(stream_), "logits");
  if (allReduce_) allReduce_->checkPeers();
  cudaCheck(cudaMemcpy(out.data(), logits_ + size_t(seq) * config_.vocab, out.size() * 4, cudaMemcpyDeviceToHost),
            "logits");
  return out;
}

std::vector<int> GpuModel::nextTokens() {
  std::vector<int> flagAndTokens(seqs_ + 1);
  cudaCheck(cudaStreamSynchronize(stream_), "next tokens");
  if (allReduce_) allReduce_->checkPeers();
  cudaCheck(cudaMemcpy(flagAndTokens.data(), nonFiniteLogits_, (seqs_ + 1) * sizeof(int), cudaMemcpyDeviceToHost),
            "next tokens");
  if (flagAndTokens[0])
    throw EngineError("the largest logit is NaN or infinite: the model's activations overflowed (weights out of "
                      "range?); no token can be chosen");
  return std::vector<int>(flagAndTokens.begin() + 1, flagAndTokens.end());
}

void GpuModel::setNextTokens(const std::vector<int>& tokens) {
  if (int(tokens.size()) != seqs_) throw EngineError("setNextTokens: one token per sequence");
  copyToDevice(tokens_, tokens.data(), seqs_ * sizeof(int), "set tokens");
}

size_t GpuModel::kvBytesRead(int context) const {
  return size_t(config_.layers) * seqs_ * context * 2 * layout_.kvHeads * config_.headDim * dtypeSize(options_.dtype);
}

}  // namespace engine
