// SPDX-License-Identifier: BSD-3-Clause
#include "p2p_harness.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "core/bootstrap.h"
#include "core/dtype.h"
#include "support/reference.h"

namespace rcn::test {

namespace {

uint64_t fnv1a(const char* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ull;
  return h;
}

std::string describe(const Call& c) {
  return std::string(dtypeName(c.dtype)) + " " + opName(c.op) + " count " + std::to_string(c.count) +
         " send+" + std::to_string(c.sendOffset) + " recv+" + std::to_string(c.recvOffset) +
         (c.inPlace ? " in-place" : "") + " comm " + std::to_string(c.comm);
}

uint64_t inputSeed(uint64_t seed, size_t call, int rank) { return seed * 1000003ull + call * 131ull + rank; }

}  // namespace

bool cudaOk(cudaError_t err, const char* what, std::string* why) {
  if (err == cudaSuccess) return true;
  *why = std::string(what) + ": " + cudaGetErrorString(err);
  return false;
}

BatchRunner::BatchRunner(int nranks, size_t maxBytes, std::vector<LocalRank> locals, Exchange exchange)
    : nranks_(nranks), maxBytes_(maxBytes), slotBytes_(maxBytes + 256), locals_(std::move(locals)),
      exchange_(std::move(exchange)) {}

BatchRunner::~BatchRunner() {
  for (LocalRank& l : locals_) {
    cudaSetDevice(l.device);
    if (l.send) cudaFree(l.send);
    if (l.recv) cudaFree(l.recv);
    if (l.stream) cudaStreamDestroy(l.stream);
  }
}

bool BatchRunner::setUp(std::string* why) {
  for (LocalRank& l : locals_) {
    if (!cudaOk(cudaSetDevice(l.device), "cudaSetDevice", why) ||
        !cudaOk(cudaMalloc(reinterpret_cast<void**>(&l.send), slotBytes_ * kMaxCalls), "cudaMalloc", why) ||
        !cudaOk(cudaMalloc(reinterpret_cast<void**>(&l.recv), slotBytes_ * kMaxCalls), "cudaMalloc", why) ||
        !cudaOk(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), "cudaStreamCreate", why))
      return false;
  }
  return true;
}

// Generates every rank's inputs, poisons both slots, and copies the local
// ranks' inputs into place.
bool BatchRunner::prepare(const std::vector<Call>& calls, uint64_t seed,
                          std::vector<std::vector<std::vector<char>>>* inputs, std::string* why) {
  inputs->assign(calls.size(), std::vector<std::vector<char>>(nranks_));
  for (size_t j = 0; j < calls.size(); ++j) {
    const Call& c = calls[j];
    for (int r = 0; r < nranks_; ++r) {
      std::vector<char>& in = (*inputs)[j][r];
      in.resize(c.count * dtypeSize(c.dtype));
      fillRandom(in.data(), c.count, c.dtype, c.op, nranks_, inputSeed(seed, j, r));
    }
  }
  for (LocalRank& l : locals_) {
    if (!cudaOk(cudaSetDevice(l.device), "cudaSetDevice", why) ||
        !cudaOk(cudaMemset(l.send, kPoisonByte, slotBytes_ * kMaxCalls), "poison send", why) ||
        !cudaOk(cudaMemset(l.recv, kPoisonByte, slotBytes_ * kMaxCalls), "poison recv", why))
      return false;
    for (size_t j = 0; j < calls.size(); ++j) {
      const Call& c = calls[j];
      const size_t size = dtypeSize(c.dtype);
      char* dst = c.inPlace ? l.recv + j * slotBytes_ + c.recvOffset * size : l.send + j * slotBytes_ + c.sendOffset * size;
      const std::vector<char>& in = (*inputs)[j][l.rank];
      if (!cudaOk(cudaMemcpy(dst, in.data(), in.size(), cudaMemcpyHostToDevice), "copy input", why)) return false;
    }
    if (!cudaOk(cudaDeviceSynchronize(), "cudaDeviceSynchronize", why)) return false;
  }
  return true;
}

