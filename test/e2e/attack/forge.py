"""Forged hellos for one endpoint (run as the attacker): queues COUNT
hellos on the rendezvous, each bound to the client name of VPORT -> SPORT
with a nonce of its own (--write: and writes N bytes on each; --tier: names
of kind T, which ask for the shared-memory tier), prints "queued N", then reads whatever reaches
them until stdin closes and prints one JSON line: hellos queued, bytes and
descriptors received."""
import argparse
import json
import os
import random
import select
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import client_name, fds_in, rendezvous  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fam", choices=["4", "6"])
ap.add_argument("sport", type=int)
ap.add_argument("ino", type=int)
ap.add_argument("vport", type=int)
ap.add_argument("--count", type=int, default=16)
ap.add_argument("--write", type=int, default=0)
ap.add_argument("--tier", action="store_true", help="names of kind T: hellos that ask for the shared-memory tier")
a = ap.parse_args()

hellos = []
for i in range(a.count):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.bind(client_name(a.fam, a.vport, a.sport, random.getrandbits(48), kind="T" if a.tier else "C"))
    u.setblocking(False)
    u.connect(rendezvous(a.fam, a.ino))
    if a.write:
        u.setblocking(True)
        u.sendall(b"x" * a.write)
        u.setblocking(False)
    hellos.append(u)
print("queued", len(hellos), flush=True)
got, fds, open_ = 0, 0, set(hellos)
while True:
    r = select.select([sys.stdin] + list(open_), [], [])[0]
    for u in r:
        if u is sys.stdin:
            continue
        try:
            msg, anc, _, _ = u.recvmsg(65536, socket.CMSG_SPACE(4 * 16))
        except OSError:
            msg, anc = b"", []
        got += len(msg)
        fds += fds_in(anc)
        if not msg and not anc:
            open_.discard(u)
    if sys.stdin in r:
        break
print(json.dumps({"queued": len(hellos), "bytes": got, "fds": fds}), flush=True)
