// SPDX-License-Identifier: BSD-3-Clause
// Prints the installed library's version through the public API.
#include <rocenante/rocenante.h>

#include <cstdio>

int main() {
  int version = 0;
  if (rcnGetVersion(&version) != rcnSuccess) return 1;
  std::printf("rocenante %d\n", version);
  return version == ROCENANTE_VERSION_CODE ? 0 : 1;
}
