#!/usr/bin/env python3
"""Plots the JSON of `loopfast bench connect`: connections per second
against concurrent clients, one line per path (median, band min-max), and
below it the ratio to plain TCP measured in the same run."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"tcp": "#555555", "fast": "#1f77b4", "client-only": "#ff7f0e", "unix": "#2ca02c",
          "tcp+flood": "#8c564b", "fast+flood": "#d62728"}


def main(src, dst):
    data = json.load(open(src))
    rows = data["rows"]
    paths = []
    for r in rows:
        if r["path"] not in paths:
            paths.append(r["path"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    for p in paths:
        sel = sorted((r for r in rows if r["path"] == p and r["median"] > 0), key=lambda r: r["clients"])
        if not sel:
            continue
        x = [r["clients"] for r in sel]
        c = COLORS.get(p)
        top.plot(x, [r["median"] / 1e3 for r in sel], marker="o", label=p, color=c)
        top.fill_between(x, [r["min"] / 1e3 for r in sel], [r["max"] / 1e3 for r in sel], alpha=0.15, color=c)
        if p != "tcp":
            bottom.plot(x, [r["vs_tcp"] for r in sel], marker="o", label=p, color=c)
    top.set_xscale("log")
    top.set_ylabel("connections/s (thousands)")
    top.set_ylim(bottom=0)
    top.grid(alpha=0.3)
    top.legend()
    bottom.axhline(1.0, color="#555555", lw=1)
    bottom.axhline(0.9, color="#555555", lw=0.8, ls="--")
    bottom.set_ylabel("× plain TCP (same run)")
    bottom.set_xlabel("concurrent clients")
    bottom.grid(alpha=0.3)
    cfg = data.get("config", {})
    top.set_title(f"loopfast bench connect — connect, 1-byte exchange, close "
                  f"({cfg.get('repeat', '?')} repeats × {cfg.get('time_s', '?')} s)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_connect.py RESULT.json OUT.png")
    main(sys.argv[1], sys.argv[2])
