# SPDX-License-Identifier: BSD-3-Clause
"""The collectives as torch.library custom ops (namespace ``rocenante``).

As custom ops they run inside CUDA graphs (on the capturing stream) and
torch.compile traces them without a graph break. A communicator reaches an op
as its integer id (Communicator.id); the tensors carry everything else. Each op
checks its tensors (contiguous, on the communicator's device, types that
match) and writes only its mutable arguments:

  all_reduce_(Tensor(a!) tensor, int comm, int op)            in place
  all_reduce_out(Tensor input, Tensor(a!) out, int comm, int op)
  all_gather_out(Tensor input, Tensor(a!) out, int comm)
  reduce_scatter_out(Tensor input, Tensor(a!) out, int comm, int op)
  all_reduce_residual_rms_norm(Tensor input, Tensor(a!) residual, Tensor weight,
      Tensor(b!) norm_out, Tensor? scale, float eps, int comm)
"""
from typing import Dict, Optional

import torch

from . import _rocenante as _C
from ._types import dtype_code

# Live communicators by id, so an op refuses a closed one by name.
_COMMS: Dict[int, object] = {}


def _comm(comm_id: int, what: str):
    comm = _COMMS.get(comm_id)
    if comm is None:
        raise ValueError("%s: communicator %d is closed or was never made" % (what, comm_id))
    return comm


def cuda_index(t: torch.Tensor) -> int:
    """The index of t's CUDA device; -1 for a CPU tensor (the host backend)."""
    return t.device.index if t.is_cuda else -1


def current_stream(cuda_device: int) -> int:
    """The current stream's handle on a CUDA device (cuda_index); 0 for the CPU."""
    return torch.cuda.current_stream(cuda_device).cuda_stream if cuda_device >= 0 else 0


def _stream(t: torch.Tensor) -> int:
    return current_stream(cuda_index(t))


def _check(comm, t: torch.Tensor, name: str, what: str) -> None:
    if t.device != comm.device:
        raise ValueError("%s: %s is on %s, the communicator on %s" % (what, name, t.device, comm.device))
    if not t.is_contiguous():
        raise ValueError("%s: %s is not contiguous (call .contiguous() first)" % (what, name))


def _check_like(t: torch.Tensor, name: str, ref: torch.Tensor, ref_name: str, numel: int, what: str) -> None:
    if t.dtype != ref.dtype:
        raise TypeError("%s: %s is %s but %s is %s" % (what, name, t.dtype, ref_name, ref.dtype))
    if t.numel() != numel:
        raise ValueError("%s: %s has %d elements, it needs %d" % (what, name, t.numel(), numel))


@torch.library.custom_op("rocenante::all_reduce_", mutates_args=("tensor",))
def all_reduce_(tensor: torch.Tensor, comm: int, op: int) -> None:
    what = "all_reduce"
    c = _comm(comm, what)
    _check(c, tensor, "tensor", what)
    _C.all_reduce(c.handle, tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), dtype_code(tensor.dtype, what), op,
                  _stream(tensor))


@all_reduce_.register_fake
def _(tensor, comm, op):
    return None


@torch.library.custom_op("rocenante::all_reduce_out", mutates_args=("out",))
def all_reduce_out(input: torch.Tensor, out: torch.Tensor, comm: int, op: int) -> None:
    what = "all_reduce"
    c = _comm(comm, what)
    _check(c, input, "input", what)
    _check(c, out, "out", what)
    _check_like(out, "out", input, "input", input.numel(), what)
    _C.all_reduce(c.handle, input.data_ptr(), out.data_ptr(), input.numel(), dtype_code(input.dtype, what), op,
                  _stream(input))


@all_reduce_out.register_fake
def _(input, out, comm, op):
    return None


@torch.library.custom_op("rocenante::all_gather_out", mutates_args=("out",))
def all_gather_out(input: torch.Tensor, out: torch.Tensor, comm: int) -> None:
    what = "all_gather"
    c = _comm(comm, what)
    _check(c, input, "input", what)
    _check(c, out, "out", what)
    _check_like(out, "out", input, "input", input.numel() * c.world_size, what)
    _C.all_gather(c.handle, input.data_ptr(), out.data_ptr(), input.numel(), dtype_code(input.dtype, what),
                  _stream(input))


@all_gather_out.register_fake
def _(input, out, comm):
    return None


@torch.library.custom_op("rocenante::reduce_scatter_out", mutates_args=("out",))
def reduce_scatter_out(input: torch.Tensor, out: torch.Tensor, comm: int, op: int) -> None:
    what = "reduce_scatter"
    c = _comm(comm, what)
    _check(c, input, "input", what)
    _check(c, out, "out", what)
    if input.numel() % c.world_size:
        raise ValueError("%s: input has %d elements, not a multiple of the %d ranks" % (what, input.numel(),
                                                                                      c.world_size))
    _check_like(out, "out", input, "input", input.numel() // c.world_size, what)
    _C.reduce_scatter(c.handle, input.data_ptr(), out.data_ptr(), out.numel(), dtype_code(input.dtype, what), op,
                      _stream(input))


@reduce_scatter_out.register_fake
def _(input, out, comm, op):
    return None


@torch.library.custom_op("rocenante::all_reduce_residual_rms_norm", mutates_args=("residual", "norm_out"))
def all_reduce_residual_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                                 norm_out: torch.Tensor, scale: Optional[torch.Tensor], eps: float, comm: int) -> None:
    what = "all_reduce_residual_rms_norm"
    c = _comm(comm, what)
    for t, name in ((input, "input"), (residual, "residual"), (weight, "weight"), (norm_out, "norm_out")):
        _check(c, t, name, what)
    if input.dim() < 1 or input.shape[-1] == 0:
        raise ValueError("%s: input must be [tokens, hidden] with hidden > 0, got shape %s" % (what, tuple(input.shape)))
    hidden = input.shape[-1]
    tokens = input.numel() // hidden
    _check_like(residual, "residual", input, "input", input.numel(), what)
    _check_like(weight, "weight", input, "input", hidden, what)
    if norm_out.numel() != input.numel():
        raise ValueError("%s: norm_out has %d elements, it needs %d" % (what, norm_out.numel(), input.numel()))
    scale_ptr = 0
    if norm_out.dtype == torch.float8_e4m3fn:
        if scale is None:
            raise ValueError("%s: an e4m3 norm_out needs scale (one float32: norm_out = e4m3(norm / scale))" % what)
        _check(c, scale, "scale", what)
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise TypeError("%s: scale must be one float32, got %d of %s" % (what, scale.numel(), scale.dtype))
        scale_ptr = scale.data_ptr()
    elif norm_out.dtype != input.dtype:
        raise TypeError("%s: norm_out is %s; it must be input's %s or float8_e4m3fn" % (what, norm_out.dtype,
                                                                                       input.dtype))
    elif scale is not None:
        raise ValueError("%s: scale applies to an e4m3 norm_out only" % what)
    _C.all_reduce_residual_rms_norm(c.handle, input.data_ptr(), residual.data_ptr(), weight.data_ptr(),
                                    norm_out.data_ptr(), tokens, hidden, dtype_code(input.dtype, what),
                                    dtype_code(norm_out.dtype, what), scale_ptr, eps, _stream(input))


@all_reduce_residual_rms_norm.register_fake
def _(input, residual, weight, norm_out, scale, eps, comm):
    return None
