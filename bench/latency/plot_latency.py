#!/usr/bin/env python3
"""Draws the chart of `loopfast bench latency --json FILE`.

usage: plot_latency.py LATENCY.json OUT.png

Left: the round trip of every row, a bar to the median (p50) with the p99
marked, on a log scale (the rows span from a fraction of a microsecond to
tens). Right: the latency CDF of every row (all samples of all repeats).
Colour says the transport, line style the completion style.
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

COLOURS = {
    "tcp": "#d62728",
    "fastpath": "#1f77b4",
    "fastpath-spin": "#9467bd",
    "uds": "#2ca02c",
    "fastpath-shm": "#ff7f0e",
    "fastpath-shm-spin": "#8c564b",
    "shm": "#555555",
}
STYLES = {
    "block": "-",
    "epoll": "--",
    "spin": ":",
    "uring": "-.",
    "uring-poll": (0, (6, 2, 1, 2, 1, 2)),
}


def us(v):
    """Microseconds the way the table prints them: 0.181, 6.52, 57.3, 2120."""
    if v < 1:
        return f"{v:.3f}"
    if v < 10:
        return f"{v:.2f}"
    if v < 1000:
        return f"{v:.1f}"
    return f"{v:.0f}"


def label(row):
    return f"{row['style']} / {row['transport']}"


def main(argv):
    if len(argv) != 3:
        print("usage: plot_latency.py LATENCY.json OUT.png", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    rows = doc["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    opts, mach = doc["options"], doc["machine"]

    fig, (ax_bar, ax_cdf) = plt.subplots(
        1, 2, figsize=(16, max(6.5, 0.42 * len(rows) + 2.5)), gridspec_kw={"width_ratios": [1.1, 1]}
    )
    rep = opts["repeat"]
    fig.suptitle(
        f"loopfast bench latency: {opts['size']}-byte ping-pong round trip, two processes "
        f"({opts['count']} round trips x {rep} repeat{'s' if rep > 1 else ''}"
        f"{', median of repeats' if rep > 1 else ''})\n"
        f"{mach['cpu_model']}, {mach['cpus']} CPUs, {mach['kernel']}"
        f"{', pinned' if opts['pin'] else ', not pinned'}"
        f"{'' if mach['loadavg'][0] is None else ', load %.2f at the start' % mach['loadavg'][0]}",
        fontsize=13,
    )

    # Left: p50 bars with the p99 marked, one row per line, first row on top.
    ys = list(range(len(rows)))[::-1]
    xmin = min([r["median"]["p50_us"] for r in ok] + [1.0]) / 2
    xmax = max([r["median"]["p99_us"] for r in ok] + [10.0]) * 3
    for y, r in zip(ys, rows):
        if r["status"] != "ok":
            ax_bar.text(xmin * 1.1, y, f"{r['status']}: {r.get('reason', '')}"[:70],
                        va="center", fontsize=9, color="#777777", style="italic")
            continue
        m = r["median"]
        c = COLOURS.get(r["transport"], "black")
        ax_bar.barh(y, m["p50_us"] - xmin, left=xmin, color=c, alpha=0.75, height=0.7)
        ax_bar.plot([m["p50_us"], m["p99_us"]], [y, y], color="black", lw=1)
        ax_bar.plot([m["p99_us"]], [y], marker="|", markersize=14, mew=2.5, color="black")
        if rep > 1:
            lo, hi = r["min_over_repeats"]["p50_us"], r["max_over_repeats"]["p50_us"]
            ax_bar.plot([lo, hi], [y - 0.3, y - 0.3], color="black", lw=3, alpha=0.5, solid_capstyle="butt")
        ax_bar.text(m["p99_us"] * 1.15, y, f"p50 {us(m['p50_us'])} µs, p99 {us(m['p99_us'])}",
                    va="center", fontsize=9)
    ax_bar.set_yticks(ys)
    ax_bar.set_yticklabels([label(r) for r in rows], fontsize=10)
    ax_bar.set_xscale("log")
    ax_bar.set_xlim(xmin, xmax * 8)
    ax_bar.set_xlabel("round trip (µs, log scale)", fontsize=11)
    ax_bar.set_title("median round trip (bar) and p99 (|)", fontsize=12)
    ax_bar.grid(axis="x", which="both", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[t], alpha=0.75) for t in COLOURS]
    names = list(COLOURS)
    handles.append(Line2D([], [], color="black", marker="|", markersize=12, mew=2.5, lw=1))
    names.append("p50 to p99")
    if rep > 1:
        handles.append(Line2D([], [], color="black", lw=3, alpha=0.5))
        names.append("p50 range over repeats")
    ax_bar.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=4, fontsize=9.5,
                  framealpha=0.9)

    # Right: CDF per row, on a scale that stretches the tail: y is
    # -log10(1 - p/100), so 90, 99, 99.9 and 99.99 are evenly spaced.
    def tail(p):
        return -math.log10(max(1e-5, 1 - p / 100))

    for r in ok:
        pts = r["cdf"]
        ax_cdf.plot([p[1] for p in pts], [tail(p[0]) for p in pts], color=COLOURS.get(r["transport"], "black"),
                    linestyle=STYLES.get(r["style"], "-"), lw=1.8, label=label(r))
    ticks = [0, 50, 90, 99, 99.9, 99.99, 100]
    ax_cdf.set_yticks([tail(p) for p in ticks])
    ax_cdf.set_yticklabels(["0", "50 (p50)", "90", "99 (p99)", "99.9", "99.99", "max"], fontsize=10)
    ax_cdf.set_ylim(0, tail(100) + 0.1)
    ax_cdf.set_xscale("log")
    ax_cdf.set_xlabel("round trip (µs, log scale)", fontsize=11)
    ax_cdf.set_ylabel("% of round trips at or below (tail stretched)", fontsize=11)
    ax_cdf.set_title("latency CDF (colour: transport, line: style)", fontsize=12)
    ax_cdf.grid(which="major", alpha=0.4)
    ax_cdf.grid(which="minor", axis="x", alpha=0.15)
    ax_cdf.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3, framealpha=0.9)

    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
