#!/usr/bin/env python3
"""Plots the JSON of `loopfast bench stream`: GB/s against the size of a
write, one line per path (median over the rounds, band min-max), and below
it each path against the Unix-stream fast path, round by round (the
median ratio, bars min-max: vs_fast)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"tcp": "#555555", "fast": "#1f77b4", "fast+shm": "#d62728", "unix": "#2ca02c", "shm": "#9467bd"}


def main(src, dst):
    data = json.load(open(src))
    rows = [r for r in data["rows"] if "gb_per_s" in r]
    paths = []
    for r in rows:
        if r["path"] not in paths:
            paths.append(r["path"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    for p in paths:
        sel = sorted((r for r in rows if r["path"] == p), key=lambda r: r["size"])
        x = [r["size"] for r in sel]
        c = COLORS.get(p)
        top.plot(x, [r["gb_per_s"] for r in sel], marker="o", label=p, color=c)
        top.fill_between(x, [r["gb_per_s_min"] for r in sel], [r["gb_per_s_max"] for r in sel], alpha=0.15, color=c)
        vs = [r for r in sel if "vs_fast" in r]
        if vs:
            med = [r["vs_fast"]["median"] for r in vs]
            bottom.errorbar([r["size"] for r in vs], med,
                            yerr=[[m - r["vs_fast"]["min"] for m, r in zip(med, vs)],
                                  [r["vs_fast"]["max"] - m for m, r in zip(med, vs)]],
                            marker="o", capsize=3, label=p, color=c)
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("GB/s (log)")
    top.grid(alpha=0.3, which="both")
    top.legend()
    bottom.set_yscale("log")
    bottom.axhline(1.0, color=COLORS["fast"], lw=1)
    bottom.set_ylabel("× fast (same round; log)")
    bottom.set_xlabel("bytes per write")
    bottom.grid(alpha=0.3, which="both")
    bottom.legend(fontsize="small")
    top.set_title(f"loopfast bench stream — one connection, {data.get('bytes', '?')} bytes a run "
                  f"({data.get('rounds', '?')} rounds)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_stream.py RESULT.json OUT.png")
    main(sys.argv[1], sys.argv[2])
