"""Legitimate clients (run as root under `loopfast run`): N connections to
PORT, CONC at a time, each sending its own random bytes and checking that
exactly they come back. Every socket call has a deadline (--bound seconds;
a client that reaches it is counted as hung). With --phases 2 every client
does one round trip, then all print "phase1 K" and wait for a line on
stdin, then do a second round trip on the same connection. Prints one
JSON line: counts of outcomes ("ok", "mismatch", "hung", or the error's
name), how many were on the fast path (the kernel's own SO_DOMAIN) and the
clients' local ports."""
import argparse
import json
import os
import random
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, echoed, kernel_domain, outcome  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fam", choices=["4", "6"])
ap.add_argument("port", type=int)
ap.add_argument("n", type=int)
ap.add_argument("--conc", type=int, default=20)
ap.add_argument("--bound", type=float, default=10.0)
ap.add_argument("--size", type=int, default=4096)
ap.add_argument("--phases", type=int, default=1)
a = ap.parse_args()

lock = threading.Lock()
outcomes, ports = {}, []
fast = 0
slots = threading.Semaphore(a.conc)
phase1 = threading.Barrier(a.n + 1) if a.phases == 2 else None
go = threading.Event()


def count(what):
    with lock:
        outcomes[what] = outcomes.get(what, 0) + 1


def round_trip(s):
    return echoed(s, os.urandom(random.randint(1, a.size)))


def client():
    s = socket.socket(FAMILY[a.fam])
    s.settimeout(a.bound)

    def first():
        global fast
        s.connect((ADDR[a.fam], a.port))
        with lock:
            ports.append(s.getsockname()[1])
            fast += kernel_domain(s.fileno()) == socket.AF_UNIX
        return round_trip(s)

    said = outcome(first)
    if phase1:
        try:
            phase1.wait(timeout=60)
        except threading.BrokenBarrierError:
            pass
        if not go.wait(timeout=120) and said == "ok":
            said = "never told to go on"
        if said == "ok":
            said = outcome(lambda: round_trip(s))
    s.close()
    count(said)


def run():
    threads = []
    for _ in range(a.n):
        slots.acquire()
        t = threading.Thread(target=lambda: (client(), slots.release()), daemon=True)
        t.start()
        threads.append(t)
    return threads


if phase1:
    slots = threading.Semaphore(a.n)  # every client holds its connection across the phases
threads = run()
if phase1:
    try:
        phase1.wait(timeout=60)
    except threading.BrokenBarrierError:
        pass
    print("phase1", len(ports), flush=True)
    sys.stdin.readline()
    go.set()
for t in threads:
    t.join(timeout=a.bound * 3 + 130)
print(json.dumps({"outcomes": outcomes, "fast": fast, "ports": ports,
                  "unfinished": sum(t.is_alive() for t in threads)}), flush=True)
os._exit(0)
