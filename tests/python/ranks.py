# SPDX-License-Identifier: BSD-3-Clause
"""Starts the ranks of a scenario (rank_scenarios.py) as processes and collects what each saved.

Each rank runs ``python rank_scenarios.py NAME OUTDIR`` with the launcher variables torchrun would
set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and saves its results with torch.save
into OUTDIR/rank<r>.pt; a rank that fails prints why on stderr, which the failure shows.
"""
import os
import socket
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_ranks_possible(world):
    """Whether `world` CUDA ranks fit here: one GPU each, or all on one with ROCENANTE_TEST_SHARE_GPUS=1."""
    if not torch.cuda.is_available():
        return False
    share = os.environ.get("ROCENANTE_TEST_SHARE_GPUS") == "1"
    return share or torch.cuda.device_count() >= world


def launch(argv, world, env=None, timeout=240, expect_fail_ranks=()):
    """Starts `argv` once per rank with the launcher's variables; returns each rank's output. Fails, with
    every failing rank's output, unless exactly the ranks in expect_fail_ranks exited non-zero."""
    base = dict(os.environ)
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world)})
    base.update(env or {})
    procs = [subprocess.Popen(argv, env=dict(base, RANK=str(rank), LOCAL_RANK=str(rank)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for rank in range(world)]
    outputs, failed = [], []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            failed.append("rank %d timed out after %d s:\n%s" % (rank, timeout, out.decode(errors="replace")))
            continue
        outputs.append(out.decode(errors="replace"))
        if (p.returncode != 0) != (rank in expect_fail_ranks):
            failed.append("rank %d exited %d:\n%s" % (rank, p.returncode, outputs[-1]))
    assert not failed, "\n".join(failed)
    return outputs


def run(scenario, world, tmp_path, env=None, timeout=240, expect_fail_ranks=()):
    """Runs a scenario of rank_scenarios.py on `world` ranks; returns each rank's saved results (None for
    a rank that saved none)."""
    launch([sys.executable, os.path.join(HERE, "rank_scenarios.py"), scenario, str(tmp_path)], world, env=env,
           timeout=timeout, expect_fail_ranks=expect_fail_ranks)
    results = []
    for rank in range(world):
        path = os.path.join(str(tmp_path), "rank%d.pt" % rank)
        results.append(torch.load(path) if os.path.exists(path) else None)
    return results
