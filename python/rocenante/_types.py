# SPDX-License-Identifier: BSD-3-Clause
"""torch dtypes and reduction names as the C API's numbers (rocenante.h)."""
import torch

# rcnDataType_t, which matches ncclDataType_t.
DTYPES = {
    torch.int8: 0,
    torch.uint8: 1,
    torch.int32: 2,
    torch.int64: 4,
    torch.float16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bfloat16: 9,
    torch.float8_e4m3fn: 10,
    torch.float8_e5m2: 11,
}
for _name, _code in (("uint32", 3), ("uint64", 5)):
    if hasattr(torch, _name):  # unsigned 32/64-bit tensors came in later PyTorch versions
        DTYPES[getattr(torch, _name)] = _code

# rcnRedOp_t, which matches ncclRedOp_t.
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}

# rcnPath_t.
PATHS = {0: "nccl", 1: "p2p", 2: "proxy", 3: "host"}


def dtype_code(dtype: torch.dtype, what: str) -> int:
    try:
        return DTYPES[dtype]
    except KeyError:
        names = ", ".join(str(d).replace("torch.", "") for d in DTYPES)
        raise TypeError("%s: dtype %s is not one rocenante reduces (it takes %s)" % (what, dtype, names)) from None


def op_code(op: str, what: str) -> int:
    try:
        return OPS[op]
    except (KeyError, TypeError):
        raise ValueError("%s: op %r is not one of %s" % (what, op, ", ".join(OPS))) from None
