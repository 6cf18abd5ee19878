"""Queues exactly COUNT connections (unnamed: the cheapest junk) on a
rendezvous and holds them (run as the attacker); prints "queued N" and
the rendezvous' backlog as sock_diag reports it, then, when stdin closes,
one JSON line with what reached them."""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import fds_in, rendezvous  # noqa: E402

fam, ino, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = []
for _ in range(count):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.setblocking(False)
    u.connect(rendezvous(fam, ino))
    held.append(u)
print("queued", len(held), flush=True)
sys.stdin.read()
got = fds = 0
for u in held:
    try:
        msg, anc, _, _ = u.recvmsg(4096, socket.CMSG_SPACE(64))
        got += len(msg)
        fds += fds_in(anc)
    except OSError:
        pass
print(json.dumps({"bytes": got, "fds": fds}), flush=True)
