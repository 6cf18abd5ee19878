"""Summaries, Markdown tables and the seed-001-style plot of a run."""
import statistics

from apps_fastpath import LABELS, PATHS

STYLE = {"fast": dict(color="black", marker="o", linestyle="-"),
         "tcp": dict(color="tab:red", marker="s", linestyle="-"),
         "unix": dict(color="tab:blue", marker="^", linestyle="--"),
         "spin": dict(color="tab:green", marker="D", linestyle="-"),
         "shm": dict(color="tab:purple", marker="v", linestyle="-"),
         "shm-spin": dict(color="tab:orange", marker="P", linestyle="-")}


def summarize(result):
    """Adds result["apps"][app]["summary"]: one row per workload, threads
    and path with mean/min/max throughput over the valid repetitions, mean
    QPS and p95, and the ratio of means to plain TCP."""
    for res in result["apps"].values():
        rows = []
        for wl in res.get("workloads", []):
            for t in res.get("threads", []):
                by_path = {}
                for p in PATHS:
                    runs = [r for r in res["runs"] if r["workload"] == wl and r["threads"] == t and r["path"] == p]
                    if not runs:
                        continue
                    ok = [r for r in runs if r.get("valid")]
                    row = {"workload": wl, "threads": t, "path": p, "n": len(ok), "of": len(runs)}
                    if ok:
                        tps = [r["tps"] for r in ok]
                        row.update(tps=statistics.mean(tps), tps_min=min(tps), tps_max=max(tps),
                                   qps=statistics.mean(r["qps"] for r in ok),
                                   p95_ms=statistics.mean(r["p95_ms"] for r in ok))
                    else:
                        row["reason"] = next((r.get("reason") for r in runs if r.get("reason")), "no valid run")
                    by_path[p] = row
                    rows.append(row)
                base = by_path.get("tcp", {}).get("tps")
                for row in by_path.values():
                    if base and "tps" in row:
                        row["ratio_tcp"] = row["tps"] / base
                    _vs_unix(row, res["runs"])
        res["summary"] = rows


def _vs_unix(row, runs):
    """The ratio to the server's own Unix socket, repetition by repetition
    (the paths of one repetition run back to back): median, min and max."""
    if row["path"] == "unix":
        return
    unix = {r["rep"]: r["tps"] for r in runs if r["workload"] == row["workload"] and r["threads"] == row["threads"]
            and r["path"] == "unix" and r.get("valid") and r.get("tps")}
    rs = [r["tps"] / unix[r["rep"]] for r in runs if r["workload"] == row["workload"] and r["threads"] == row["threads"]
          and r["path"] == row["path"] and r.get("valid") and r.get("rep") in unix]
    if rs:
        row.update(ratio_unix=statistics.median(rs), ratio_unix_min=min(rs), ratio_unix_max=max(rs),
                   ratio_unix_n=len(rs))


