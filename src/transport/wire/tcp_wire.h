// Testing aids of the tcp wire (process-wide; tests run ranks as processes).
#pragma once

#include <atomic>

namespace rcn {

// While positive, each DATA frame this process sends carries an offset past
// the end of the peer's region (and the counter drops by one): the receiver
// must reject it, record an error and close the connection.
extern std::atomic<int> gTcpWireCorruptFrames;

}  // namespace rcn
