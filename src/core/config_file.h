// Reading the files a user points rocenante at (ROCENANTE_POLICY,
// ROCENANTE_TOPO_FILE) whole, safely.
#pragma once

#include <cstddef>
#include <string>

namespace rcn {

// Far above any real policy or topology file (a few KB), far below memory.
constexpr size_t kMaxConfigFileBytes = size_t(64) << 20;

// Reads the regular file at path into text. A directory, a FIFO, a device
// such as /dev/zero or a file over kMaxConfigFileBytes is refused with why
// naming it, so that none can hang or fill memory; so is one that cannot be
// opened (why: the system's reason).
bool readConfigFile(const std::string& path, std::string* text, std::string* why);

}  // namespace rcn
