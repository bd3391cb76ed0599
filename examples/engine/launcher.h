// --tp N on the GPU path: one process per GPU. The launching process makes
// the rcn unique id, starts N copies of this program with --rank r and the id,
// and waits for them. When one rank fails, the others get a grace period and
// are then killed, so a broken run never hangs.
#pragma once

#include <string>

namespace engine {

// Returns 0 when every rank exited 0, else the first failing rank's status (or 1).
int launchRanks(int ranks, int argc, char** argv, const std::string& uniqueIdHex);

std::string toHex(const void* data, size_t bytes);
// Throws EngineError unless hex is exactly 2 * bytes hex digits.
void fromHex(const std::string& hex, void* data, size_t bytes);

}  // namespace engine
