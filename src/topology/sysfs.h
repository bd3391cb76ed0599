// SPDX-License-Identifier: BSD-3-Clause
// Small readers for sysfs/procfs-style files under a configurable root, so the
// same code reads the real /sys and a test's fixture tree.
#pragma once

#include <string>
#include <vector>

#include "core/strings.h"

namespace rcn {

// root + path, with exactly one '/' between them.
std::string joinPath(const std::string& root, const std::string& path);

// The file's first line without the trailing newline; false if unreadable
// or not a regular file of at most 1 MB (a FIFO, /dev/zero).
bool readFirstLine(const std::string& path, std::string* line);
// The whole file; false as for readFirstLine.
bool readWholeFile(const std::string& path, std::string* text);

// Names in a directory (no "." / ".."), sorted; empty if unreadable.
std::vector<std::string> listDir(const std::string& path);

// The path a symlink resolves to (realpath); "" if it does not resolve.
std::string resolvePath(const std::string& path);

}  // namespace rcn
