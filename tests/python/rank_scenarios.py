# SPDX-License-Identifier: BSD-3-Clause
"""One rank of a pytest scenario (ranks.py starts them): python rank_scenarios.py NAME OUTDIR.

RCN_PYTEST_DEVICE=cuda runs on GPUs (one each, or all on GPU 0 with
ROCENANTE_TEST_SHARE_GPUS=1), else on the CPU (host backend). A rank saves what
the test compares across ranks into OUTDIR/rank<r>.pt and raises on any check
of its own.
"""
import os
import sys

import torch
import torch.distributed as dist

import rocenante

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
ON_GPU = os.environ.get("RCN_PYTEST_DEVICE") == "cuda"
SHARE = os.environ.get("ROCENANTE_TEST_SHARE_GPUS") == "1"
if ON_GPU:
    DEVICE = torch.device("cuda", 0 if SHARE else RANK)
    torch.cuda.set_device(DEVICE)
    if SHARE:
        # Two ranks on one GPU cannot have NCCL beside the fast path.
        os.environ.setdefault("ROCENANTE_NATIVE_NCCL", "0")
else:
    DEVICE = torch.device("cpu")
    os.environ["ROCENANTE_BACKEND"] = "host"

# Exactly representable inputs: small integers, whose sums and products every type holds.
INT_TYPES = [torch.int8, torch.uint8, torch.int32, torch.int64]
FLOAT_TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def small_ints(rank, numel, dtype, seed, op):
    gen = torch.Generator().manual_seed(seed * 7919 + rank)
    if op == "prod":  # products over the ranks stay small: factors -1, 1, 2
        choices = torch.tensor([-1, 1, 2] if dtype != torch.uint8 else [1, 2, 1])
        t = choices[torch.randint(0, 3, (numel,), generator=gen)]
    else:
        lo = 0 if dtype == torch.uint8 else -8
        t = torch.randint(lo, 9, (numel,), generator=gen)
    return t.to(dtype)


def reference(numel, dtype, seed, op):
    """The reduction over every rank's inputs in float64 (exact for these inputs)."""
    parts = torch.stack([small_ints(r, numel, dtype, seed, op).double() for r in range(WORLD)])
    if op == "sum":
        return parts.sum(0)
    if op == "prod":
        return parts.prod(0)
    if op == "max":
        return parts.max(0).values
    if op == "min":
        return parts.min(0).values
    total = parts.sum(0)  # avg: integer types divide as integers (toward zero), floats exactly
    return torch.trunc(total / WORLD) if not dtype.is_floating_point else total / WORLD


def expect(cond, what):
    if not cond:
        raise AssertionError("rank %d: %s" % (RANK, what))


def expect_raises(exc_type, needle, fn, what):
    try:
        fn()
    except exc_type as e:
        expect(needle in str(e), "%s: the error does not name %r: %s" % (what, needle, e))
        return str(e)
    raise AssertionError("rank %d: %s did not raise %s" % (RANK, what, exc_type.__name__))


def init_group():
    dist.init_process_group("gloo", init_method="env://", rank=RANK, world_size=WORLD)


def save(outdir, results):
    torch.save(results, os.path.join(outdir, "rank%d.pt" % RANK))


