// SPDX-License-Identifier: BSD-3-Clause
// Facts about data types and ops, shared by host and device code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rocenante/rocenante.h"

namespace rcn {

inline size_t dtypeSize(rcnDataType_t t) {
  switch (t) {
    case rcnInt8: case rcnUint8: case rcnFloat8e4m3: case rcnFloat8e5m2: return 1;
    case rcnFloat16: case rcnBfloat16: return 2;
    case rcnInt32: case rcnUint32: case rcnFloat32: return 4;
    case rcnInt64: case rcnUint64: case rcnFloat64: return 8;
    default: return 0;
  }
}

inline const char* dtypeName(rcnDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return (t >= 0 && t < rcnNumTypes) ? names[t] : "invalid";
}

inline const char* opName(rcnRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return (op >= 0 && op < rcnNumOps) ? names[op] : "invalid";
}

inline bool dtypeIsValid(int t) { return t >= 0 && t < rcnNumTypes; }
inline bool opIsValid(int op) { return op >= 0 && op < rcnNumOps; }

// Whether count elements of a valid type t have a byte size that fits size_t;
// a count past that would wrap to a small size and pass every size check.
inline bool byteCountFits(size_t count, rcnDataType_t t) { return count <= SIZE_MAX / dtypeSize(t); }

}  // namespace rcn
