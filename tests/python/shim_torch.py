#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed (NCCL backend) all-reduces, eager and inside a CUDA graph.

Run once per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment), with or without LD_PRELOAD=librocenante.so. Each rank checks
every result against a float64 CPU reference on fresh random inputs and writes
a JSON file of per-call SHA-256 digests of the outputs, so two runs (plain NCCL
and through the shim) can be compared bit for bit.

Usage: shim_torch.py OUT.json   (a RANK in the name becomes rank0, rank1, ...)
"""
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

# bytes per all-reduce, around rocenante's threshold (256 KB on one host by
# default, 4 MB for two GPUs over peer memory): 16 MB is above it either way.
SIZES = [1024, 8 * 1024, 64 * 1024, 256 * 1024, 1 << 20, 16 << 20]
DTYPES = [torch.float32, torch.bfloat16]
GRAPH_BYTES = 16 * 1024
GRAPH_CALLS = 8


def inputs(rank, numel, dtype, seed):
    gen = torch.Generator().manual_seed(seed * 1009 + rank)
    return torch.empty(numel, dtype=torch.float32).uniform_(-1, 1, generator=gen).to(dtype)


def reference(world, numel, dtype, seed):
    total = torch.zeros(numel, dtype=torch.float64)
    for r in range(world):
        total += inputs(r, numel, dtype, seed).double()
    return total


def check(out, want, dtype, what):
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    err = (out.double().cpu() - want).abs().max().item()
    if not err <= tol * (1 + want.abs().max().item()):
        raise SystemExit("%s: max error %.3g exceeds tolerance" % (what, err))


def progress(rank, what):
    # stderr, flushed: a run killed by its timeout still shows how far it got.
    print("rank %d: %s" % (rank, what), file=sys.stderr, flush=True)


def digest(t):
    return hashlib.sha256(t.cpu().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out_path = sys.argv[1].replace("RANK", "rank%d" % rank)
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    # No device_id: PyTorch then creates the communicator lazily and blocking
    # (eager init may pick a non-blocking one, which rocenante leaves to NCCL).
    dist.init_process_group("nccl")
    results = {}
    seed = 0
    for dtype in DTYPES:
        for nbytes in SIZES:
            seed += 1
            numel = nbytes // torch.tensor([], dtype=dtype).element_size()
            x = inputs(rank, numel, dtype, seed).to(device)
            dist.all_reduce(x)
            torch.cuda.synchronize()
            name = "eager %s %d" % (str(dtype).split(".")[-1], nbytes)
            check(x, reference(world, numel, dtype, seed), dtype, name)
            results[name] = digest(x)

    progress(rank, "eager all-reduces checked")

    # Captured: GRAPH_CALLS all-reduces of fresh buffers, replayed twice.
    numel = GRAPH_BYTES // 4
    seeds = list(range(1000, 1000 + GRAPH_CALLS))
    bufs = [inputs(rank, numel, torch.float32, s).to(device) for s in seeds]
    originals = [b.clone() for b in bufs]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        dist.all_reduce(torch.zeros(1, device=device))  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for b in bufs:
            dist.all_reduce(b)
    for replay in range(2):
        for b, o in zip(bufs, originals):
            b.copy_(o)
        graph.replay()
        torch.cuda.synchronize()
        for i, (b, s) in enumerate(zip(bufs, seeds)):
            name = "graph %d call %d" % (replay, i)
            check(b, reference(world, numel, torch.float32, s), torch.float32, name)
            results[name] = digest(b)

    # The graph holds NCCL work: drop it before the communicator goes away.
    del graph
    torch.cuda.synchronize()
    progress(rank, "graph replays checked")
    dist.barrier(device_ids=[rank])
    dist.destroy_process_group()
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print("rank %d: %d all-reduce results checked" % (rank, len(results)))


if __name__ == "__main__":
    main()
