#!/usr/bin/env python3
"""Plots the JSON of `loopfast bench udp`: one panel per (mode, size), one
bar per design (median datagrams/s, whiskers at min and max), traditional
designs grey and RIO designs blue, with the ratio to epoll on each bar."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    data = json.load(open(src))
    rows = data["summary"]
    panels = []
    for r in rows:
        key = (r["mode"], r["size"])
        if key not in panels:
            panels.append(key)
    cols = min(2, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(7.5 * cols, 4.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (mode, size) in zip(axes.flat, panels):
        sel = [r for r in rows if r["mode"] == mode and r["size"] == size]
        names = [r["design"] + (f" ×{r['threads']}" if r["threads"] > 1 else "") for r in sel]
        med = [r["rate"] / 1e6 for r in sel]
        lo = [max(0, (r["rate"] - r["rate_min"]) / 1e6) for r in sel]
        hi = [max(0, (r["rate_max"] - r["rate"]) / 1e6) for r in sel]
        colors = ["#4c72b0" if r["design"].startswith("rio") else "#9a9a9a" for r in sel]
        y = range(len(sel))
        ax.barh(y, med, xerr=[lo, hi], color=colors, capsize=3)
        ax.set_yticks(list(y))
        ax.set_yticklabels(names)
        ax.invert_yaxis()
        top = max([r["rate_max"] / 1e6 for r in sel] + [0.001])
        for i, r in enumerate(sel):
            note = f"{r['rate'] / 1e6:.2f}M"
            if r.get("vs_epoll"):
                note += f"  ×{r['vs_epoll']:.2f} epoll"
            if mode == "rate" and r.get("lost"):
                note += f"  lost {int(r['lost'])}"
            ax.text(r["rate_max"] / 1e6 + top * 0.02, i, note, va="center", ha="left", fontsize=8)
        ax.set_xlim(0, top * 1.5)
        ax.set_xlabel("datagrams/s (millions; median, whiskers min–max)")
        runs = sel[0]["runs"] if sel else 0
        ax.set_title(f"{mode} mode, {size}-byte datagrams ({runs} runs)")
        ax.grid(axis="x", alpha=0.3)
    cfg = data.get("config", {})
    fig.suptitle(f"loopfast bench udp — UDP receive on 127.0.0.1, work {cfg.get('work', 0)} "
                 "(grey: traditional, blue: registered I/O)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_udp.py RESULT.json OUT.png")
    main(sys.argv[1], sys.argv[2])
