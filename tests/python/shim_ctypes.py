#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""An NCCL client the way vLLM's pynccl is one: it opens a library by path
with ctypes (VLLM_NCCL_SO_PATH=/path/librocenante.so) and calls the NCCL C API
on torch-allocated buffers and streams. No LD_PRELOAD.

Run once per rank (RANK, WORLD_SIZE in the environment); rank 0 passes the
unique id to the others through the file ID_FILE. Checks small and large
all-reduces against a float64 reference and prints what rcnShimCommQuery says.

Usage: shim_ctypes.py LIBRARY ID_FILE
"""
import ctypes
import os
import sys
import time

import torch


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


class CommInfo(ctypes.Structure):  # rcnCommInfo of include/rocenante/rocenante.h
    _fields_ = [("rank", ctypes.c_int), ("nranks", ctypes.c_int), ("cudaDev", ctypes.c_int),
                ("path", ctypes.c_int), ("transport", ctypes.c_char * 32), ("maxBytes", ctypes.c_size_t),
                ("selfTestPassed", ctypes.c_int), ("selfTestUsFast", ctypes.c_double),
                ("selfTestUsNccl", ctypes.c_double), ("reason", ctypes.c_char * 256)]


NCCL_FLOAT32, NCCL_SUM = 7, 0


def bind(lib):
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    lib.rcnShimCommQuery.argtypes = [ctypes.c_void_p, ctypes.POINTER(CommInfo)]
    return lib


def call(lib, name, *args):
    res = getattr(lib, name)(*args)
    if res != 0:
        raise SystemExit("%s failed: %d %s" % (name, res, lib.ncclGetErrorString(res).decode()))


def share_id(lib, rank, id_file):
    uid = UniqueId()
    if rank == 0:
        call(lib, "ncclGetUniqueId", ctypes.byref(uid))
        with open(id_file + ".tmp", "wb") as f:
            f.write(bytes(uid.internal))
        os.rename(id_file + ".tmp", id_file)
        return uid
    for _ in range(600):
        if os.path.exists(id_file):
            break
        time.sleep(0.1)
    raw = open(id_file, "rb").read()
    ctypes.memmove(uid.internal, raw, 128)
    return uid


def main():
    lib_path, id_file = sys.argv[1], sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    lib = bind(ctypes.CDLL(lib_path))
    version = ctypes.c_int()
    call(lib, "ncclGetVersion", ctypes.byref(version))
    uid = share_id(lib, rank, id_file)
    comm = ctypes.c_void_p()
    call(lib, "ncclCommInitRank", ctypes.byref(comm), world, uid, rank)
    info = CommInfo()
    if lib.rcnShimCommQuery(comm, ctypes.byref(info)) != 0:
        raise SystemExit("rcnShimCommQuery failed")
    print("rank %d: NCCL %d via %s: path %d (%s), self-test %d, fast %.1f us vs nccl %.1f us: %s" % (
        rank, version.value, os.path.basename(lib_path), info.path, info.transport.decode(),
        info.selfTestPassed, info.selfTestUsFast, info.selfTestUsNccl, info.reason.decode()))
    stream = torch.cuda.Stream()
    for seed, numel in enumerate([256, 4096, 65536, 1 << 22]):
        gen = torch.Generator().manual_seed(seed * 7919 + rank)
        x = torch.empty(numel).uniform_(-1, 1, generator=gen).cuda()
        y = torch.full_like(x, float("nan"))
        call(lib, "ncclAllReduce", ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), numel,
             NCCL_FLOAT32, NCCL_SUM, comm, ctypes.c_void_p(stream.cuda_stream))
        stream.synchronize()
        want = torch.zeros(numel, dtype=torch.float64)
        for r in range(world):
            g = torch.Generator().manual_seed(seed * 7919 + r)
            want += torch.empty(numel).uniform_(-1, 1, generator=g).double()
        err = (y.double().cpu() - want).abs().max().item()
        if not err <= 1e-5 * world:
            raise SystemExit("rank %d: %d floats: max error %.3g" % (rank, numel, err))
    call(lib, "ncclCommDestroy", comm)
    print("rank %d: ctypes client all-reduces correct (path %d)" % (rank, info.path))
    if os.environ.get("EXPECT_FAST") == "1" and info.path == 0:
        raise SystemExit("expected the rocenante path, got NCCL: " + info.reason.decode())


if __name__ == "__main__":
    main()
