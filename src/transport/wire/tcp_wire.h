// SPDX-License-Identifier: BSD-3-Clause
// Testing aids of the tcp wire (process-wide; tests run ranks as processes).
#pragma once

#include <atomic>

namespace rcn {

// While positive, each DATA frame this process sends carries an offset past
// the end of the peer's region (and the counter drops by one): the receiver
// must reject it, record an error and close the connection.
extern std::atomic<int> gTcpWireCorruptFrames;

// While positive, a DATA frame this process sends stops after its header and
// half its payload (and the counter drops by one): the sender then holds the
// connection until the wire fails, as a sender stuck mid-frame would. The
// receiver must give up after its timeout and say the payload stalled.
extern std::atomic<int> gTcpWireStallFrames;

}  // namespace rcn
