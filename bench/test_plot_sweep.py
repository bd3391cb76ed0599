#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""ctest for bench/plot_sweep.py: plots a small synthetic sweep and checks a
PNG comes out. Exits 77 (skipped) when matplotlib is not installed."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile


def synthetic():
    methods = [("rcn-oneshot", "rocenante one-shot", False), ("rcn-twoshot", "rocenante two-shot", False),
               ("nccl", "NCCL default", True), ("nccl-ring", "NCCL Ring", True)]
    results = []
    for mode in ("graph", "eager"):
        for i, b in enumerate([1024, 4096, 16384, 65536]):
            base = 6.0 + i
            for name, t in (("rcn-oneshot", 2.5 + i), ("nccl", base), ("nccl-ring", base + 0.1)):
                r = {"mode": mode, "method": name, "bytes": b, "count": b // 2, "measured": True,
                     "time_us": t, "wrong": 0, "note": ""}
                if name == "rcn-oneshot":
                    r["speedup_vs_nccl"] = base / t
                    r["speedup_vs_nccl_ring"] = (base + 0.1) / t
                results.append(r)
            results.append({"mode": mode, "method": "rcn-twoshot", "bytes": b, "count": b // 2,
                            "measured": False, "note": "n/a"})
    return {"tool": "allreduce_sweep", "nranks": 2, "backend": "gpu", "dtype": "bf16", "op": "sum",
            "meta": {"gpu": "test"},
            "methods": [{"name": n, "label": l, "nccl": c, "available": True, "reason": ""}
                        for n, l, c in methods],
            "results": results, "crossovers": []}


def main():
    script = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "plot_sweep.py")
    if importlib.util.find_spec("matplotlib") is None:
        print("SKIP: matplotlib is not installed")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sweep.json")
        with open(path, "w") as f:
            json.dump(synthetic(), f)
        out = os.path.join(tmp, "sweep.png")
        subprocess.run([sys.executable, script, path, "-o", out], check=True)
        with open(out, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
        # A file that is not a sweep is a clear error, not a traceback.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"tool": "other"}, f)
        r = subprocess.run([sys.executable, script, bad], capture_output=True, text=True)
        assert r.returncode == 1 and "not an allreduce_sweep" in r.stderr, r.stderr
        # A host-backend sweep (no NCCL method measured) still plots.
        host = synthetic()
        host["backend"] = "host"
        host["results"] = [{k: v for k, v in r.items() if not k.startswith("speedup")}
                           for r in host["results"] if r["method"] == "rcn-oneshot"]
        with open(path, "w") as f:
            json.dump(host, f)
        os.remove(out)
        subprocess.run([sys.executable, script, path, "-o", out], check=True)
        with open(out, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
    print("plot_sweep.py: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
