# SPDX-License-Identifier: BSD-3-Clause
"""The package's PEP 517 backend: scikit-build-core, plus a CUDA toolkit from PyPI where the machine has none.

The library is one CMake project with CUDA sources, so building it needs nvcc, the CUDA runtime and
NCCL's header. A machine without a CUDA toolkit (a CPU-only CI runner, a laptop) gets NVIDIA's own
compiler, runtime and header packages from PyPI as extra build requirements, and the CMake build is
pointed at them; one without NCCL's header gets NVIDIA's NCCL wheel for its header. Everything else is
scikit-build-core's, unchanged.

ROCENANTE_CUDA_FROM_PYPI: "auto" (default) uses PyPI's packages only where no working nvcc is found,
"1" always (a toolkit too old, say), "0" never (fail as CMake does without a toolkit).
"""
import os
import re
import shutil
import subprocess

from scikit_build_core import build as _scikit_build
from scikit_build_core.build import *  # noqa: F401,F403 - every hook we do not wrap is scikit-build-core's

# NVIDIA's wheels that together hold what building needs of CUDA 13.0 (the toolkit CI builds with).
PYPI_CUDA_MAJOR = "13"
PYPI_CUDA = ["nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-crt==13.0.*",
             "nvidia-nvvm==13.0.*", "nvidia-cuda-cccl==13.0.*"]
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _mode():
    mode = os.environ.get("ROCENANTE_CUDA_FROM_PYPI", "auto").strip().lower()
    if mode not in ("auto", "1", "0"):
        raise ValueError("ROCENANTE_CUDA_FROM_PYPI=%r: expected auto, 1 or 0" % mode)
    return mode


def _defined(config_settings, name):
    """The value of a `-C cmake.define.NAME=...` setting, or None."""
    return (config_settings or {}).get("cmake.define." + name)


def _system_nvcc(config_settings):
    """(path, `nvcc --version` text) of the nvcc a CMake build would use here, in CMake's order of search,
    if it runs; (None, "") where none does."""
    candidates = [_defined(config_settings, "CMAKE_CUDA_COMPILER"), os.environ.get("CUDACXX"), shutil.which("nvcc")]
    candidates += [os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append("/usr/local/cuda/bin/nvcc")
    for nvcc in candidates:
        if not nvcc or not os.access(nvcc, os.X_OK):
            continue
        try:  # a leftover wrapper whose toolkit is gone does not count
            done = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return nvcc, done.stdout.decode(errors="replace")
    return None, ""


def _system_nccl_header(config_settings, nvcc):
    """Whether CMake's search (cmake/Dependencies.cmake) would find nccl.h, given the nvcc it builds with."""
    roots = [_defined(config_settings, "NCCL_ROOT"), os.environ.get("NCCL_ROOT")]
    dirs = [os.path.join(r, "include") for r in roots if r] + [r for r in roots if r]
    dirs.append(_defined(config_settings, "NCCL_INCLUDE_DIR"))
    if nvcc:
        dirs.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "..", "include"))
    dirs += ["/usr/include", "/usr/local/include"]
    return any(d and os.path.isfile(os.path.join(d, "nccl.h")) for d in dirs)


def _pinned_nccl():
    """The NCCL version the project pins (RCN_NCCL_API_NEWEST in scripts/env.sh), so builds repeat."""
    with open(os.path.join(SOURCE_DIR, "scripts", "env.sh")) as env_sh:
        found = re.search(r"RCN_NCCL_API_NEWEST=([0-9.]+)", env_sh.read())
    if not found:
        raise RuntimeError("scripts/env.sh names no RCN_NCCL_API_NEWEST")
    return found.group(1)


def _plan(config_settings):
    """What this machine lacks: (CUDA from PyPI?, NCCL's header from PyPI?, the CUDA major version).
    Decided before anything is changed, so the requirements hook and the build hook agree."""
    mode = _mode()
    nvcc, version = (None, "") if mode == "1" else _system_nvcc(config_settings)
    pypi_cuda = mode == "1" or (mode == "auto" and nvcc is None)
    found = re.search(r"release (\d+)\.", version)
    major = found.group(1) if found and not pypi_cuda else PYPI_CUDA_MAJOR
    pypi_nccl = not _system_nccl_header(config_settings, None if pypi_cuda else nvcc)
    return pypi_cuda, pypi_nccl, major


def _extra_requires(config_settings):
    pypi_cuda, pypi_nccl, major = _plan(config_settings)
    extra = list(PYPI_CUDA) if pypi_cuda else []
    if pypi_nccl:
        extra.append("nvidia-nccl-cu%s==%s" % (major, _pinned_nccl()))
    return extra


def _find_installed(relative):
    """The directory of the `nvidia` namespace package holding `relative`, or None."""
    try:
        import nvidia  # the namespace NVIDIA's wheels install into
    except ImportError:
        return None
    for base in nvidia.__path__:
        if os.path.exists(os.path.join(base, relative)):
            return base
    return None


def _point_cmake_at_pypi(config_settings):
    """Sets the variables CMake reads so that it builds with the wheels _extra_requires asked for."""
    pypi_cuda, pypi_nccl, _ = _plan(config_settings)
    if pypi_cuda:
        base = _find_installed(os.path.join("cu" + PYPI_CUDA_MAJOR, "bin", "nvcc"))
        if base is None:
            raise RuntimeError("rocenante: no CUDA toolkit here and NVIDIA's PyPI packages are not installed in the "
                               "build environment (%s); build with pip's build isolation, or install them"
                               % ", ".join(PYPI_CUDA))
        root = os.path.join(base, "cu" + PYPI_CUDA_MAJOR)
        os.environ["CUDACXX"] = os.path.join(root, "bin", "nvcc")
        os.environ["CUDAToolkit_ROOT"] = root
        # The wheels keep their libraries in lib/, where nvcc looks in lib64/, and ship only the
        # versioned libcudart.so.N, which FindCUDAToolkit does not look for by itself.
        os.environ["CUDAFLAGS"] = ("%s -L%s" % (os.environ.get("CUDAFLAGS", ""), os.path.join(root, "lib"))).strip()
        cudart = os.path.join(root, "lib", "libcudart.so." + PYPI_CUDA_MAJOR)
        defines = os.environ.get("SKBUILD_CMAKE_DEFINE", "")
        os.environ["SKBUILD_CMAKE_DEFINE"] = ";".join(d for d in (defines, "CUDA_CUDART=" + cudart) if d)
    if pypi_nccl:
        base = _find_installed(os.path.join("nccl", "include", "nccl.h"))
        if base is None:
            raise RuntimeError("rocenante: nccl.h not found and NVIDIA's NCCL wheel is not installed in the build "
                               "environment; set NCCL_ROOT or build with pip's build isolation")
        os.environ["NCCL_ROOT"] = os.path.join(base, "nccl")


def get_requires_for_build_wheel(config_settings=None):
    return _scikit_build.get_requires_for_build_wheel(config_settings) + _extra_requires(config_settings)


def get_requires_for_build_editable(config_settings=None):
    return _scikit_build.get_requires_for_build_editable(config_settings) + _extra_requires(config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _point_cmake_at_pypi(config_settings)
    return _scikit_build.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _point_cmake_at_pypi(config_settings)
    return _scikit_build.build_editable(wheel_directory, config_settings, metadata_directory)