def _fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def tables(result):
    out = []
    m = result["meta"]
    for name, res in result["apps"].items():
        out.append(f"\n### {name}: {res.get('version', '')}\n")
        if res.get("error"):
            out.append(f"ERROR: {res['error'][:300]}\n")
        if not res.get("workloads"):
            continue
        out.append(f"{res['unit']} and QPS are means over {m['repeat']} interleaved runs of {m['time']:g} s "
                   f"(min–max in brackets); p95 in ms; ×TCP is the ratio of means; ×Unix is the median of the "
                   f"ratios to the Unix socket run by run (min–max).\n")
        if res.get("fast_error") and res["fast_error"] != "not requested":
            out.append(f"loopfast path not measured: {res['fast_error']}\n")
        if m.get("spin_us") is not None and "spin" in m.get("paths", ()):
            out.append(f"loopfast + spin: server and client under `loopfast run --spin-us {m['spin_us']}`.\n")
        if "shm" in m.get("paths", ()):
            out.append("loopfast + shm: server and client under `loopfast run --tier shm`.\n")
        if "shm-spin" in m.get("paths", ()):
            out.append(f"loopfast + shm + spin: server and client under `loopfast run --tier shm --spin-us "
                       f"{m['spin_us']}`.\n")
        out.append(f"| workload | threads | path | {res['unit']} | QPS | p95 ms | ×TCP | ×Unix |")
        out.append("|---|---:|---|---:|---:|---:|---:|---:|")
        for r in res.get("summary", []):
            label = LABELS[r["path"]]
            if "tps" not in r:
                out.append(f"| {r['workload']} | {r['threads']} | {label} | INVALID: {r['reason'][:90]} | | | | |")
                continue
            spread = f" ({_fmt(r['tps_min'])}–{_fmt(r['tps_max'])})" if r["n"] > 1 else ""
            bad = f", {r['of'] - r['n']} invalid" if r["n"] < r["of"] else ""
            ratio = f"{r['ratio_tcp']:.2f}" if "ratio_tcp" in r else "–"
            vs_unix = (f"{r['ratio_unix']:.2f} ({r['ratio_unix_min']:.2f}–{r['ratio_unix_max']:.2f})"
                       if "ratio_unix" in r else "–")
            out.append(f"| {r['workload']} | {r['threads']} | {label} | {_fmt(r['tps'])}{spread}{bad} | "
                       f"{_fmt(r['qps'])} | {r['p95_ms']:.2f} | {ratio} | {vs_unix} |")
        means = _mean_ratios(res)
        if means:
            out.append("\nMean ratio to plain TCP over all rows: "
                       + ", ".join(f"{LABELS[p]} {v:.2f}" for p, v in means.items()))
    return "\n".join(out)


def _mean_ratios(res, workload=None):
    out = {}
    for p in ("fast", "spin", "shm", "shm-spin", "unix"):
        rs = [r["ratio_tcp"] for r in res.get("summary", [])
              if r["path"] == p and "ratio_tcp" in r and workload in (None, r["workload"])]
        if rs:
            out[p] = statistics.mean(rs)
    return out


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    panels = [(name, res, wl) for name, res in result["apps"].items() for wl in res.get("workloads", [])]
    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows), squeeze=False)
    for ax, (name, res, wl) in zip(axes.flat, panels):
        for p in ("fast", "spin", "shm", "shm-spin", "tcp", "unix"):
            rs = [r for r in res.get("summary", []) if r["workload"] == wl and r["path"] == p and "tps" in r]
            if not rs:
                continue
            x = [r["threads"] for r in rs]
            y = [r["tps"] for r in rs]
            err = [[r["tps"] - r["tps_min"] for r in rs], [r["tps_max"] - r["tps"] for r in rs]]
            ax.errorbar(x, y, yerr=err, label=LABELS[p], capsize=3, linewidth=2, markersize=6, **STYLE[p])
        ax.set_xscale("log", base=2)
        ticks = sorted({r["threads"] for r in res.get("summary", [])})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"))
        ax.set_xlabel("client threads / connections")
        ax.set_ylabel(f"{res['unit']} (mean, min–max bars)")
        ratios = _mean_ratios(res, wl)
        sub = ", ".join(f"{LABELS[p]} ×{v:.2f}" for p, v in ratios.items())
        ax.set_title(f"{name} {wl}\nvs plain TCP: {sub}" if sub else f"{name} {wl}", fontsize=11)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=9)
        if res.get("fast_error") and res["fast_error"] != "not requested":
            ax.text(0.5, 0.04, "loopfast path not measured:\n" + res["fast_error"][:70], transform=ax.transAxes,
                    ha="center", fontsize=8, color="gray")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    m = result["meta"]
    fig.suptitle(f"Throughput vs threads, {m['cpus']} vCPUs, {m['time']:g} s x {m['repeat']} interleaved runs",
                 fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
