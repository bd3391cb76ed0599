// Shared helpers of the topology tests.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace topotest {

inline std::string fixture(const std::string& name) { return std::string(RCN_TOPO_FIXTURES) + "/" + name; }

// Sets an environment variable for one test case.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, hadOld_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (hadOld_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool hadOld_ = false;
};

// Loads a topology file and classifies it.
inline rcn::CommTopo classifyFile(const std::string& name) {
  rcn::CommTopo topo;
  if (rcn::topoLoadFile(fixture(name), &topo.ranks) != rcnSuccess) return topo;
  rcn::topoClassify(&topo);
  return topo;
}

}  // namespace topotest
