#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""A tensor-parallel transformer block (attention + MLP) in PyTorch, its all-reduces through rocenante.

    torchrun --nproc-per-node 2 examples/python/tp_block.py            # one GPU a rank
    ROCENANTE_BACKEND=host torchrun --nproc-per-node 2 examples/python/tp_block.py --device cpu

Each rank holds its shard of every weight (heads and MLP columns split Megatron-style: q/k/v and
up projections by columns, o and down projections by rows), so each half of the block ends in one
all-reduce of [tokens, hidden]. The communicator is made from the process group (gloo is enough on
the CPU; on GPUs the NCCL group only carries the id). Every rank then checks the block's output
against the unsharded block computed on its own, and rank 0 prints the largest difference.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import rocenante


def rms_norm(x, weight, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


class Weights:
    """The whole block's weights from a seed: every rank makes the same, then keeps its shard."""

    def __init__(self, hidden, heads, inter, dtype, seed=0):
        g = torch.Generator().manual_seed(seed)

        def w(*shape):
            return (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(dtype)
        self.heads, self.head_dim = heads, hidden // heads
        self.norm1, self.norm2 = torch.ones(hidden, dtype=dtype), torch.ones(hidden, dtype=dtype)
        self.q, self.k, self.v, self.o = w(hidden, hidden), w(hidden, hidden), w(hidden, hidden), w(hidden, hidden)
        self.up, self.gate, self.down = w(hidden, inter), w(hidden, inter), w(inter, hidden)

    def shard(self, rank, world, device):
        """Heads rank*h/world.. and MLP columns rank*i/world.. of this rank."""
        s = Weights.__new__(Weights)
        s.heads, s.head_dim = self.heads // world, self.head_dim
        cols = slice(rank * self.q.shape[1] // world, (rank + 1) * self.q.shape[1] // world)
        mlp = slice(rank * self.up.shape[1] // world, (rank + 1) * self.up.shape[1] // world)
        for name in ("q", "k", "v"):
            setattr(s, name, getattr(self, name)[:, cols].contiguous().to(device))
        s.o = self.o[cols].contiguous().to(device)
        s.up, s.gate = self.up[:, mlp].contiguous().to(device), self.gate[:, mlp].contiguous().to(device)
        s.down = self.down[mlp].contiguous().to(device)
        s.norm1, s.norm2 = self.norm1.to(device), self.norm2.to(device)
        return s


def block(x, w, all_reduce):
    """One pre-norm block; all_reduce sums the partial outputs of the ranks (identity unsharded)."""
    tokens = x.shape[0]
    h = rms_norm(x, w.norm1)
    q = (h @ w.q).view(tokens, w.heads, w.head_dim).transpose(0, 1)
    k = (h @ w.k).view(tokens, w.heads, w.head_dim).transpose(0, 1)
    v = (h @ w.v).view(tokens, w.heads, w.head_dim).transpose(0, 1)
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(tokens, -1)
    x = x + all_reduce(attn @ w.o)
    h = rms_norm(x, w.norm2)
    return x + all_reduce((F.silu(h @ w.gate) * (h @ w.up)) @ w.down)


def main():
    ap = argparse.ArgumentParser(description="tensor-parallel block through rocenante")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--compile", action="store_true", help="torch.compile the sharded block (fullgraph)")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("gloo")  # carries the id only
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    full = Weights(args.hidden, args.heads, 2 * args.hidden, dtype)
    mine = full.shard(rank, world, device)
    x = torch.randn(args.tokens, args.hidden, generator=torch.Generator().manual_seed(1)).to(dtype).to(device)
    with rocenante.Communicator(device=device) as comm:
        def all_reduce(t):
            # In place; rocenante routes each call itself (its fast path, or NCCL past it).
            return comm.all_reduce(t)

        step = torch.compile(block, fullgraph=True) if args.compile else block
        got = step(x, mine, all_reduce)
        want = block(x, full.shard(0, 1, device), lambda t: t)
        err = (got.float() - want.float()).abs().max().item()
        tol = 5e-2 if dtype == torch.bfloat16 else 1e-4
        if rank == 0:
            info = comm.query()
            print("tp_block: %d ranks on %s, rocenante path %s (%s); largest difference from the unsharded block "
                  "%.3g (tolerance %.0g)" % (world, device.type, info.path, info.transport, err, tol))
        if err > tol:
            raise SystemExit("rank %d: the sharded block differs from the unsharded one by %.3g" % (rank, err))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
