// SPDX-License-Identifier: BSD-3-Clause
// The binary description each rank sends the others at communicator
// creation (topoGather over the bootstrap): a peer's bytes. What decodes
// must encode back to a blob that decodes the same.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  const std::string blob(reinterpret_cast<const char*>(data), size);
  rcn::RankTopo topo;
  if (rcn::topoDecode(blob, &topo) != rcnSuccess) return 0;
  const std::string encoded = rcn::topoEncode(topo);
  rcn::RankTopo again;
  if (rcn::topoDecode(encoded, &again) != rcnSuccess) abort();
  if (rcn::topoEncode(again) != encoded) abort();
  return 0;
}
