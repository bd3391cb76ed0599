# SPDX-License-Identifier: BSD-3-Clause
"""Communicator: a rocenante communicator over torch tensors."""
import itertools
import os
from dataclasses import dataclass
from typing import Optional, Union

import torch

from . import _ops
from . import _rocenante as _C
from ._types import DTYPES, PATHS, op_code

_ids = itertools.count(1)


@dataclass(frozen=True)
class CommInfo:
    """What rcnCommQuery reports: the path small all-reduces take and its limit."""

    rank: int
    world_size: int
    device: torch.device
    path: str  # "p2p", "proxy", "host" or "nccl" (fast path off)
    transport: str  # "p2p-ipc", "proxy-shm", "host-tcp", ...
    max_bytes: int  # largest all-reduce the fast path takes
    self_test_passed: bool
    self_test_us_fast: float
    self_test_us_nccl: float
    reason: str  # why this path, or why the fast path is off


def get_unique_id() -> bytes:
    """A new communicator id (rank 0 makes it, every rank passes it to Communicator)."""
    return _C.get_unique_id()


def _default_device() -> torch.device:
    if os.environ.get("ROCENANTE_BACKEND") != "host" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _as_device(device) -> torch.device:
    device = _default_device() if device is None else torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cuda", "cpu"):
        raise ValueError("device %s: rocenante runs on CUDA devices and on the CPU (host backend)" % device)
    return device


