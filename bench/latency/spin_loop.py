#!/usr/bin/env python3
"""Runs a spin ping-pong RUNS times, each a fresh server and client under
`loopfast run --spin-us US` (started together, the client retrying its
connect until the server listens), and prints each run's median and 99th
percentile round trip, the ratio of its median to the best run's, and what
the client's connection was in the kernel (a Unix socket: the fast path;
a TCP one: plain TCP), as the client finds its socket's inode in
/proc/net/unix.

usage: spin_loop.py [--build DIR] [--runs 10] [--spin-us 100] [--count 20000]
                    [--size 64] [--no-loopfast] [--no-pin]

The client runs on CPU 0 and the server on CPU 1 (as `loopfast bench
latency` pins its ends) unless --no-pin: left to itself, the scheduler
often puts both on one CPU, where a blocking wake-up is cheap and a spin
cannot pay.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cpu):
    return None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))


def one_run(pp, args):
    port = str(free_port())
    pre = [] if args.no_loopfast else [os.path.join(args.build, "loopfast"), "run", "--spin-us",
                                       str(args.spin_us), "--"]
    pin = not args.no_pin and len(os.sched_getaffinity(0) & {0, 1}) == 2
    cli = subprocess.Popen(pre + [pp, "client", port, str(args.count), str(args.size)], stdout=subprocess.PIPE,
                           text=True, preexec_fn=pinned(0 if pin else None))
    srv = subprocess.Popen(pre + [pp, "server", port], preexec_fn=pinned(1 if pin else None))
    out, _ = cli.communicate(timeout=120)
    srv.wait(timeout=30)
    if cli.returncode != 0 or not out.split():
        sys.exit(f"client failed ({cli.returncode})")
    p50, p99, seen = out.split()
    return float(p50), float(p99), seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--spin-us", type=int, default=100)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--no-loopfast", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="leave placement to the scheduler")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        pp = os.path.join(d, "spin_pp")
        src = os.path.join(HERE, "spin_loop", "pp.c")
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", pp, src], check=True)
        runs = [one_run(pp, args) for _ in range(args.runs)]
    best = min(r[0] for r in runs)
    print(f"{'run':>3} {'p50_us':>8} {'p99_us':>8} {'p50/best':>8} client_socket")
    for i, (p50, p99, k) in enumerate(runs, 1):
        print(f"{i:>3} {p50:>8.2f} {p99:>8.2f} {p50 / best:>8.2f} {k}")
    worst = max(r[0] for r in runs) / best
    print(f"worst/best {worst:.2f}: {'all within 2x' if worst <= 2 else 'NOT all within 2x'}")
    return 0 if worst <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
