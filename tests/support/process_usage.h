// SPDX-License-Identifier: BSD-3-Clause
// What this process holds, for tests that check it stays flat over a long
// run (the soaks): open descriptors and resident memory, from /proc.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdio>

namespace rcn::test {

// Entries of /proc/self/fd (the directory's own descriptor included).
inline int openDescriptors() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir)) ++count;
    closedir(dir);
  }
  return count;
}

// Resident set size in bytes (/proc/self/statm), 0 if unreadable.
inline long residentBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace rcn::test