bool BatchRunner::launchAll(const std::vector<Call>& calls, std::string* why) {
  for (size_t j = 0; j < calls.size(); ++j) {
    const Call& c = calls[j];
    const size_t size = dtypeSize(c.dtype);
    for (LocalRank& l : locals_) {
      char* recv = l.recv + j * slotBytes_ + c.recvOffset * size;
      const char* send = c.inPlace ? recv : l.send + j * slotBytes_ + c.sendOffset * size;
      cudaSetDevice(l.device);
      rcnResult_t res = l.comms[c.comm](send, recv, c.count, c.dtype, c.op, l.stream);
      if (res != rcnSuccess) {
        *why = "rank " + std::to_string(l.rank) + ": all-reduce returned " + rcnGetErrorString(res) + " for " + describe(c);
        return false;
      }
    }
  }
  return true;
}

bool BatchRunner::launchGraphs(const std::vector<cudaGraphExec_t>& graphs, std::string* why) {
  for (size_t i = 0; i < locals_.size(); ++i) {
    cudaSetDevice(locals_[i].device);
    if (!cudaOk(cudaGraphLaunch(graphs[i], locals_[i].stream), "cudaGraphLaunch", why)) return false;
  }
  return true;
}

bool BatchRunner::check(const std::vector<Call>& calls, const std::vector<std::vector<std::vector<char>>>& inputs,
                        std::string* why) {
  std::vector<uint64_t> hashes;
  std::vector<char> slot(slotBytes_);
  for (LocalRank& l : locals_) {
    cudaSetDevice(l.device);
    if (!cudaOk(cudaStreamSynchronize(l.stream), "cudaStreamSynchronize", why)) return false;
  }
  for (size_t j = 0; j < calls.size(); ++j) {
    const Call& c = calls[j];
    const size_t size = dtypeSize(c.dtype), bytes = c.count * size, begin = c.recvOffset * size;
    std::vector<const void*> ins;
    for (int r = 0; r < nranks_; ++r) ins.push_back(inputs[j][r].data());
    const Reference ref = referenceAllReduce(ins, c.count, c.dtype, c.op);
    for (LocalRank& l : locals_) {
      cudaSetDevice(l.device);
      if (!cudaOk(cudaMemcpy(slot.data(), l.recv + j * slotBytes_, slotBytes_, cudaMemcpyDeviceToHost), "copy output", why))
        return false;
      const std::string where = "rank " + std::to_string(l.rank) + ", call " + std::to_string(j) + " (" + describe(c) + "): ";
      for (size_t b = 0; b < slotBytes_; ++b) {
        if (b >= begin && b < begin + bytes) continue;
        if (static_cast<uint8_t>(slot[b]) != kPoisonByte) {
          *why = where + "byte " + std::to_string(b) + " outside the output was overwritten";
          return false;
        }
      }
      std::string bad;
      if (!matchesReference(slot.data() + begin, ref, c.count, c.dtype, &bad)) {
        *why = where + bad;
        return false;
      }
    }
  }
  // Bit-identical across ranks: hash each output, compare everyone's.
  for (LocalRank& l : locals_) {
    for (size_t j = 0; j < calls.size(); ++j) {
      const Call& c = calls[j];
      const size_t size = dtypeSize(c.dtype);
      cudaSetDevice(l.device);
      std::vector<char> out(c.count * size);
      if (!cudaOk(cudaMemcpy(out.data(), l.recv + j * slotBytes_ + c.recvOffset * size, out.size(), cudaMemcpyDeviceToHost),
                  "copy output", why))
        return false;
      hashes.push_back(fnv1a(out.data(), out.size()));
    }
  }
  std::vector<uint64_t> all;
  if (!exchange_(hashes, &all) || all.size() != static_cast<size_t>(nranks_) * calls.size()) {
    *why = "exchanging output hashes failed";
    return false;
  }
  for (int r = 1; r < nranks_; ++r)
    for (size_t j = 0; j < calls.size(); ++j)
      if (all[r * calls.size() + j] != all[j]) {
        *why = "call " + std::to_string(j) + " (" + describe(calls[j]) + "): rank " + std::to_string(r) +
               "'s output differs in bits from rank 0's";
        return false;
      }
  return true;
}

