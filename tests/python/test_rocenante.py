# SPDX-License-Identifier: BSD-3-Clause
"""pytest: the rocenante Python package, several ranks as processes (rank_scenarios.py).

On the CPU (host backend) always; on CUDA where the GPUs are there (one per
rank, or all ranks on one GPU with ROCENANTE_TEST_SHARE_GPUS=1). Every rank
checks its own results against a float64 reference; here the ranks' results
are compared bit for bit.
"""
import os
import sys

import pytest
import torch

import ranks
import rocenante

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def device_env(device, world):
    if device == "cuda" and not ranks.gpu_ranks_possible(world):
        pytest.skip("needs %d GPUs, or ROCENANTE_TEST_SHARE_GPUS=1 and one" % world)
    return {"RCN_PYTEST_DEVICE": device}


def same_on_every_rank(results):
    """Every rank saved the same keys with the same bytes."""
    first = results[0]
    for rank, other in enumerate(results[1:], 1):
        assert other.keys() == first.keys(), "rank %d saved other results" % rank
        for key, value in first.items():
            mine, theirs = value.reshape(-1).view(torch.uint8), other[key].reshape(-1).view(torch.uint8)
            assert value.dtype == other[key].dtype and torch.equal(mine, theirs), \
                "%s: rank %d's result differs from rank 0's" % (key, rank)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("world", [2, 3])
def test_collectives(device, world, tmp_path):
    if device == "cuda" and world == 3:
        pytest.skip("two ranks on GPUs")
    results = ranks.run("collectives", world, tmp_path, env=device_env(device, world))
    same_on_every_rank(results)


@pytest.mark.parametrize("device", DEVICES)
def test_init_ways(device, tmp_path):
    ranks.run("init_ways", 2, tmp_path, env=device_env(device, 2))


def test_peer_dies(tmp_path):
    results = ranks.run("peer_dies", 2, tmp_path, env=dict(device_env("cpu", 2), ROCENANTE_TIMEOUT_MS="3000"),
                        expect_fail_ranks=(1,))
    assert "rank 0" in results[0]["error"] or "peer" in results[0]["error"], results[0]["error"]


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device, tmp_path):
    results = ranks.run("compile", 2, tmp_path, env=device_env(device, 2))
    same_on_every_rank(results)


@pytest.mark.gpu
def test_cuda_graph(tmp_path):
    results = ranks.run("cuda_graph", 2, tmp_path, env=device_env("cuda", 2))
    same_on_every_rank(results)


@pytest.mark.parametrize("compile_", [False, True])
def test_example_tp_block(compile_, tmp_path):
    """examples/python/tp_block.py on two CPU ranks: the sharded block equals the unsharded one."""
    script = os.path.join(ranks.HERE, "..", "..", "examples", "python", "tp_block.py")
    command = [sys.executable, script, "--device", "cpu"] + (["--compile"] if compile_ else [])
    outputs = ranks.launch(command, 2, env={"ROCENANTE_BACKEND": "host"})
    assert "largest difference from the unsharded block" in outputs[0], outputs[0]


def test_custom_ops_registered():
    for name in ["all_reduce_", "all_reduce_out", "all_gather_out", "reduce_scatter_out",
                 "all_reduce_residual_rms_norm"]:
        assert hasattr(torch.ops.rocenante, name), name


def test_errors_without_group():
    with pytest.raises(ValueError, match="torch.distributed is not initialized"):
        rocenante.Communicator(device="cpu")
    with pytest.raises(ValueError, match="unique_id needs rank and world_size"):
        rocenante.Communicator(unique_id=rocenante.get_unique_id(), device="cpu")
    with pytest.raises(ValueError, match="closed or was never made"):
        torch.ops.rocenante.all_reduce_(torch.zeros(2), 123456, 0)


def test_error_classes():
    err = rocenante._errors.error_for(4, "rcnX: invalid argument")
    assert isinstance(err, rocenante.InvalidArgumentError) and isinstance(err, ValueError) and err.code == 4
    assert type(rocenante._errors.error_for(6, "gone")) is rocenante.RemoteError
    assert rocenante.version().count(".") == 2


def test_library_has_every_collective():
    """Says (as a skip) which collectives the loaded library lacks: their checks above do not run then."""
    missing = [n for n in ["all_gather", "reduce_scatter", "all_reduce_residual_rms_norm"]
               if not rocenante.available(n)]
    if missing:
        pytest.skip("this librocenante.so lacks %s" % ", ".join(missing))
