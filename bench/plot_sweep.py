#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Plots an allreduce_sweep JSON file: latency against message size (log-log)
and the speedup of rocenante's methods over NCCL, one row per mode (graph,
eager). Usage: plot_sweep.py sweep.json [-o sweep.png] [--title TEXT]"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    if data.get("tool") != "allreduce_sweep":
        raise ValueError(f"{path} is not an allreduce_sweep JSON file")
    return data


def series(data, mode, method, key="time_us"):
    """(bytes, value) pairs of one method in one mode, measured points only."""
    pts = [(r["bytes"], r[key]) for r in data["results"]
           if r["mode"] == mode and r["method"] == method and r.get("measured") and r.get(key)]
    return sorted(pts)


def size_label(b):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale}{unit}"
    return str(b)


def plot(data, out, title=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    modes = [m for m in ("graph", "eager") if any(r["mode"] == m for r in data["results"])]
    if not modes:
        raise ValueError("the JSON file has no results")
    labels = {m["name"]: m["label"] for m in data["methods"]}
    is_nccl = {m["name"]: m["nccl"] for m in data["methods"]}
    methods = [m["name"] for m in data["methods"]]
    sizes = sorted({r["bytes"] for r in data["results"]})
    ticks = sizes[:: max(1, len(sizes) // 8)]

    fig, axes = plt.subplots(len(modes), 2, figsize=(14, 5 * len(modes)), squeeze=False)
    for row, mode in enumerate(modes):
        lat, spd = axes[row]
        for name in methods:
            pts = series(data, mode, name)
            if not pts:
                continue
            style = "--" if is_nccl[name] else "-"
            lat.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3, label=labels[name])
        lat.set_xscale("log", base=2)
        lat.set_yscale("log")
        lat.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        lat.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(v)[0] in "1235" else ""))
        lat.set_xlabel("message size (bytes)")
        lat.set_ylabel("time per all-reduce (us)")
        lat.set_title(f"{mode}: latency (median, worst rank)")
        lat.grid(True, which="both", alpha=0.3)
        lat.legend(fontsize=7)

        for name in methods:
            if is_nccl[name]:
                continue
            for key, base, style in (("speedup_vs_nccl", "NCCL default", "-"),
                                     ("speedup_vs_nccl_ring", "NCCL Ring", ":")):
                pts = series(data, mode, name, key)
                if pts:
                    spd.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3,
                             label=f"{labels[name]} vs {base}")
        size_axes = (lat, spd)
        if not spd.lines:  # no NCCL at all (the host backend): say so, not an empty frame
            spd.text(0.5, 0.5, "no NCCL result to compare with\n(" + data["backend"] + " backend)",
                     ha="center", va="center", transform=spd.transAxes)
            spd.set_xticks([])
            spd.set_yticks([])
            spd.set_title(f"{mode}: speedup over NCCL")
            size_axes = (lat,)
        else:
            spd.axhline(1.0, color="black", lw=0.8)
            spd.set_xscale("log", base=2)
            spd.set_xlabel("message size (bytes)")
            spd.set_ylabel("speedup (NCCL time / time)")
            spd.set_title(f"{mode}: speedup over NCCL (>1: faster)")
            spd.grid(True, which="both", alpha=0.3)
            if spd.lines[1:]:
                spd.legend(fontsize=7)
        for ax in size_axes:
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(round(v)))))

    meta = data.get("meta", {})
    heading = title or (f"all-reduce {data['dtype']} {data['op']}, {data['nranks']} ranks, "
                        f"{meta.get('gpu', data['backend'])} ({meta.get('date', '')})")
    fig.suptitle(heading)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("json", help="file written by allreduce_sweep --json")
    ap.add_argument("-o", "--out", default=None, help="PNG to write (default: the JSON name with .png)")
    ap.add_argument("--title", default=None)
    args = ap.parse_args(argv)
    out = args.out or (args.json[:-5] if args.json.endswith(".json") else args.json) + ".png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_sweep.py: matplotlib is not installed (python3 -m pip install matplotlib)", file=sys.stderr)
        return 2
    try:
        plot(load(args.json), out, args.title)
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_sweep.py: {e}", file=sys.stderr)
        return 1
    print(f"plot_sweep.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
