#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""vLLM's own NCCL wrapper module (pynccl_wrapper.py from the vLLM wheel)
driving librocenante.so the way vLLM's PyNcclCommunicator does: it opens the
library by path (VLLM_NCCL_SO_PATH), rank 0's unique id goes to the others
over a CPU process group, the communicator is made under the rank's device,
a one-element warm-up all-reduce runs, then all-reduces in and out of a CUDA
graph (checked against a float64 reference), suspend and resume where the
real NCCL has them (an all-reduce after the resume checked too), destroy.

Run once per rank (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment).
Prints "shim_vllm rank R: PASS ..." last.

Usage: shim_vllm.py WRAPPER_PY LIBRARY
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_wrapper  # noqa: E402

NCCL_SUSPEND_MEM = 1


class CommInfo(ctypes.Structure):  # rcnCommInfo of include/rocenante/rocenante.h
    _fields_ = [("rank", ctypes.c_int), ("nranks", ctypes.c_int), ("cudaDev", ctypes.c_int),
                ("path", ctypes.c_int), ("transport", ctypes.c_char * 32), ("maxBytes", ctypes.c_size_t),
                ("selfTestPassed", ctypes.c_int), ("selfTestUsFast", ctypes.c_double),
                ("selfTestUsNccl", ctypes.c_double), ("reason", ctypes.c_char * 256)]


def inputs(rank, count, seed):
    gen = torch.Generator().manual_seed(seed * 131 + rank)
    return torch.rand(count, generator=gen, dtype=torch.float64) * 2 - 1


def reference(world, count, seed):
    return sum(inputs(r, count, seed) for r in range(world))


class Driver:
    """The calls PyNcclCommunicator makes, on one communicator."""

    def __init__(self, wrapper, library, rank, world, device):
        self.nccl = wrapper.NCCLLibrary(library)
        self.wrapper, self.rank, self.world, self.device = wrapper, rank, world, device
        unique_id = self.nccl.ncclGetUniqueId() if rank == 0 else wrapper.ncclUniqueId()
        box = [bytes(unique_id.internal)]
        dist.broadcast_object_list(box, src=0)
        unique_id = self.nccl.unique_id_from_bytes(box[0])
        with torch.cuda.device(device):
            self.comm = self.nccl.ncclCommInitRank(world, unique_id, rank)
            self.stream = torch.cuda.Stream()
            warm = torch.zeros(1, device=device)
            self.all_reduce(warm)
            self.stream.synchronize()

    def all_reduce(self, tensor, out=None, stream=None):
        out = torch.empty_like(tensor) if out is None else out
        stream = stream or self.stream
        w = self.wrapper
        self.nccl.ncclAllReduce(w.buffer_type(tensor.data_ptr()), w.buffer_type(out.data_ptr()), tensor.numel(),
                                w.ncclDataTypeEnum.from_torch(tensor.dtype),
                                w.ncclRedOpTypeEnum.from_torch(torch.distributed.ReduceOp.SUM), self.comm,
                                w.cudaStream_t(stream.cuda_stream))
        return out

    def check(self, count, seed, what):
        x = inputs(self.rank, count, seed).to(torch.float32).to(self.device)
        self.stream.wait_stream(torch.cuda.current_stream())  # the copy above ran on the current stream
        with torch.cuda.stream(self.stream):
            out = self.all_reduce(x)
        self.stream.synchronize()
        err = (out.double().cpu() - reference(self.world, count, seed)).abs().max().item()
        assert err <= 1e-5 * self.world, "%s: %d floats off by %g" % (what, count, err)

    def check_graph(self, count, seed):
        x = inputs(self.rank, count, seed).to(torch.float32).to(self.device)
        out = torch.full_like(x, float("nan"))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            for _ in range(3):
                self.all_reduce(x, out, stream=self.stream)
        for _ in range(2):
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            err = (out.double().cpu() - reference(self.world, count, seed)).abs().max().item()
            assert err <= 1e-5 * self.world, "graph: %d floats off by %g" % (count, err)

    def path(self, library):
        info = CommInfo()
        query = ctypes.CDLL(library).rcnShimCommQuery
        query(ctypes.c_void_p(self.comm.value if hasattr(self.comm, "value") else self.comm), ctypes.byref(info))
        return "%s (%s)" % (info.transport.decode(), info.reason.decode())


def real_has_suspend():
    real = os.environ.get("ROCENANTE_NCCL_LIBRARY", "libnccl.so.2")
    return hasattr(ctypes.CDLL(real), "ncclCommSuspend")


def main():
    wrapper_path, library = sys.argv[1], sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    wrapper = vllm_wrapper.load_wrapper(wrapper_path, library)
    driver = Driver(wrapper, library, rank, world, device)
    version = driver.nccl.ncclGetVersion()
    torch_version = ".".join(str(v) for v in torch.cuda.nccl.version()[:3])
    # The shim reports the real library's version; here that is torch's own NCCL.
    assert version == torch_version, "ncclGetVersion through the shim %s, torch's NCCL %s" % (version, torch_version)
    print("rank %d: ncclGetVersion through the shim: %s (torch's NCCL %s); path %s" % (
        rank, version, torch_version, driver.path(library)), flush=True)
    for count, seed in ((1, 1), (1000, 2), (4096, 3), (1 << 20, 4)):
        driver.check(count, seed, "eager")
    driver.check_graph(2048, 5)
    resumed = "not run: the real NCCL has no ncclCommSuspend"
    if real_has_suspend():
        for flags in (0, NCCL_SUSPEND_MEM):
            driver.nccl.ncclCommSuspend(driver.comm, flags)
            driver.nccl.ncclCommResume(driver.comm)
            driver.check(3000, 6 + flags, "after resume")
        resumed = "suspend/resume (0 and NCCL_SUSPEND_MEM) then all-reduces correct; path %s" % driver.path(library)
    driver.nccl.ncclCommDestroy(driver.comm)
    dist.destroy_process_group()
    print("shim_vllm rank %d: PASS (eager 4 sizes, graph 3x2 replays; %s)" % (rank, resumed), flush=True)


if __name__ == "__main__":
    main()