bool BatchRunner::run(const std::vector<Call>& calls, uint64_t seed, bool graph, int replays, std::string* why) {
  if (calls.size() > static_cast<size_t>(kMaxCalls)) {
    *why = "too many calls in one batch";
    return false;
  }
  std::vector<std::vector<std::vector<char>>> inputs;
  if (!graph) {
    return prepare(calls, seed, &inputs, why) && launchAll(calls, why) && check(calls, inputs, why);
  }
  // Capture each local rank's calls on its own stream.
  std::vector<cudaGraphExec_t> execs(locals_.size(), nullptr);
  bool ok = true;
  for (size_t i = 0; i < locals_.size() && ok; ++i) {
    LocalRank& l = locals_[i];
    cudaSetDevice(l.device);
    cudaGraph_t g = nullptr;
    ok = cudaOk(cudaStreamBeginCapture(l.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", why);
    if (!ok) break;
    std::vector<LocalRank> saved;
    saved.swap(locals_);
    locals_.push_back(l);  // launch only this rank's calls
    ok = launchAll(calls, why);
    locals_.swap(saved);
    cudaError_t end = cudaStreamEndCapture(l.stream, &g);
    ok = ok && cudaOk(end, "cudaStreamEndCapture", why) &&
         cudaOk(cudaGraphInstantiate(&execs[i], g, 0), "cudaGraphInstantiate", why);
    if (g) cudaGraphDestroy(g);
  }
  for (int rep = 0; rep < replays && ok; ++rep) {
    ok = prepare(calls, seed + 7919ull * rep, &inputs, why) && launchGraphs(execs, why) && check(calls, inputs, why);
    if (!ok) *why = "graph replay " + std::to_string(rep) + ": " + *why;
  }
  for (size_t i = 0; i < execs.size(); ++i)
    if (execs[i]) {
      cudaSetDevice(locals_[i].device);
      cudaGraphExecDestroy(execs[i]);
    }
  return ok;
}

std::vector<Call> everyTypeAndOp(uint64_t seed, size_t maxBytes, int comms) {
  std::mt19937_64 rng(seed);
  std::vector<Call> calls;
  for (int t = 0; t < rcnNumTypes; ++t) {
    for (int o = 0; o < rcnNumOps; ++o) {
      const rcnDataType_t dtype = static_cast<rcnDataType_t>(t);
      const size_t maxCount = maxBytes / dtypeSize(dtype);
      std::uniform_int_distribution<size_t> small(1, 64), any(1, maxCount);
      for (int variant = 0; variant < 3; ++variant) {
        Call c;
        c.dtype = dtype;
        c.op = static_cast<rcnRedOp_t>(o);
        c.comm = static_cast<int>(rng() % comms);
        if (variant == 0) {  // tiny and unaligned
          c.count = small(rng);
          c.sendOffset = 1;
          c.recvOffset = static_cast<int>(rng() % 2);
        } else if (variant == 1) {
          c.count = any(rng);
          c.recvOffset = static_cast<int>(rng() % 2);
        } else {
          c.count = any(rng);
          c.inPlace = true;
          c.recvOffset = static_cast<int>(rng() % 2);
        }
        calls.push_back(c);
      }
    }
  }
  std::shuffle(calls.begin(), calls.end(), rng);
  return calls;
}

bool runInBatches(BatchRunner& runner, const std::vector<Call>& calls, uint64_t seed, bool graph,
                  std::string* why) {
  for (size_t first = 0; first < calls.size(); first += BatchRunner::kMaxCalls) {
    const size_t last = std::min(calls.size(), first + BatchRunner::kMaxCalls);
    std::vector<Call> batch(calls.begin() + first, calls.begin() + last);
    if (!runner.run(batch, seed + first, graph, graph ? 2 : 1, why)) return false;
  }
  return true;
}

AllReduceFn commFn(rcnComm_t comm) {
  return [comm](const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                cudaStream_t stream) { return rcnAllReduce(send, recv, count, dtype, op, comm, stream); };
}

BatchRunner::Exchange exchangeViaBootstrap(Bootstrap* bootstrap, int rank, int nranks) {
  return [bootstrap, rank, nranks](const std::vector<uint64_t>& local, std::vector<uint64_t>* all) {
    all->assign(local.size() * nranks, 0);
    std::memcpy(all->data() + rank * local.size(), local.data(), local.size() * sizeof(uint64_t));
    return bootstrap->allGather(all->data(), local.size() * sizeof(uint64_t)) == rcnSuccess;
  };
}

}  // namespace rcn::test
