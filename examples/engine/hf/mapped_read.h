// SPDX-License-Identifier: BSD-3-Clause
// Reading a file mapping that another process may shrink meanwhile (a copy
// still being written, a sync tool rewriting a checkpoint). The kernel then
// raises SIGBUS at the first access past the new end, which would end the
// process without a word. readMapped runs a read of [begin, begin + bytes)
// with a handler that turns such a fault inside that range into a false
// return, so the caller can name the file. A SIGBUS anywhere else, or one a
// process sent, goes on to whatever handled it before (by default, ending the
// process). A read inside a read covers only its own bytes.
#pragma once

#include <cstddef>
#include <type_traits>

namespace engine::hf {

// Runs body(context); false when a read of [begin, begin + bytes) faulted
// with SIGBUS (what body wrote so far is then partial). body must not own
// anything with a destructor on its stack: the fault leaves it by a jump.
bool readMappedRaw(const void* begin, size_t bytes, void (*body)(void*), void* context);

// The same for any callable.
template <typename F>
bool readMapped(const void* begin, size_t bytes, F&& body) {
  using Body = std::remove_reference_t<F>;
  return readMappedRaw(begin, bytes, [](void* c) { (*static_cast<Body*>(c))(); }, &body);
}

}  // namespace engine::hf
