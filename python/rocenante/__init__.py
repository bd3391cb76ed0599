# SPDX-License-Identifier: BSD-3-Clause
"""rocenante for PyTorch: one-shot all-reduce (and the collectives beside it) on torch tensors.

    import rocenante
    comm = rocenante.Communicator(group)        # a torch.distributed group; gloo is enough
    comm.all_reduce(x)                          # in place, on the current CUDA stream
    if comm.should_use(x): ...                  # the same answer on every rank

The calls are torch.library custom ops (torch.ops.rocenante.*), so they are
captured in CUDA graphs and traced by torch.compile without graph breaks.
CPU tensors use the host backend (ROCENANTE_BACKEND=host where a GPU is visible).
"""
import torch  # noqa: F401  (the extension's calls take torch's tensors and streams)

from . import _ops  # noqa: F401  (registers torch.ops.rocenante.*)
from . import _rocenante as _C
from ._errors import (InternalError, InvalidArgumentError, InvalidUsageError, RemoteError, RocenanteError,
                      SystemError_, UnhandledCudaError)
from .communicator import CommInfo, Communicator, get_unique_id


def version() -> str:
    """The library's version, "major.minor.patch"."""
    code = _C.version()
    return "%d.%d.%d" % (code // 10000, code // 100 % 100, code % 100)


def available(collective: str) -> bool:
    """Whether the loaded library implements a collective ("all_reduce", "all_gather", "reduce_scatter",
    "all_reduce_residual_rms_norm")."""
    return _C.available(collective)


__all__ = ["Communicator", "CommInfo", "get_unique_id", "version", "available", "RocenanteError",
           "InvalidArgumentError", "InvalidUsageError", "RemoteError", "InternalError", "SystemError_",
           "UnhandledCudaError"]
