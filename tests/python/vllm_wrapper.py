# SPDX-License-Identifier: BSD-3-Clause
"""Loads vLLM's NCCL wrapper module (vllm/distributed/device_communicators/
pynccl_wrapper.py, the one file, taken from the vLLM wheel) without vLLM
installed: the few vLLM modules it imports are stood in for (its logger, its
environment flags, the platform, the library finder), and torch too where it
is not installed (the module only names torch's types at import).

fetch_wrapper(cache_dir) takes the file from the newest vLLM wheel on the
configured package index (scripts/wheel_member.py), cached per wheel.
"""
import importlib.util
import logging
import os
import sys
import types

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
import wheel_member  # noqa: E402

WRAPPER = "vllm/distributed/device_communicators/pynccl_wrapper.py"


def fetch_wrapper(cache_dir, requirement="vllm"):
    """(path of the wrapper module, vLLM version). Raises IndexUnreachable offline."""
    url, version, wheel = wheel_member.resolve(requirement)
    path = os.path.join(cache_dir, wheel + ".pynccl_wrapper.py")
    if not os.path.exists(path):
        os.makedirs(cache_dir, exist_ok=True)
        with wheel_member.open_wheel(url) as z:
            data = z.read(WRAPPER)
        with open(path + ".part", "wb") as f:
            f.write(data)
        os.replace(path + ".part", path)
    return path, version


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _stand_in_for_torch():
    class ReduceOp:
        SUM, PRODUCT, MAX, MIN, AVG = range(5)

    dtypes = {n: object() for n in ("int8", "uint8", "int32", "int64", "float16", "float32", "float64",
                                    "bfloat16", "float8_e4m3fn", "float8_e5m2")}
    torch = _module("torch", dtype=object, Tensor=object, **dtypes)
    torch.distributed = _module("torch.distributed", ReduceOp=ReduceOp, ProcessGroup=object)
    torch.cuda = _module("torch.cuda", Stream=object)


def _stand_in_for_vllm(default_library):
    class Platform:
        @staticmethod
        def is_rocm():
            return False

        @staticmethod
        def is_cuda():
            return True

        @staticmethod
        def fp8_dtype():  # vLLM's on CUDA (ROCm's is the fnuz variant)
            import torch
            return torch.float8_e4m3fn

    vllm = _module("vllm")
    vllm.__path__ = []
    vllm.envs = _module("vllm.envs", VLLM_USE_NCCL_SYMM_MEM=False, VLLM_NCCL_SO_PATH=default_library)
    vllm.logger = _module("vllm.logger", init_logger=logging.getLogger)
    vllm.platforms = _module("vllm.platforms", current_platform=Platform())
    _module("vllm.utils").__path__ = []
    _module("vllm.utils.nccl", find_nccl_library=lambda: default_library)


def load_wrapper(path, default_library):
    """The wrapper module, imported from path; its NCCLLibrary() opens default_library."""
    try:
        import torch  # noqa: F401
    except ImportError:
        _stand_in_for_torch()
    _stand_in_for_vllm(default_library)
    spec = importlib.util.spec_from_file_location("pynccl_wrapper", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    """vllm_wrapper.py OUT_FILE [REQUIREMENT]: writes the wrapper module there (for a GPU host without the index)."""
    if len(sys.argv) not in (2, 3):
        sys.exit(main.__doc__)
    cache = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), ".cache")
    try:
        path, version = fetch_wrapper(cache, *sys.argv[2:])
    except wheel_member.IndexUnreachable as e:
        sys.exit("the package index cannot be reached: %s" % e)
    with open(path, "rb") as src, open(sys.argv[1], "wb") as dst:
        dst.write(src.read())
    print("vLLM %s's %s -> %s" % (version, WRAPPER, sys.argv[1]))


if __name__ == "__main__":
    main()
