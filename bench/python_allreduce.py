#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""All-reduce from Python, in CUDA graphs: rocenante against torch.distributed (NCCL) and PyTorch's
SymmetricMemory one-shot all-reduce (torch.ops.symm_mem.one_shot_all_reduce, NVLink multicast off).

    torchrun --nproc-per-node 2 bench/python_allreduce.py [--dtype bfloat16] [--calls 20] [--replays 20]

Each method's all-reduce of each size is captured CALLS times into one CUDA graph, the graph replayed
REPLAYS times after a warm-up, timed with CUDA events; rank 0 prints microseconds per call (median of
7 such runs). Every method's result is checked against the reference first (a method whose result is
wrong prints "wrong"); one that cannot run here prints why and is left out.
"""
import argparse
import os
import statistics
import sys

# Multicast stays off (the GPU host's rule), before torch reads it.
for _var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ[_var] = "0" if _var == "NCCL_NVLS_ENABLE" else "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import rocenante  # noqa: E402

SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]


def time_graph(fn, calls, replays):
    """Microseconds per call of fn, captured `calls` times into one graph; median of 7 timed runs."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm up eagerly on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    runs = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1000 / (replays * calls))
    return statistics.median(runs)


class Methods:
    """Each method: setup(numel) -> (run, result) closures, or a reason it cannot run."""

    def __init__(self, dtype, device):
        self.dtype, self.device = dtype, device
        self.comm = rocenante.Communicator(device=device)
        self.group_name = dist.group.WORLD.group_name
        self.symm_ok, self.symm_why = True, ""
        try:
            import torch.distributed._symmetric_memory as symm_mem
            if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before PyTorch 2.9, gone later
                symm_mem.enable_symm_mem_for_group(self.group_name)
            self.symm_mem = symm_mem
        except Exception as e:  # an older PyTorch, or no SymmetricMemory here
            self.symm_ok, self.symm_why = False, "SymmetricMemory unavailable: %s" % e

    def rocenante(self, x):
        out = torch.empty_like(x)
        return (lambda: self.comm.all_reduce(x, out=out)), out

    def nccl(self, x):
        buf = x.clone()
        # In place, as torch.distributed does; the graph re-reduces its own output, so the check copies first.
        return (lambda: dist.all_reduce(buf)), buf

    def symm(self, x):
        if not self.symm_ok:
            raise RuntimeError(self.symm_why)
        buf = self.symm_mem.empty(x.numel(), dtype=x.dtype, device=x.device)
        self.symm_mem.rendezvous(buf, self.group_name)
        buf.copy_(x)
        holder = {}

        def run():
            holder["out"] = torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", self.group_name)
        return run, holder


def check(run, result, want):
    run()
    torch.cuda.synchronize()
    got = result["out"] if isinstance(result, dict) else result
    return torch.equal(got.float(), want)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--replays", type=int, default=20)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    dtype = getattr(torch, args.dtype)
    methods = Methods(dtype, device)
    names = ["rocenante", "nccl", "symm"]
    headers = {"rocenante": "rocenante", "nccl": "torch.distributed (NCCL)", "symm": "symm_mem one_shot"}
    rows, notes = [], {}
    for size in SIZES:
        numel = size // torch.tensor([], dtype=dtype).element_size()
        # Small integers: every method's sum is exact, so all must match the reference bit for bit.
        gen = torch.Generator().manual_seed(size)
        parts = [torch.randint(-8, 9, (numel,), generator=gen).to(dtype) for _ in range(world)]
        want = sum(p.float() for p in parts).to(device)
        x = parts[rank].to(device)
        row = [size]
        for name in names:
            try:
                run, result = getattr(methods, name)(x)
                if not check(run, result, want):
                    row.append("wrong")
                    continue
                row.append("%.2f" % time_graph(run, args.calls, args.replays))
            except Exception as e:
                notes[name] = str(e).splitlines()[0][:160]
                row.append("-")
        rows.append(row)
    if rank == 0:
        info = methods.comm.query()
        print("# %d ranks, %s, us per all-reduce in CUDA graphs (%d calls x %d replays, median of 7); "
              "rocenante path %s (%s), fast path up to %d bytes"
              % (world, args.dtype, args.calls, args.replays, info.path, info.transport, info.max_bytes))
        print("| bytes | " + " | ".join(headers[n] for n in names) + " |")
        print("|---:|" + "---:|" * len(names))
        for row in rows:
            print("| %d | " % row[0] + " | ".join(row[1:]) + " |")
        for name, why in notes.items():
            print("# %s left out: %s" % (headers[name], why))
    methods.comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
