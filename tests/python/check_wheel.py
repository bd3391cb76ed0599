# SPDX-License-Identifier: BSD-3-Clause
"""pytest (ctests test_python_wheel and test_python_wheel_no_toolkit): `pip wheel .` builds a wheel
that works on its own.

test_pip_wheel builds from the source tree with the environment's scikit-build-core and nanobind (no
network). test_pip_wheel_without_toolkit builds as a machine without the CUDA toolkit would: in a
mount namespace where this machine's toolkit (and the nccl.h inside it) is hidden, with pip's build
isolation, so the package's backend (python/build_backend/) must fetch NVIDIA's compiler and NCCL's
header from PyPI; it skips, saying why, where the index cannot be reached or the toolkit cannot be
hidden. Each wheel is unpacked into an empty directory, and two ranks import rocenante from there alone
(the library beside the extension, found through $ORIGIN) and run the init_ways scenario on the CPU.
"""
import glob
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import ranks

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "scripts"))
import wheel_member  # noqa: E402

# Runs "$@" after mounting an empty tmpfs over the toolkit's directory, in the namespace unshare made.
HIDE_TOOLKIT = 'mount -t tmpfs rcn-no-cuda "$0" && exec "$@"'
# Run inside that namespace: prints what of a CUDA toolkit can still be found there.
FIND_TOOLKIT = """
import os, shutil, subprocess
left = []
for nvcc in {shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"} - {None}:
    try:
        if subprocess.run([nvcc, "--version"], capture_output=True).returncode == 0:
            left.append(nvcc)
    except OSError:
        pass
for d in ("/usr/include", "/usr/local/include"):
    for h in ("cuda_runtime_api.h", "nccl.h"):
        if os.path.isfile(os.path.join(d, h)):
            left.append(os.path.join(d, h))
print(" ".join(left))
"""


def pip_wheel(tmp_path, argv_prefix=(), isolated=False):
    """Builds the wheel into tmp_path/dist with `pip wheel`; returns its path."""
    defines = ["-C", "build-dir=%s" % (tmp_path / "build")]
    for name in ["CMAKE_CUDA_ARCHITECTURES", "NCCL_INCLUDE_DIR"]:
        if os.environ.get("RCN_PYTEST_WHEEL_" + name) and not (isolated and name == "NCCL_INCLUDE_DIR"):
            defines += ["-C", "cmake.define.%s=%s" % (name, os.environ["RCN_PYTEST_WHEEL_" + name])]
    isolation = [] if isolated else ["--no-build-isolation"]
    build = subprocess.run(list(argv_prefix) + [sys.executable, "-m", "pip", "wheel", SRC, "--no-deps", "-q",
                                                "-w", str(tmp_path / "dist")] + isolation + defines,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1500)
    assert build.returncode == 0, build.stdout.decode(errors="replace")[-6000:]
    wheels = glob.glob(str(tmp_path / "dist" / "rocenante-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def check_wheel(wheel, tmp_path):
    """The wheel holds the package, and two ranks run from it alone."""
    names = zipfile.ZipFile(wheel).namelist()
    for want in ["rocenante/__init__.py", "rocenante/_ops.py", "rocenante/py.typed", "rocenante/_rocenante.pyi",
                 "rocenante/librocenante.so"]:
        assert want in names, "%s missing from the wheel: %s" % (want, names)
    assert any(n.startswith("rocenante/_rocenante.") and n.endswith(".so") for n in names), names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    for so in glob.glob(str(site / "rocenante" / "*.so")):
        os.chmod(so, 0o755)
    ranks.run("init_ways", 2, tmp_path, env={"PYTHONPATH": str(site), "RCN_PYTEST_DEVICE": "cpu"})


def test_pip_wheel(tmp_path):
    check_wheel(pip_wheel(tmp_path), tmp_path)


def toolkit_root():
    """The directory the machine's CUDA toolkit lives in (where /usr/local/cuda or nvcc leads), or None."""
    for start in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]:
        if start and os.path.isfile(os.path.join(start, "bin", "nvcc")):
            return os.path.realpath(start)
    nvcc = shutil.which("nvcc")
    root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None
    # Only a directory that is the toolkit's own: never /usr or /usr/local as a whole.
    return root if root and os.path.isdir(os.path.join(root, "nvvm")) else None


def test_pip_wheel_without_toolkit(tmp_path):
    root = toolkit_root()
    if root is None:
        pytest.skip("no CUDA toolkit here to hide")
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here to hide the CUDA toolkit with")
    prefix = ["unshare", "--mount", "sh", "-c", HIDE_TOOLKIT, root]
    probe = subprocess.run(prefix + [sys.executable, "-c", FIND_TOOLKIT], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("cannot hide the CUDA toolkit in a mount namespace here: %s" % probe.stderr.strip()[-300:])
    if probe.stdout.strip():
        pytest.skip("hiding %s leaves a CUDA toolkit in reach: %s" % (root, probe.stdout.strip()))
    try:
        wheel_member.resolve("nvidia-cuda-nvcc==13.0.*")
    except wheel_member.IndexUnreachable as e:
        pytest.skip("the package index cannot be reached: %s" % e)
    check_wheel(pip_wheel(tmp_path, prefix, isolated=True), tmp_path)
