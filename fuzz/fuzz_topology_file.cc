// SPDX-License-Identifier: BSD-3-Clause
// ROCENANTE_TOPO_FILE: the topology file (YAML or JSON). A file that parses
// must survive a round trip through the dump writer unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  rcn::CommTopo topo;
  if (rcn::topoParseText(text, "fuzz.yaml", &topo.ranks) != rcnSuccess) return 0;
  const std::string dump = rcn::topoToJson(topo);
  rcn::CommTopo again;
  if (rcn::topoParseText(dump, "dump.json", &again.ranks) != rcnSuccess) abort();
  if (rcn::topoToJson(again) != dump) abort();
  return 0;
}
