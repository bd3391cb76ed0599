#include "model.h"

#include <sstream>

namespace engine {

void validateConfig(const ModelConfig& c) {
  auto fail = [](const std::string& what) { throw EngineError("model shape: " + what); };
  if (c.dim <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kvHeads <= 0 ||
      c.headDim <= 0 || c.vocab <= 0 || c.seqLen <= 0)
    fail("every size must be positive (" + describeConfig(c) + ")");
  if (c.heads % c.kvHeads != 0)
    fail("heads " + std::to_string(c.heads) + " is not a multiple of kv heads " +
         std::to_string(c.kvHeads));
  if (c.headDim % 2 != 0) fail("head size " + std::to_string(c.headDim) + " is odd; RoPE needs pairs");
}

std::string describeConfig(const ModelConfig& c) {
  std::ostringstream s;
  s << c.arch << " dim=" << c.dim << " hidden=" << c.hidden << " layers=" << c.layers
    << " heads=" << c.heads << " kv_heads=" << c.kvHeads << " head_dim=" << c.headDim
    << " vocab=" << c.vocab << " seq_len=" << c.seqLen
    << " rope=" << (c.ropeInterleaved ? "interleaved" : "rotate-half") << " theta=" << c.ropeTheta
    << (c.qkNorm ? " qk_norm" : "") << (c.tiedClassifier ? " tied" : "");
  return s.str();
}

}  // namespace engine