def check_all_reduce(comm, results, theirs_group):
    """Every type and op, in place and into an output, against the float64 reference and (for sum, max,
    min and prod, where the backend takes the type) torch.distributed's all-reduce over theirs_group
    (gloo on the CPU, NCCL with a GPU per rank, None on a shared GPU); results saved for the cross-rank
    comparison."""
    numel = 1000
    for t, dtype in enumerate(INT_TYPES + FLOAT_TYPES):
        for o, op in enumerate(["sum", "prod", "max", "min", "avg"]):
            seed = 10 * t + o  # the same on every rank (hash() of a string is not)
            x = small_ints(RANK, numel, dtype, seed, op).to(DEVICE)
            want = reference(numel, dtype, seed, op)
            out = torch.full_like(x, 77)  # poison: every element must be written
            comm.all_reduce(x, out=out, op=op)
            if op == "avg" and dtype.is_floating_point:  # sum / N rounds: within an ulp or so of the reference
                rtol = {torch.float64: 1e-15, torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
                ok = torch.allclose(out.double().cpu(), want, rtol=rtol, atol=0)
            else:
                ok = torch.equal(out.double().cpu(), want)
            expect(ok, "all_reduce %s %s into out differs from the reference" % (dtype, op))
            inplace = x.clone()
            comm.all_reduce(inplace, op=op)
            expect(torch.equal(inplace, out), "all_reduce %s %s in place differs from out of place" % (dtype, op))
            if op != "avg" and theirs_group is not None:  # (NCCL's avg rounds otherwise: docs/design.md)
                theirs = x.clone()
                try:
                    dist.all_reduce(theirs, op=getattr(dist.ReduceOp, op.upper() if op != "prod" else "PRODUCT"),
                                    group=theirs_group)
                except (RuntimeError, ValueError):
                    if ON_GPU:
                        raise
                    theirs = None  # a type gloo does not reduce
                if theirs is not None:
                    expect(torch.equal(theirs, out), "all_reduce %s %s differs from gloo's" % (dtype, op))
            results["ar/%s/%s" % (dtype, op)] = out.cpu()
    # Random values (not exact): every rank must still get the same bits, close to the reference.
    for dtype in FLOAT_TYPES:
        for numel in [1, 7, 4096, 100003]:
            gen = torch.Generator().manual_seed(numel + RANK)
            x = torch.empty(numel).uniform_(-1, 1, generator=gen).to(dtype).to(DEVICE)
            if SHARE and not comm.should_use(x):
                continue  # past the fast path, with no NCCL beside it on a shared GPU
            comm.all_reduce(x)
            parts = [torch.empty(numel).uniform_(-1, 1, generator=torch.Generator().manual_seed(numel + r))
                     .to(dtype).double() for r in range(WORLD)]
            tol = 1e-12 if dtype == torch.float64 else 1e-5 if dtype == torch.float32 else 3e-2
            err = (x.double().cpu() - sum(parts)).abs().max().item()
            expect(err <= tol * WORLD, "all_reduce %s of %d random values is %.3g off" % (dtype, numel, err))
            results["rand/%s/%d" % (dtype, numel)] = x.cpu()
    # A tensor of many dimensions, and an empty one.
    x = torch.ones(3, 4, 5, dtype=torch.float32, device=DEVICE)
    expect(torch.equal(comm.all_reduce(x), torch.full((3, 4, 5), float(WORLD), device=DEVICE)), "3-d all_reduce")
    comm.all_reduce(torch.empty(0, device=DEVICE))


def check_errors(comm):
    x = torch.zeros(8, 8, device=DEVICE)
    expect_raises(ValueError, "not contiguous", lambda: comm.all_reduce(x.t()), "a transposed tensor")
    expect_raises(ValueError, "out has 32 elements", lambda: comm.all_reduce(x, out=torch.zeros(32, device=DEVICE)),
                  "a short out")
    expect_raises(TypeError, "out is torch.float16", lambda: comm.all_reduce(x, out=x.half()), "an out of another type")
    expect_raises(TypeError, "torch.bool", lambda: comm.all_reduce(x.bool()), "a bool tensor")
    expect_raises(ValueError, "'mean'", lambda: comm.all_reduce(x, op="mean"), "an unknown op")
    if ON_GPU:  # (on the CPU there is no other device to try)
        expect_raises(ValueError, "is on cpu", lambda: comm.all_reduce(torch.zeros(4)), "a CPU tensor")


def check_routing(comm, results):
    info = comm.query()
    expect(info.rank == RANK and info.world_size == WORLD, "query: rank/world %d/%d" % (info.rank, info.world_size))
    if not ON_GPU:
        expect(info.path == "host" and info.transport.startswith("host"), "query: path %s / %s" % (info.path,
                                                                                                    info.transport))
    routes = []
    for dtype in [torch.float32, torch.bfloat16, torch.int8, torch.bool, torch.complex64]:
        for numel in [1, 1024, info.max_bytes // 4 if info.max_bytes < 2**40 else 1 << 20, (1 << 22) + 1]:
            routes.append(comm.should_use(torch.empty(numel, dtype=dtype, device=DEVICE)))
    expect(not comm.should_use(torch.empty(4, dtype=torch.bool, device=DEVICE)), "should_use takes bool")
    small = torch.empty(256, dtype=torch.bfloat16, device=DEVICE)
    expect(comm.should_use(small) == (info.path != "nccl"),
           "should_use says %s for 512 bytes of bf16 on path %s (%s)" % (comm.should_use(small), info.path,
                                                                          info.reason))
    if info.max_bytes < 2**40:
        expect(not comm.should_use(torch.empty(info.max_bytes + 1, dtype=torch.uint8, device=DEVICE)),
               "should_use takes more than max_bytes")
    results["routes"] = torch.tensor(routes)
    from rocenante import _rocenante
    expect_raises(rocenante.InvalidArgumentError, "datatype 99 is not a valid type",
                  lambda: _rocenante.takes_fast_path(comm.handle, 4, 99, 0, 0), "rcnCommTakesFastPath of type 99")
    comm.check_health()


def check_new_collectives(comm, results):
    if rocenante.available("all_gather"):
        for dtype in [torch.float32, torch.bfloat16, torch.int32]:
            x = small_ints(RANK, 513, dtype, 5, "sum").to(DEVICE)
            out = comm.all_gather(x)
            want = torch.cat([small_ints(r, 513, dtype, 5, "sum") for r in range(WORLD)])
            expect(torch.equal(out.cpu(), want), "all_gather %s" % dtype)
            buf = torch.zeros(WORLD * 513, dtype=dtype, device=DEVICE)
            mine = buf.chunk(WORLD)[RANK]
            mine.copy_(x)
            comm.all_gather(mine, out=buf)
            expect(torch.equal(buf.cpu(), want), "all_gather %s in place" % dtype)
            results["ag/%s" % dtype] = out.cpu()
    if rocenante.available("reduce_scatter"):
        for dtype in [torch.float32, torch.bfloat16, torch.int32]:
            for op in ["sum", "max"]:
                x = small_ints(RANK, WORLD * 300, dtype, 9, op).to(DEVICE).view(WORLD * 3, 100)
                out = comm.reduce_scatter(x, op=op)
                want = reference(WORLD * 300, dtype, 9, op).view(WORLD * 3, 100).chunk(WORLD)[RANK]
                expect(out.shape == (3, 100) and torch.equal(out.double().cpu(), want),
                       "reduce_scatter %s %s" % (dtype, op))
                inplace = x.clone()
                comm.reduce_scatter(inplace, out=inplace.chunk(WORLD)[RANK], op=op)
                expect(torch.equal(inplace.chunk(WORLD)[RANK], out), "reduce_scatter %s %s in place" % (dtype, op))
    if rocenante.available("all_reduce_residual_rms_norm"):
        tokens, hidden, eps = 5, 256, 1e-6
        for dtype in [torch.bfloat16, torch.float16]:
            gen = torch.Generator().manual_seed(11)
            parts = [torch.empty(tokens, hidden).uniform_(-1, 1, generator=gen).to(dtype) for _ in range(WORLD)]
            residual0 = torch.empty(tokens, hidden).uniform_(-1, 1, generator=gen).to(dtype)
            weight = torch.empty(hidden).uniform_(0.5, 1.5, generator=gen).to(dtype)
            residual = residual0.clone().to(DEVICE)
            norm = comm.all_reduce_residual_rms_norm(parts[RANK].to(DEVICE), residual, weight.to(DEVICE), eps=eps)
            # The contract: the all-reduce's bits (fp32 sum in rank order, rounded), added to the residual
            # in fp32 and rounded, then the norm in fp32 rounded once.
            total = sum(p.float() for p in parts).to(dtype)
            want_res = (residual0.float() + total.float()).to(dtype)
            r = want_res.double()
            want_norm = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
            expect(torch.equal(residual.cpu(), want_res), "fused norm %s: residual differs from the contract's" % dtype)
            expect(torch.allclose(norm.double().cpu(), want_norm, rtol=1e-2, atol=1e-3),
                   "fused norm %s: norm is %.3g off" % (dtype, (norm.double().cpu() - want_norm).abs().max()))
            # The e4m3 image of the norm, scaled.
            residual = residual0.clone().to(DEVICE)
            scale = torch.tensor([0.5], device=DEVICE)
            norm8 = torch.empty(tokens, hidden, dtype=torch.float8_e4m3fn, device=DEVICE)
            comm.all_reduce_residual_rms_norm(parts[RANK].to(DEVICE), residual, weight.to(DEVICE), eps=eps,
                                              norm_out=norm8, scale=scale)
            expect(torch.allclose(norm8.double().cpu(), (want_norm / 0.5).clamp(-448, 448), rtol=0.07, atol=0.02),
                   "fused norm %s to e4m3 is off" % dtype)
            results["norm8/%s" % dtype] = norm8.cpu()
            results["norm/%s" % dtype] = norm.cpu()
            results["normres/%s" % dtype] = residual.cpu()


def scenario_collectives(outdir):
    """Communicator over a gloo group: every collective, routing, argument errors, close."""
    init_group()
    results = {}
    theirs = dist.group.WORLD if not ON_GPU else None if SHARE else dist.new_group(backend="nccl")
    with rocenante.Communicator(device=DEVICE) as comm:
        check_all_reduce(comm, results, theirs)
        check_errors(comm)
        check_routing(comm, results)
        check_new_collectives(comm, results)
    expect_raises(ValueError, "closed", lambda: comm.all_reduce(torch.zeros(4, device=DEVICE)), "a closed comm")
    comm.close()  # again: nothing
    dist.destroy_process_group()
    save(outdir, results)


def scenario_init_ways(outdir):
    """From launcher variables, then from an explicit id that rank 0 makes and shares over the first."""
    first = rocenante.Communicator.from_launch(device=DEVICE)
    uid = torch.zeros(128, dtype=torch.uint8, device=DEVICE)
    if RANK == 0:
        uid.copy_(torch.frombuffer(bytearray(rocenante.get_unique_id()), dtype=torch.uint8))
    first.all_reduce(uid)  # the others add zeros: everyone has rank 0's id
    second = rocenante.Communicator(unique_id=bytes(uid.cpu().tolist()), rank=WORLD - 1 - RANK, world_size=WORLD,
                                    device=DEVICE)
    expect(second.rank == WORLD - 1 - RANK, "explicit id: rank %d" % second.rank)
    x = torch.full((100,), float(second.rank + 1), device=DEVICE)
    second.all_reduce(x)
    expect(torch.equal(x, torch.full((100,), WORLD * (WORLD + 1) / 2, device=DEVICE)), "explicit id: all_reduce")
    expect_raises(ValueError, "128 bytes", lambda: rocenante.Communicator(unique_id=b"x", rank=0, world_size=1,
                                                                           device=DEVICE), "a short id")
    second.close()
    first.close()
    save(outdir, {"ok": torch.tensor(1)})


def scenario_peer_dies(outdir):
    """Rank 1 leaves right after creation; rank 0's next call fails with the library's reason, and so
    does check_health."""
    comm = rocenante.Communicator.from_launch(device=DEVICE)
    if RANK == 1:
        os._exit(3)
    x = torch.ones(64, device=DEVICE)
    msg = expect_raises(rocenante.RocenanteError, "rank", lambda: (comm.all_reduce(x), comm.check_health()),
                        "an all_reduce whose peer is gone")
    health = expect_raises(rocenante.RocenanteError, "", comm.check_health, "check_health after the failure")
    comm.abort()
    save(outdir, {"error": msg, "health": health})


def tp_mlp(comm, w_up, w_down):
    """One rank's half of a tensor-parallel MLP: its column shard up, its row shard down, all-reduce."""
    def block(x):
        h = torch.nn.functional.silu(x @ w_up)
        y = h @ w_down
        # A serving hook's shape: should_use (folded while tracing) picks the call; both are rocenante's here.
        if comm.should_use(y):
            return comm.all_reduce(y)
        return comm.all_reduce(y, out=torch.empty_like(y))
    return block


def scenario_compile(outdir):
    """torch.compile(fullgraph=True) of a TP MLP block: no graph break, the same result as eager."""
    init_group()
    comm = rocenante.Communicator(device=DEVICE)
    gen = torch.Generator().manual_seed(3)
    hidden, inter = 64, 128
    w_up = torch.randn(hidden, inter, generator=gen)[:, RANK::WORLD].contiguous().to(DEVICE) / 8
    w_down = torch.randn(inter, hidden, generator=gen)[RANK::WORLD].contiguous().to(DEVICE) / 8
    block = tp_mlp(comm, w_up, w_down)
    backend = "inductor" if ON_GPU else os.environ.get("RCN_PYTEST_COMPILE_BACKEND", "aot_eager")
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    results = {}
    for step in range(3):
        x = torch.randn(4, hidden, generator=torch.Generator().manual_seed(step)).to(DEVICE)
        got, want = compiled(x.clone()), block(x.clone())
        expect(torch.allclose(got, want, atol=1e-5), "compiled block differs from eager at step %d" % step)
        results["step%d" % step] = got.cpu()
    comm.close()
    dist.destroy_process_group()
    save(outdir, results)


def scenario_cuda_graph(outdir):
    """all_reduce captured in a CUDA graph, replayed with new inputs each time."""
    comm = rocenante.Communicator.from_launch(device=DEVICE)
    static_in = torch.zeros(4096, dtype=torch.bfloat16, device=DEVICE)
    static_out = torch.zeros_like(static_in)
    comm.all_reduce(static_in, out=static_out)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce(static_in, out=static_out)
        static_out.mul_(2)
    results = {}
    for replay in range(5):
        seed = 100 + replay
        static_in.copy_(small_ints(RANK, 4096, torch.bfloat16, seed, "sum").to(DEVICE))
        static_out.fill_(77)
        graph.replay()
        torch.cuda.synchronize()
        want = reference(4096, torch.bfloat16, seed, "sum") * 2
        expect(torch.equal(static_out.double().cpu(), want), "graph replay %d" % replay)
        results["replay%d" % replay] = static_out.cpu()
    comm.check_health()
    comm.close()
    save(outdir, results)


if __name__ == "__main__":
    name, outdir = sys.argv[1], sys.argv[2]
    globals()["scenario_" + name](outdir)
