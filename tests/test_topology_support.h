// SPDX-License-Identifier: BSD-3-Clause
// Shared helpers of the topology tests.
#pragma once
#include "support/scoped_env.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace topotest {

inline std::string fixture(const std::string& name) { return std::string(RCN_TOPO_FIXTURES) + "/" + name; }

using rcn::test::ScopedEnv;

// Loads a topology file and classifies it.
inline rcn::CommTopo classifyFile(const std::string& name) {
  rcn::CommTopo topo;
  if (rcn::topoLoadFile(fixture(name), &topo.ranks) != rcnSuccess) return topo;
  rcn::topoClassify(&topo);
  return topo;
}

}  // namespace topotest
