"""The stress test's clients (run as root under `loopfast run`): N
non-blocking connects to PORT at once, driven by one epoll loop, each
sending its own random bytes and checking the echo. Every connection has
BOUND seconds from its connect to finish (the bound only catches hangs).
Measures its own descriptor count after one warm-up connection and again
after closing everything. Prints one JSON line: outcomes ("ok",
"mismatch", "hung", or the error's name), how many were on the fast path,
and the two descriptor counts."""
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

fam, port, n, bound = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
addr = (ADDR[fam], port)


def fds():
    return len(os.listdir("/proc/self/fd"))


w = socket.create_connection(addr, timeout=bound)  # warm-up: loopfast's own descriptors exist from here on
w.sendall(b"x")
w.recv(1)
w.close()
before = fds()
print("started", flush=True)

sel = selectors.DefaultSelector()
conns, outcomes, fast, hung = {}, {}, 0, []


def finish(s, outcome):
    sel.unregister(s)
    s.close()
    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    del conns[s]


for _ in range(n):
    s = socket.socket(FAMILY[fam])
    s.setblocking(False)
    err = s.connect_ex(addr)
    c = {"data": os.urandom(random.randint(1, 2000)), "got": b"", "deadline": time.monotonic() + bound,
         "sent": False}
    conns[s] = c
    if err not in (0, errno.EINPROGRESS):
        sel.register(s, selectors.EVENT_WRITE)
        finish(s, errno.errorcode.get(err, str(err)))
        continue
    sel.register(s, selectors.EVENT_WRITE)

while conns:
    now = time.monotonic()
    for s in [s for s, c in conns.items() if c["deadline"] <= now]:
        try:
            hung.append(s.getsockname()[1])
        except OSError:
            pass
        finish(s, "hung")
    if not conns:
        break
    for key, ev in sel.select(timeout=0.1):
        s, c = key.fileobj, conns.get(key.fileobj)
        if c is None:
            continue
        try:
            if not c["sent"]:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    finish(s, errno.errorcode.get(err, str(err)))
                    continue
                fast += kernel_domain(s.fileno()) == socket.AF_UNIX
                s.send(c["data"])  # at most 2000 bytes: fits in any socket buffer
                c["sent"] = True
                sel.modify(s, selectors.EVENT_READ)
                continue
            d = s.recv(65536)
            if not d:
                finish(s, "EOF")
                continue
            c["got"] += d
            if len(c["got"]) >= len(c["data"]):
                finish(s, "ok" if c["got"] == c["data"] else "mismatch")
        except BlockingIOError:
            pass
        except OSError as e:
            finish(s, type(e).__name__)
sel.close()
after = fds()
print(json.dumps({"outcomes": outcomes, "fast": fast, "fds_before": before, "fds_after": after,
                  "hung_ports": hung}), flush=True)
