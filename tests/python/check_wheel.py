# SPDX-License-Identifier: BSD-3-Clause
"""pytest (its own ctest, test_python_wheel): `pip wheel .` builds a wheel that works on its own.

The wheel is built from the source tree with the environment's scikit-build-core and nanobind (no
network), unpacked into an empty directory, and two ranks import rocenante from there alone (the
library beside the extension, found through $ORIGIN) and run the init_ways scenario on the CPU.
"""
import glob
import os
import subprocess
import sys
import zipfile

import ranks

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_pip_wheel(tmp_path):
    defines = ["-C", "build-dir=%s" % (tmp_path / "build")]
    for name in ["CMAKE_CUDA_ARCHITECTURES", "NCCL_INCLUDE_DIR"]:
        if os.environ.get("RCN_PYTEST_WHEEL_" + name):
            defines += ["-C", "cmake.define.%s=%s" % (name, os.environ["RCN_PYTEST_WHEEL_" + name])]
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", SRC, "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist")] + defines, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=1500)
    assert build.returncode == 0, build.stdout.decode(errors="replace")[-6000:]
    wheels = glob.glob(str(tmp_path / "dist" / "rocenante-*.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    for want in ["rocenante/__init__.py", "rocenante/_ops.py", "rocenante/py.typed", "rocenante/_rocenante.pyi",
                 "rocenante/librocenante.so"]:
        assert want in names, "%s missing from the wheel: %s" % (want, names)
    assert any(n.startswith("rocenante/_rocenante.") and n.endswith(".so") for n in names), names
    site = tmp_path / "site"
    zipfile.ZipFile(wheels[0]).extractall(site)
    for so in glob.glob(str(site / "rocenante" / "*.so")):
        os.chmod(so, 0o755)
    ranks.run("init_ways", 2, tmp_path, env={"PYTHONPATH": str(site), "RCN_PYTEST_DEVICE": "cpu"})
