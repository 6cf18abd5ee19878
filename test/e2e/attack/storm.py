"""The stress test's clients (run as root under `loopfast run`): N
non-blocking connects to PORT, started at random moments within SPREAD
seconds, driven by one epoll loop; each sends its own random bytes and
checks the echo, holds the connection a random moment (up to HOLD
seconds), and does it once more. Every connection has BOUND seconds from
its connect to finish (the bound only catches hangs). Measures its own
descriptor count after one warm-up connection and again after closing
everything. Prints "started" after the warm-up, then one JSON line:
outcomes ("ok", "mismatch", "hung", or the error's name), how many were on
the fast path, the two descriptor counts and the local ports of the
connections that hung."""
import argparse
import errno
import json
import os
import random
import selectors
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, kernel_domain  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fam", choices=["4", "6"])
ap.add_argument("port", type=int)
ap.add_argument("n", type=int)
ap.add_argument("--bound", type=float, default=5.0)
ap.add_argument("--spread", type=float, default=0.0)
ap.add_argument("--hold", type=float, default=0.0)
a = ap.parse_args()
addr = (ADDR[a.fam], a.port)


def fds():
    return len(os.listdir("/proc/self/fd"))


w = socket.create_connection(addr, timeout=a.bound)  # warm-up: loopfast's own descriptors exist from here on
w.sendall(b"x")
w.recv(1)
w.close()
before = fds()
print("started", flush=True)

sel = selectors.DefaultSelector()
t0 = time.monotonic()
todo = sorted(t0 + random.uniform(0, a.spread) for _ in range(a.n))
conns, outcomes, fast, hung = {}, {}, 0, []


def finish(s, outcome):
    try:
        sel.unregister(s)
    except (KeyError, ValueError):
        pass
    if outcome == "hung":
        try:
            hung.append(s.getsockname()[1])
        except OSError:
            pass
    s.close()
    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    del conns[s]


def start():
    s = socket.socket(FAMILY[a.fam])
    s.setblocking(False)
    err = s.connect_ex(addr)
    conns[s] = {"deadline": time.monotonic() + a.bound, "state": "connecting", "round": 0}
    sel.register(s, selectors.EVENT_WRITE)
    if err not in (0, errno.EINPROGRESS):
        finish(s, errno.errorcode.get(err, str(err)))


def send(s, c):
    c["data"], c["got"] = os.urandom(random.randint(1, 2000)), b""
    s.send(c["data"])  # at most 2000 bytes: fits in any socket buffer
    c["state"] = "reading"
    sel.modify(s, selectors.EVENT_READ)


while todo or conns:
    now = time.monotonic()
    while todo and todo[0] <= now:
        todo.pop(0)
        start()
    for s, c in list(conns.items()):
        if c["deadline"] <= now:
            finish(s, "hung")
        elif c["state"] == "holding" and c["until"] <= now:
            try:
                send(s, c)
            except OSError as e:
                finish(s, type(e).__name__)
    for key, ev in sel.select(timeout=0.01):
        s = key.fileobj
        c = conns.get(s)
        if c is None or c["state"] == "holding":
            continue
        try:
            if c["state"] == "connecting":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    finish(s, errno.errorcode.get(err, str(err)))
                    continue
                fast += kernel_domain(s.fileno()) == socket.AF_UNIX
                send(s, c)
                continue
            d = s.recv(65536)
            if not d:
                finish(s, "EOF")
                continue
            c["got"] += d
            if len(c["got"]) >= len(c["data"]):
                if c["got"] != c["data"]:
                    finish(s, "mismatch")
                elif c["round"] == 1:
                    finish(s, "ok")
                else:
                    c["round"], c["state"], c["until"] = 1, "holding", time.monotonic() + random.uniform(0, a.hold)
                    sel.modify(s, selectors.EVENT_READ)
        except BlockingIOError:
            pass
        except OSError as e:
            finish(s, type(e).__name__)
sel.close()
after = fds()
print(json.dumps({"outcomes": outcomes, "fast": fast, "fds_before": before, "fds_after": after, "hung_ports": hung}),
      flush=True)
