#!/usr/bin/env python3
"""The data path's own cost, Redis GET at one client: the system calls per
request at both ends (strace -c) over the fast path and over redis's own
Unix socket, and with --perf the share of perf samples in the interposer
(libloopfast-preload.so) at both ends of the fast path.

usage: redis_cost.py [--requests 20000] [--perf] [--perf-requests 200000]

The fast path: redis-server and redis-benchmark under `loopfast run`
(LOOPFAST_BIN, or ../../build/loopfast), proven from the kernel while the
client runs (both ends' Unix sockets, apps_fastpath.kernel_fast). The
reference: a plain redis-server with --unixsocket, redis-benchmark -s.
Each line gives calls per request (counted over --requests; the client's
setup, a few dozen calls, is spread over them). Throughput ratios are
measured by `loopfast bench app redis --workload get --threads 1 --paths
fast,unix --repeat 15` (the ×Unix column); this script only counts.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apps_fastpath import kernel_fast, wrap  # noqa: E402
from apps_proc import free_port  # noqa: E402

COMMON = ["--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", "--logfile", ""]


def start(path, tmp):
    port, sock = free_port(), os.path.join(tmp, f"{path}.sock")
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--unixsocket", sock] + COMMON
    p = subprocess.Popen(wrap(argv, path), stdout=subprocess.DEVNULL)
    for _ in range(100):
        if subprocess.run(["redis-cli", "-s", sock, "ping"], capture_output=True, text=True).stdout.strip() == "PONG":
            return p, port, sock
        time.sleep(0.1)
    p.kill()
    sys.exit(f"redis-server ({path}) did not start")


def client(path, port, sock, n):
    conn = ["-s", sock] if path == "unix" else ["-p", str(port)]
    return wrap(["redis-benchmark", *conn, "-t", "get", "-c", "1", "-n", str(n), "--csv"], path)


def descendants(pid):
    try:
        kids = [int(k) for t in os.listdir(f"/proc/{pid}/task")
                for k in open(f"/proc/{pid}/task/{t}/children").read().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in descendants(k)]


def proven(path, port, proc):
    """Looks, while the client runs (under strace: a child of proc), whether
    the kernel shows it on the fast path."""
    seen = [path == "unix"]

    def look():
        while proc.poll() is None and not seen[0]:
            seen[0] = any(kernel_fast(port, pid) > 0 for pid in descendants(proc.pid))
            time.sleep(0.01)
    t = threading.Thread(target=look, daemon=True)
    t.start()
    return t, seen


def strace_counts(path, srv, port, sock, n, tmp):
    out_s, out_c = os.path.join(tmp, f"{path}-srv.st"), os.path.join(tmp, f"{path}-cli.st")
    st = subprocess.Popen(["strace", "-c", "-f", "-p", str(srv.pid), "-o", out_s], stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    cli = subprocess.Popen(["strace", "-c", "-f", "-o", out_c] + client(path, port, sock, n),
                           stdout=subprocess.DEVNULL)
    t, seen = proven(path, port, cli)
    cli.wait()
    t.join()
    st.send_signal(signal.SIGINT)
    st.wait()
    return parse(out_s), parse(out_c), seen[0]


def parse(path):
    calls = {}
    for line in open(path):
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m and m.group(2) != "total":
            calls[m.group(2)] = int(m.group(1))
    return calls


def perf_share(srv, port, sock, n, tmp):
    ds, dc = os.path.join(tmp, "srv.perf"), os.path.join(tmp, "cli.perf")
    ps = subprocess.Popen(["perf", "record", "-F", "999", "-p", str(srv.pid), "-o", ds],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    subprocess.run(["perf", "record", "-F", "999", "-o", dc] + client("fast", port, sock, n),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ps.send_signal(signal.SIGINT)
    ps.wait()
    share = {}
    for end, d in (("server", ds), ("client", dc)):
        rep = subprocess.run(["perf", "report", "-i", d, "--no-children", "--sort", "dso", "--stdio"],
                             capture_output=True, text=True).stdout
        m = re.search(r"([\d.]+)%\s+libloopfast-preload\.so", rep)
        total = re.search(r"# Samples: (\S+)", rep)
        share[end] = (float(m.group(1)) if m else 0.0, total.group(1) if total else "?")
    return share


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--perf", action="store_true", help="also the interposer's share of perf samples")
    ap.add_argument("--perf-requests", type=int, default=200000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loopfast-redis-cost-") as tmp:
        servers = {p: start(p, tmp) for p in ("fast", "unix")}
        try:
            for p in ("fast", "unix"):
                srv, port, sock = servers[p]
                s, c, ok = strace_counts(p, srv, port, sock, a.requests, tmp)
                for end, calls in (("server", s), ("client", c)):
                    per = {k: v / a.requests for k, v in sorted(calls.items(), key=lambda kv: -kv[1])
                           if v / a.requests >= 0.01}
                    total = sum(calls.values()) / a.requests
                    print(f"{p:4s} {end}: {total:.2f} calls/request: "
                          + ", ".join(f"{k} {v:.2f}" for k, v in per.items()))
                if not ok:
                    print("fast: the kernel did not show the client on the fast path (the figures are not the "
                          "fast path's)")
            if a.perf:
                srv, port, sock = servers["fast"]
                for end, (pct, n) in perf_share(srv, port, sock, a.perf_requests, tmp).items():
                    print(f"fast {end}: libloopfast-preload.so {pct:.2f}% of {n} perf samples")
        finally:
            for srv, _, _ in servers.values():
                srv.send_signal(signal.SIGTERM)
                srv.wait()


if __name__ == "__main__":
    main()
