"""The flood (run as the attacker): keeps up to KEEP junk hellos queued on
a listener's rendezvous, refilling as the server drains them, until stdin
closes. Every kind of junk: unnamed connections, names that are not
loopfast's, well-formed client names for random ports (more than its
share of the stash: some are dropped and poisoned), names of the server's
own port with bytes written, with descriptors sent (SCM_RIGHTS), and
connections closed at once. Prints "ready" once KEEP are queued (or the
rendezvous is full), then at the end one JSON line: how many it queued,
how often the rendezvous was full, and the bytes and descriptors that
reached it."""
import argparse
import collections
import json
import os
import random
import select
import subprocess
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import VERSION, client_name, fds_in, rendezvous  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fam", choices=["4", "6"])
ap.add_argument("sport", type=int)
ap.add_argument("ino", type=int)
ap.add_argument("--keep", type=int, default=2000)
ap.add_argument("--rate", type=int, default=0, help="junk hellos a second at most (0: as fast as it can)")
ap.add_argument("--max-queued", type=int, default=0,
                help="add none while the rendezvous' backlog holds this many (sock_diag; 0: no limit)")
a = ap.parse_args()

devnull = os.open("/dev/null", os.O_RDONLY)
held = collections.deque()
stats = {"queued": 0, "full": 0, "bytes": 0, "fds": 0}
kinds = collections.Counter()


def junk():
    kind = random.randrange(6)
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.setblocking(False)
    try:
        if kind == 1:
            u.bind(b"\0loopfast/%d/C/4/not/an/endpoint/%x" % (VERSION, random.getrandbits(40)))
        elif kind >= 2:
            u.bind(client_name(a.fam, random.randint(1, 65535), a.sport if kind >= 3 else random.randint(1, 65535),
                               random.getrandbits(48)))
        u.connect(rendezvous(a.fam, a.ino))
    except BlockingIOError:
        stats["full"] += 1
        u.close()
        return False
    except OSError:
        u.close()
        return True
    stats["queued"] += 1
    kinds[kind] += 1
    try:
        if kind == 3:
            u.send(b"GET / HTTP/1.0\r\n\r\n" * 4)
        elif kind == 4:
            u.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, devnull.to_bytes(4, "little"))])
    except OSError:
        pass
    if kind == 5:
        u.close()
    else:
        held.append(u)
    return True


def backlog():
    """Connections waiting on the rendezvous (ss: sock_diag, any uid may ask)."""
    out = subprocess.run(["ss", "-H", "-x", "-l", "-n"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 5 and f[4] == "@" + rendezvous(a.fam, a.ino)[1:].decode():
            return int(f[2])
    return 0


def reap():
    """Reads what reached the held hellos; drops the oldest over KEEP."""
    while len(held) > a.keep:
        held.popleft().close()
    for u in list(held)[:64]:
        try:
            msg, anc, _, _ = u.recvmsg(4096, socket.CMSG_SPACE(4 * 16))
            stats["bytes"] += len(msg)
            stats["fds"] += fds_in(anc)
        except OSError:
            pass


ready = False
start, made = time.monotonic(), 0
while True:
    room = 256
    if a.max_queued:
        room = min(room, a.max_queued - backlog())
        if room <= 0:
            time.sleep(0.01)
    for _ in range(max(room, 0)):
        if a.rate and made >= a.rate * (time.monotonic() - start):
            time.sleep(0.01)
            break
        made += 1
        if not junk():
            break
    reap()
    if not ready and (len(held) >= a.keep or stats["full"] or (a.rate and made >= a.rate)):
        print("ready", flush=True)
        ready = True
    if ready and select.select([sys.stdin], [], [], 0)[0]:
        break
for u in held:
    try:
        msg, anc, _, _ = u.recvmsg(4096, socket.CMSG_SPACE(4 * 16))
        stats["bytes"] += len(msg)
        stats["fds"] += fds_in(anc)
    except OSError:
        pass
stats["kinds"] = dict(kinds)
print(json.dumps(stats), flush=True)
