// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "core/dtype.h"

namespace rcn::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Records a CUDA failure as text and reports false.
bool cudaOk(cudaError_t err, const char* what, std::string* why) {
  if (err == cudaSuccess) return true;
  *why = std::string(what) + ": " + cudaGetErrorString(err);
  return false;
}

void setWhy(RankPoint* p, const std::string& why) { std::snprintf(p->why, sizeof p->why, "%s", why.c_str()); }

void storeStats(const std::vector<double>& usPerOp, RankPoint* out) {
  TimeStats s = summarize(usPerOp);
  out->median = s.median;
  out->min = s.min;
  out->max = s.max;
  out->q1 = s.q1;
  out->q3 = s.q3;
  out->samples = s.samples;
}

}  // namespace

PointRunner::PointRunner(const SweepOptions& opts, World* world, Pools* pools, bool gpu)
    : opts_(opts), world_(world), pools_(pools), gpu_(gpu) {}

PointRunner::~PointRunner() {
  destroyGraphs();
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (stream_) cudaStreamDestroy(stream_);
}

bool PointRunner::init(std::string* why) {
  if (!gpu_) return true;
  return cudaOk(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", why) &&
         cudaOk(cudaEventCreate(&start_), "cudaEventCreate", why) &&
         cudaOk(cudaEventCreate(&stop_), "cudaEventCreate", why);
}

void* PointRunner::sendSlot(const PointPlan& plan, size_t slot) const {
  return static_cast<char*>(pools_->send) + slot * plan.stride;
}

void* PointRunner::recvSlot(const PointPlan& plan, size_t slot) const {
  return static_cast<char*>(pools_->recv) + slot * plan.stride;
}

RankPoint PointRunner::run(SweepMethod& method, Mode mode, const PointPlan& plan, const SizeData& data) {
  RankPoint out;
  std::string why;
  bool ok = gpu_ ? runDevice(method, mode, plan, data, &out, &why) : runHost(method, plan, data, &out, &why);
  destroyGraphs();
  out.ok = ok ? 1 : 0;
  if (!ok) setWhy(&out, why);
  return out;
}

// Polls instead of blocking, so a peer that died (NCCL kernels wait forever)
// becomes an error after kGpuWaitTimeoutSec rather than a hang.
bool PointRunner::waitStream(const char* what, std::string* why) {
  cudaEvent_t done = stop_;
  if (!cudaOk(cudaEventRecord(done, stream_), "cudaEventRecord", why)) return false;
  auto deadline = Clock::now() + std::chrono::duration<double>(kGpuWaitTimeoutSec);
  while (true) {
    cudaError_t err = cudaEventQuery(done);
    if (err == cudaSuccess) return true;
    if (err != cudaErrorNotReady) return cudaOk(err, what, why);
    if (Clock::now() > deadline) {
      *why = std::string(what) + ": the GPU did not finish within " + std::to_string(int(kGpuWaitTimeoutSec)) +
             " s (a peer rank has probably failed)";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool PointRunner::enqueueEager(SweepMethod& method, const PointPlan& plan, int ops, int firstOp,
                               std::string* why) {
  for (int i = 0; i < ops; ++i) {
    size_t slot = slotOf(plan, 0, firstOp + i);
    if (!method.allReduce(sendSlot(plan, slot), recvSlot(plan, slot), plan.count, opts_.dtype, opts_.op,
                          stream_, why))
      return false;
  }
  return true;
}

bool PointRunner::captureGraphs(SweepMethod& method, const PointPlan& plan, std::string* why) {
  for (int g = 0; g < plan.graphs; ++g) {
    if (!cudaOk(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", why))
      return false;
    bool enqueued = true;
    for (int j = 0; j < plan.opsPerGraph && enqueued; ++j) {
      size_t slot = slotOf(plan, g, j);
      enqueued = method.allReduce(sendSlot(plan, slot), recvSlot(plan, slot), plan.count, opts_.dtype,
                                  opts_.op, stream_, why);
    }
    cudaGraph_t graph = nullptr;
    cudaError_t endErr = cudaStreamEndCapture(stream_, &graph);
    if (!enqueued) {
      if (graph) cudaGraphDestroy(graph);
      *why = "during graph capture: " + *why;
      return false;
    }
    if (!cudaOk(endErr, "cudaStreamEndCapture", why)) return false;
    cudaGraphExec_t exec = nullptr;
    cudaError_t instErr = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (!cudaOk(instErr, "cudaGraphInstantiate", why)) return false;
    graphs_.push_back(exec);
  }
  return true;
}

bool PointRunner::launchGraphs(int launches, int first, std::string* why) {
  for (int i = 0; i < launches; ++i) {
    cudaGraphExec_t exec = graphs_[(first + i) % graphs_.size()];
    if (!cudaOk(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch", why)) return false;
  }
  return true;
}

void PointRunner::destroyGraphs() {
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  graphs_.clear();
}

// The input set slot `slot` holds (sweep_check.h): the last set in every
// slot for the timed runs, the sets in turn from `firstSet` for a checked run.
static int inputSetOf(InputLayout layout, size_t slot, int firstSet = 0) {
  return layout == InputLayout::Timed ? kInputSets - 1 : int((slot + size_t(firstSet)) % kInputSets);
}

// This rank's inputs into the first kInputSets slots, then copied to every
// other slot, doubling the filled prefix each time (slots are evenly spaced;
// a prefix of whole cycles keeps the sets in turn).
bool PointRunner::loadInputs(const PointPlan& plan, const SizeData& data, InputLayout layout, std::string* why,
                             int firstSet) {
  char* send = static_cast<char*>(pools_->send);
  const size_t first = std::min<size_t>(kInputSets, plan.slots);
  for (size_t slot = 0; slot < first; ++slot) {
    const void* mine = data.input(world_->rank, inputSetOf(layout, slot, firstSet));
    char* dst = send + slot * plan.stride;
    if (!gpu_) std::memcpy(dst, mine, data.bytes);
    else if (!cudaOk(cudaMemcpyAsync(dst, mine, data.bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy", why))
      return false;
  }
  for (size_t filled = first; filled < plan.slots; filled *= 2) {
    size_t copy = std::min(filled, plan.slots - filled) * plan.stride;
    char* dst = send + filled * plan.stride;
    if (!gpu_) std::memcpy(dst, send, copy);
    else if (!cudaOk(cudaMemcpyAsync(dst, send, copy, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpy", why))
      return false;
  }
  return true;
}

bool PointRunner::runDevice(SweepMethod& method, Mode mode, const PointPlan& plan, const SizeData& data,
                            RankPoint* out, std::string* why) {
  bool graph = mode == Mode::Graph;
  size_t used = plan.slots * plan.stride;
  if (!loadInputs(plan, data, InputLayout::Timed, why) ||
      !cudaOk(cudaMemsetAsync(pools_->recv, kPoison, used, stream_), "cudaMemsetAsync", why) ||
      !waitStream("preparing buffers", why))
    return false;
  if (graph && !captureGraphs(method, plan, why)) return false;

  int launchesPerTrial = plan.opsPerTrial / plan.opsPerGraph;
  bool warm = graph ? launchGraphs(plan.warmupOps / plan.opsPerGraph, 0, why)
                    : enqueueEager(method, plan, plan.warmupOps, 0, why);
  if (!warm || !waitStream("warm-up", why)) return false;
  if (world_->bootstrap->barrier() != rcnSuccess) {
    *why = "barrier before the trials failed";
    return false;
  }
  std::vector<double> usPerOp;
  for (int t = 0; t < opts_.trials; ++t) {
    if (!cudaOk(cudaEventRecord(start_, stream_), "cudaEventRecord", why)) return false;
    bool enqueued = graph ? launchGraphs(launchesPerTrial, t * launchesPerTrial, why)
                          : enqueueEager(method, plan, plan.opsPerTrial, t * plan.opsPerTrial, why);
    if (!enqueued || !waitStream("a timed trial", why)) return false;
    float ms = 0;
    if (!cudaOk(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime", why)) return false;
    usPerOp.push_back(ms * 1000.0 / plan.opsPerTrial);
  }
  storeStats(usPerOp, out);
  if (!opts_.verify) return true;

  // The checked run: other inputs, poisoned outputs, then one all-reduce into every slot.
  if (!loadInputs(plan, data, InputLayout::Checked, why) ||
      !cudaOk(cudaMemsetAsync(pools_->recv, kPoison, used, stream_), "cudaMemsetAsync", why))
    return false;
  bool enqueued = graph ? launchGraphs(plan.graphs, 0, why)
                        : enqueueEager(method, plan, static_cast<int>(plan.slots), 0, why);
  if (!enqueued || !waitStream("the checked run", why)) return false;
  return checkOutputs(plan, data, &out->wrong, why);
}

// Counts, over every slot: output elements off the reference of the slot's
// input set; bytes written past the output's end (the slot's padding, still
// poisoned when nothing wrote there), in elements; elements of the input the
// call changed.
bool PointRunner::checkOutputs(const PointPlan& plan, const SizeData& data, long long* wrong, std::string* why,
                               int firstSet) {
  // The host backend's pools are host memory, read where they are; a GPU's are copied back.
  const char* recv = static_cast<const char*>(pools_->recv);
  const char* send = static_cast<const char*>(pools_->send);
  if (gpu_) {
    const size_t used = plan.slots * plan.stride;
    if (hostCopy_.size() < used) hostCopy_.resize(used), hostSendCopy_.resize(used);
    if (!cudaOk(cudaMemcpy(hostCopy_.data(), pools_->recv, used, cudaMemcpyDeviceToHost), "cudaMemcpy", why) ||
        !cudaOk(cudaMemcpy(hostSendCopy_.data(), pools_->send, used, cudaMemcpyDeviceToHost), "cudaMemcpy", why))
      return false;
    recv = hostCopy_.data();
    send = hostSendCopy_.data();
  }
  auto elementsDiffering = [&](const char* a, const char* b, size_t bytes) {
    long long n = 0;
    for (size_t at = 0; at < bytes; at += data.elemBytes)
      n += std::memcmp(a + at, b + at, std::min(data.elemBytes, bytes - at)) != 0;
    return n;
  };
  const std::vector<char> poison(plan.stride - data.bytes, static_cast<char>(kPoison));
  *wrong = 0;
  for (size_t s = 0; s < plan.slots; ++s) {
    const int set = inputSetOf(InputLayout::Checked, s, firstSet);
    const char* out = recv + s * plan.stride;
    *wrong += countWrong(out, data, set);
    *wrong += elementsDiffering(out + data.bytes, poison.data(), poison.size());
    *wrong += elementsDiffering(send + s * plan.stride, data.input(world_->rank, set), data.bytes);
  }
  return true;
}

bool PointRunner::runHost(SweepMethod& method, const PointPlan& plan, const SizeData& data, RankPoint* out,
                          std::string* why) {
  if (!loadInputs(plan, data, InputLayout::Timed, why)) return false;
  std::memset(pools_->recv, kPoison, plan.slots * plan.stride);
  if (!enqueueEager(method, plan, plan.warmupOps, 0, why)) return false;
  if (world_->bootstrap->barrier() != rcnSuccess) {
    *why = "barrier before the trials failed";
    return false;
  }
  std::vector<double> usPerOp;
  for (int t = 0; t < opts_.trials; ++t) {
    auto begin = Clock::now();
    if (!enqueueEager(method, plan, plan.opsPerTrial, t * plan.opsPerTrial, why)) return false;
    double us = std::chrono::duration<double, std::micro>(Clock::now() - begin).count();
    usPerOp.push_back(us / plan.opsPerTrial);
  }
  storeStats(usPerOp, out);
  if (!opts_.verify) return true;
  // One slot here: a checked call per input set, each set new to the two calls before it.
  out->wrong = 0;
  for (int firstSet = 0; firstSet < kInputSets; ++firstSet) {
    long long wrong = 0;
    if (!loadInputs(plan, data, InputLayout::Checked, why, firstSet)) return false;
    std::memset(pools_->recv, kPoison, plan.slots * plan.stride);
    if (!enqueueEager(method, plan, static_cast<int>(plan.slots), 0, why) ||
        !checkOutputs(plan, data, &wrong, why, firstSet))
      return false;
    out->wrong += wrong;
  }
  return true;
}

}  // namespace rcn::bench
