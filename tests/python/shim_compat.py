#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""librocenante.so against what users run today, on a CPU:

1. vLLM's NCCL wrapper module, taken from the newest vLLM wheel, opens the
   library by path (as VLLM_NCCL_SO_PATH makes it do): every function it binds
   must resolve, and ncclGetVersion / ncclGetUniqueId must answer through it
   (forwarded to the NCCL named by --nccl, whose own answers they must equal);
2. every nccl* symbol the newest nvidia-nccl-cu13 wheel's libnccl.so.2
   exports, the shim must export too.

Downloads are cached under --cache (the build folder): the wrapper is a few
small range reads; NCCL's library (~190 MB compressed) is read once per NCCL
release and only its symbol list kept. Exit 77 (skipped, saying why) where
the package index cannot be reached.

Usage: shim_compat.py --lib librocenante.so --nccl libnccl.so.2 --cache DIR
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_wrapper  # noqa: E402
from vllm_wrapper import wheel_member  # noqa: E402

SKIP = 77
NCCL_WHEEL = "nvidia-nccl-cu13"
NCCL_MEMBER = "nvidia/nccl/lib/libnccl.so.2"


def exported_nccl_symbols(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines()
            if line.split() and line.split()[-1].startswith(("nccl", "pnccl"))}


def newest_nccl_symbols(cache):
    """(version, the nccl* symbols the newest NCCL wheel's library exports)."""
    url, version, wheel = wheel_member.resolve(NCCL_WHEEL)
    listing = os.path.join(cache, wheel + ".symbols")
    if not os.path.exists(listing):
        os.makedirs(cache, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            lib = os.path.join(tmp, "libnccl.so.2")
            with wheel_member.open_wheel(url) as z, z.open(NCCL_MEMBER) as src, open(lib, "wb") as dst:
                while True:
                    chunk = src.read(8 << 20)
                    if not chunk:
                        break
                    dst.write(chunk)
            symbols = exported_nccl_symbols(lib)
        with open(listing + ".part", "w") as f:
            f.write("\n".join(sorted(symbols)) + "\n")
        os.replace(listing + ".part", listing)
    with open(listing) as f:
        return version, {line.strip() for line in f if line.strip()}


def check_vllm(args):
    path, version = vllm_wrapper.fetch_wrapper(args.cache)
    os.environ["ROCENANTE_NCCL_LIBRARY"] = args.nccl
    os.environ.setdefault("ROCENANTE_DEBUG", "WARN")
    wrapper = vllm_wrapper.load_wrapper(path, args.lib)
    lib = wrapper.NCCLLibrary(args.lib)  # raises AttributeError where a required symbol is missing
    bound = [f.name for f in wrapper.NCCLLibrary.exported_functions]
    unbound = [name for name in bound if not lib.has_symbol(name)]
    assert not unbound, "vLLM %s binds %s, which librocenante.so lacks" % (version, unbound)

    real = ctypes.CDLL(args.nccl)
    real_version = ctypes.c_int()
    assert real.ncclGetVersion(ctypes.byref(real_version)) == 0
    got = lib.ncclGetRawVersion()
    assert got == real_version.value, "ncclGetVersion through the shim: %d, the real NCCL's: %d" % (
        got, real_version.value)
    unique_id = lib.ncclGetUniqueId()
    assert any(bytes(unique_id.internal)), "ncclGetUniqueId through the shim gave an all-zero id"
    # Its dtype map asks vLLM's platform (fp8_dtype since 0.34), as every
    # all-reduce of PyNcclCommunicator does: the stand-ins must answer.
    torch = sys.modules["torch"]
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        wrapper.ncclDataTypeEnum.from_torch(dtype)
    print("vLLM %s: its wrapper binds all %d functions from librocenante.so; ncclGetVersion %d "
          "(the real NCCL's), ncclGetUniqueId answered" % (version, len(bound), got))


def check_nccl(args):
    version, theirs = newest_nccl_symbols(args.cache)
    ours = exported_nccl_symbols(args.lib)
    missing = sorted(theirs - ours)
    assert not missing, ("NCCL %s exports %d nccl* symbols librocenante.so lacks: %s. Pin it in "
                         "scripts/env.sh and regenerate the forwarders (docs/SHIM.md)" % (
                             version, len(missing), " ".join(missing)))
    print("NCCL %s: all %d nccl* symbols its libnccl.so.2 exports, librocenante.so exports" % (
        version, len(theirs)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True)
    parser.add_argument("--nccl", required=True)
    parser.add_argument("--cache", required=True)
    args = parser.parse_args()
    try:
        check_vllm(args)
        check_nccl(args)
    except wheel_member.IndexUnreachable as e:
        print("SKIP: the package index cannot be reached (%s)" % e)
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
