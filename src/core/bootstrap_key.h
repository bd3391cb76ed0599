// SPDX-License-Identifier: BSD-3-Clause
// The shared key of a MASTER_ADDR:MASTER_PORT rendezvous, where nobody can
// hand the ranks a unique id: ROCENANTE_BOOTSTRAP_KEY or the contents of
// ROCENANTE_BOOTSTRAP_KEY_FILE, the same on every rank.
#pragma once

#include "core/auth.h"
#include "rocenante/rocenante.h"

namespace rcn {

// The least a key may hold: 16 bytes, so a guess is hopeless.
constexpr size_t kMinLaunchKeyBytes = 16;
// The most a key file may hold: a key, not a document.
constexpr size_t kMaxLaunchKeyBytes = 4096;

// The configured key, or an empty one (*configured false) when neither
// variable is set. rcnInvalidArgument, naming the variable, for a key under
// kMinLaunchKeyBytes, both variables set, or a key file that cannot be read
// or is too large. Warns when the key file is readable by group or others.
rcnResult_t launchKey(AuthKey* key, bool* configured);

}  // namespace rcn
