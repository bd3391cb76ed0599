// What YAML takes without a word, for the readers that refuse it (policy and
// topology files): a key given twice in one mapping, of which yaml-cpp keeps
// one, and a document after the first, which a single-document load drops.
// Include only where ROCENANTE_HAVE_YAML is defined.
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <vector>

namespace rcn {

// The second occurrence of a scalar key that `map` gives twice, or a null node.
inline YAML::Node repeatedKey(const YAML::Node& map) {
  std::set<std::string> seen;
  for (const auto& item : map)
    if (item.first.IsScalar() && !seen.insert(item.first.Scalar()).second) return item.first;
  return YAML::Node();
}

// The index of the first document after the first that says something (an
// empty one, as after a final `---`, does not), or 0 when there is none.
inline size_t extraDocument(const std::vector<YAML::Node>& documents) {
  for (size_t d = 1; d < documents.size(); ++d)
    if (!documents[d].IsNull()) return d;
  return 0;
}

}  // namespace rcn
