// SPDX-License-Identifier: BSD-3-Clause
#include "llama2c_loader.h"

#include <climits>
#include <cstdint>
#include <cstdio>

#include "input_file.h"

namespace engine {

namespace {

// Reads the next `count` floats, or throws naming the tensor that was cut
// short or holds a NaN or infinity.
std::vector<float> readFloats(FILE* f, size_t count, const std::string& path, const char* tensor) {
  std::vector<float> v(count);
  if (std::fread(v.data(), sizeof(float), count, f) != count)
    throw EngineError(path + ": truncated while reading " + tensor);
  requireFinite(v, path + ": " + tensor);
  return v;
}

// The config in the 28-byte header of the open file f.
ModelConfig readHeader(FILE* f, const std::string& path) {
  int32_t header[7];
  if (std::fread(header, sizeof(int32_t), 7, f) != 7)
    throw EngineError(path + ": shorter than the 28-byte llama2.c header");
  ModelConfig c;
  c.arch = "llama";
  c.dim = header[0];
  c.hidden = header[1];
  c.layers = header[2];
  c.heads = header[3];
  c.kvHeads = header[4];
  if (header[5] == INT_MIN) throw EngineError(path + ": header vocabulary size " + std::to_string(header[5]) + " is out of range");
  c.tiedClassifier = header[5] > 0;
  c.vocab = header[5] > 0 ? header[5] : -header[5];  // negative: the file has its own classifier
  c.seqLen = header[6];
  c.headDim = c.heads > 0 ? c.dim / c.heads : 0;
  c.ropeInterleaved = true;
  c.ropeTheta = 10000.0f;
  c.normEps = 1e-5f;
  if (c.heads <= 0 || c.dim % c.heads != 0)
    throw EngineError(path + ": header dim " + std::to_string(c.dim) + " / heads " +
                      std::to_string(c.heads) + " is not a whole head size");
  validateConfig(c);
  return c;
}

// The bytes a checkpoint of config c takes, in double: a header of absurd
// sizes must not wrap around 64 bits into a small number (exact below 2^53).
double checkpointBytes(const ModelConfig& c) {
  const double d = c.dim, h = c.hidden, L = c.layers, q = double(c.heads) * c.headDim,
               kv = double(c.kvHeads) * c.headDim, vocab = c.vocab;
  double floats = vocab * d + L * (2 * d + q * d + 2 * kv * d + d * q + 3 * h * d) + d +
                  double(c.seqLen) * c.headDim;  // two half-size RoPE tables
  if (!c.tiedClassifier) floats += vocab * d;
  return 28 + floats * sizeof(float);
}

}  // namespace

ModelConfig readLlama2cConfig(const std::string& path) {
  size_t bytes = 0;
  InputFile f = openInputFile(path, "llama2.c checkpoint", &bytes);
  return readHeader(f.get(), path);
}

ModelWeights loadLlama2c(const std::string& path) {
  size_t bytes = 0;
  InputFile f = openInputFile(path, "llama2.c checkpoint", &bytes);
  ModelWeights m;
  m.config = readHeader(f.get(), path);
  const ModelConfig& c = m.config;

  // The format has no room for anything else, so the header must account for
  // every byte: a file longer than it says (a size field too small, a
  // classifier the sign of the vocabulary size says is not there) would
  // otherwise load shifted weights and decode garbage. Checked before
  // reading, so a wrong file fails with one clear line.
  const double expected = checkpointBytes(c);
  if (double(bytes) != expected) {
    char needed[32];
    std::snprintf(needed, sizeof needed, "%.0f", expected);
    throw EngineError(path + ": " + std::to_string(bytes) + " bytes, but the header (" + describeConfig(c) +
                      (c.tiedClassifier ? ", classifier shared with the embedding" : ", own classifier") +
                      ") needs exactly " + needed);
  }
  const size_t d = c.dim, h = c.hidden, L = c.layers, q = size_t(c.heads) * c.headDim,
               kv = size_t(c.kvHeads) * c.headDim;

  // The file stores each kind of tensor for all layers together.
  m.embedding = readFloats(f.get(), c.vocab * d, path, "token_embedding");
  m.layers.resize(L);
  for (auto& w : m.layers) w.attnNorm = readFloats(f.get(), d, path, "rms_att");
  for (auto& w : m.layers) w.wq = readFloats(f.get(), q * d, path, "wq");
  for (auto& w : m.layers) w.wk = readFloats(f.get(), kv * d, path, "wk");
  for (auto& w : m.layers) w.wv = readFloats(f.get(), kv * d, path, "wv");
  for (auto& w : m.layers) w.wo = readFloats(f.get(), d * q, path, "wo");
  for (auto& w : m.layers) w.ffnNorm = readFloats(f.get(), d, path, "rms_ffn");
  for (auto& w : m.layers) w.wGate = readFloats(f.get(), h * d, path, "w1");
  for (auto& w : m.layers) w.wDown = readFloats(f.get(), d * h, path, "w2");
  for (auto& w : m.layers) w.wUp = readFloats(f.get(), h * d, path, "w3");
  m.finalNorm = readFloats(f.get(), d, path, "rms_final");
  readFloats(f.get(), size_t(c.seqLen) * c.headDim, path, "freq_cis");  // unused: RoPE is computed
  if (!c.tiedClassifier) m.classifier = readFloats(f.get(), c.vocab * d, path, "wcls");
  return m;
}

}  // namespace engine