class Communicator:
    """A rocenante communicator over every rank of a group.

    Made in one of three ways, each collective over the ranks:

    * ``Communicator(group)``: from a torch.distributed process group (the
      default group when None); the id is broadcast over it, so a gloo group
      is enough and no NCCL communicator need exist;
    * ``Communicator(unique_id=id, rank=r, world_size=n)``: from an id that
      rank 0 made with get_unique_id() and shared itself;
    * ``Communicator.from_launch()``: from the launcher's variables (torchrun,
      mpirun, srun), as rcnCommInitFromLaunch.

    ``device`` is the CUDA device (default: the current one) or "cpu" for the
    host backend, which needs ``ROCENANTE_BACKEND=host`` where a GPU is visible.
    Calls take tensors on that device; CUDA calls are enqueued on the current
    stream. Calls on one communicator must be issued in the same order on every
    rank, one thread at a time. Use it as a context manager or call close().
    """

    def __init__(self, group=None, *, unique_id: Optional[bytes] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None, device: Union[str, torch.device, None] = None):
        self.device = _as_device(device)
        if unique_id is None:
            if rank is not None or world_size is not None:
                raise ValueError("Communicator: rank and world_size go with unique_id (a group says them itself)")
            unique_id, rank, world_size = _id_over_group(group)
        elif rank is None or world_size is None:
            raise ValueError("Communicator: unique_id needs rank and world_size")
        self._start(lambda: _C.comm_init_rank(world_size, unique_id, rank))

    @classmethod
    def from_launch(cls, device: Union[str, torch.device, None] = None) -> "Communicator":
        """From the launcher's variables (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, OpenMPI, PMI,
        Slurm). Without a device, CUDA ranks use the device of their LOCAL_RANK."""
        info = _C.launch_info()
        if info is None:
            raise ValueError("Communicator.from_launch: no launcher variables (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, "
                             "PMI_*, SLURM_*) are set")
        if device is None and _default_device().type == "cuda" and info[2] >= 0:
            device = torch.device("cuda", info[2])
        comm = cls.__new__(cls)
        comm.device = _as_device(device)
        comm._start(_C.comm_init_from_launch)
        return comm

    def _start(self, init) -> None:
        self.handle = None
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                self.handle = init()
        else:
            self.handle = init()
        info = _C.query(self.handle)
        on_cpu = info["cuda_device"] < 0
        if on_cpu != (self.device.type == "cpu") or (not on_cpu and info["cuda_device"] != self.device.index):
            _C.comm_destroy(self.handle)
            self.handle = None
            want = "the host backend (set ROCENANTE_BACKEND=host before making it)" if self.device.type == "cpu" \
                else str(self.device)
            raise ValueError("Communicator: asked for %s, but the library made one on %s" %
                             (want, "the host backend" if on_cpu else "cuda:%d" % info["cuda_device"]))
        self.rank = info["rank"]
        self.world_size = info["nranks"]
        self._info = info
        self.id = next(_ids)
        _ops._COMMS[self.id] = self

    # --- life ---------------------------------------------------------------

    def _live(self, what: str) -> int:
        if self.handle is None:
            raise ValueError("%s: the communicator is closed" % what)
        return self.handle

    def close(self) -> None:
        """Waits for the communicator's outstanding work and frees it (rcnCommDestroy). Idempotent."""
        if self.handle is not None:
            handle, self.handle = self.handle, None
            _ops._COMMS.pop(self.id, None)
            _C.comm_destroy(handle)

    def abort(self) -> None:
        """Stops every pending wait and frees the communicator (rcnCommAbort); bounded even when a peer is gone."""
        if self.handle is not None:
            handle, self.handle = self.handle, None
            _ops._COMMS.pop(self.id, None)
            _C.comm_abort(handle)

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- what it does -------------------------------------------------------

    def query(self) -> CommInfo:
        """The path this communicator's small all-reduces take, its limit and why."""
        i = _C.query(self._live("query"))
        return CommInfo(rank=i["rank"], world_size=i["nranks"], device=self.device, path=PATHS.get(i["path"], "?"),
                        transport=i["transport"], max_bytes=i["max_bytes"], self_test_passed=i["self_test_passed"],
                        self_test_us_fast=i["self_test_us_fast"], self_test_us_nccl=i["self_test_us_nccl"],
                        reason=i["reason"])

    def should_use(self, tensor: torch.Tensor, op: str = "sum") -> bool:
        """Whether all_reduce of this tensor on the current stream takes rocenante's fast path (else NCCL,
        or a refusal where no NCCL was made beside it). Decided from dtype, element count and whether the
        stream is being captured, never from pointers: every rank that asks about the same call gets the
        same answer. Under torch.compile it is folded while tracing (outside any capture)."""
        if tensor.dtype not in DTYPES or tensor.device != self.device:
            return False
        return _takes_fast_path(self._live("should_use"), tensor.numel(), DTYPES[tensor.dtype],
                                op_code(op, "should_use"), _ops.cuda_index(tensor))

    def check_health(self) -> None:
        """Raises the error a kernel or proxy recorded since (a peer that did not arrive, a call that
        differed), with the library's reason; returns None while healthy."""
        _C.check_async_error(self._live("check_health"))

    # --- collectives --------------------------------------------------------

    def all_reduce(self, tensor: torch.Tensor, out: Optional[torch.Tensor] = None, op: str = "sum") -> torch.Tensor:
        """Reduces ``tensor`` over the ranks: in place (returns ``tensor``) or into ``out`` (returns ``out``).
        Bit-identical on every rank."""
        code = op_code(op, "all_reduce")
        self._live("all_reduce")
        if out is None:
            torch.ops.rocenante.all_reduce_(tensor, self.id, code)
            return tensor
        torch.ops.rocenante.all_reduce_out(tensor, out, self.id, code)
        return out

    def all_gather(self, tensor: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Every rank's ``tensor`` concatenated in rank order along dimension 0 (into ``out`` when given, which
        needs world_size times its elements). In place when ``tensor`` is ``out``'s block for this rank
        (``out.chunk(world_size)[rank]``)."""
        self._live("all_gather")
        if out is None:
            out = tensor.new_empty((self.world_size * tensor.shape[0],) + tuple(tensor.shape[1:])) \
                if tensor.dim() else tensor.new_empty(self.world_size)
        torch.ops.rocenante.all_gather_out(tensor, out, self.id)
        return out

    def reduce_scatter(self, tensor: torch.Tensor, out: Optional[torch.Tensor] = None, op: str = "sum") -> torch.Tensor:
        """Block ``rank`` (along dimension 0, world_size equal blocks) of the reduction of ``tensor`` over the
        ranks, into ``out`` when given. In place when ``out`` is ``tensor``'s block for this rank."""
        code = op_code(op, "reduce_scatter")
        self._live("reduce_scatter")
        if out is None:
            if tensor.dim() == 0 or tensor.shape[0] % self.world_size:
                raise ValueError("reduce_scatter: tensor of shape %s does not split into %d equal blocks along "
                                 "dimension 0" % (tuple(tensor.shape), self.world_size))
            out = tensor.new_empty((tensor.shape[0] // self.world_size,) + tuple(tensor.shape[1:]))
        torch.ops.rocenante.reduce_scatter_out(tensor, out, self.id, code)
        return out

    def all_reduce_residual_rms_norm(self, tensor: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                                     eps: float = 1e-6, norm_out: Optional[torch.Tensor] = None,
                                     scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The all-reduce (sum) of ``tensor`` [tokens, hidden] fused with the residual add and RMSNorm after it:
        ``residual += sum_over_ranks(tensor)`` (in place), then returns ``norm_out = rms_norm(residual) * weight``
        (bf16 or fp16, fp32 accumulation; a float8_e4m3fn ``norm_out`` takes ``scale``, one float32:
        ``norm_out = e4m3(norm / scale)``)."""
        self._live("all_reduce_residual_rms_norm")
        if norm_out is None:
            norm_out = torch.empty_like(residual)
        torch.ops.rocenante.all_reduce_residual_rms_norm(tensor, residual, weight, norm_out, scale, float(eps),
                                                         self.id)
        return norm_out

    def __repr__(self) -> str:
        if self.handle is None:
            return "Communicator(closed)"
        return "Communicator(rank=%d, world_size=%d, device=%s, path=%s)" % (
            self.rank, self.world_size, self.device, PATHS.get(self._info["path"], "?"))


@torch.compiler.assume_constant_result
def _takes_fast_path(handle: int, numel: int, dtype: int, op: int, cuda_device: int) -> bool:
    # Depends on nothing but its arguments (and the current stream's capture state), so torch.compile may
    # fold it. The stream is looked up here rather than passed in: torch.compile runs this function while
    # tracing and needs every argument as a constant, which a CUDA stream is not (cuda_device -1: CPU).
    return _C.takes_fast_path(handle, numel, dtype, op, _ops.current_stream(cuda_device))


def _id_over_group(group):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("Communicator: torch.distributed is not initialized (init_process_group first, or pass "
                         "unique_id, rank and world_size)")
    group = group if group is not None else dist.group.WORLD
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise ValueError("Communicator: this process is not a member of the group")
    box = [get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
    return box[0], rank, world_size


