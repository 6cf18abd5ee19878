"""Clients whose SYN comes late (run as root, plainly: they follow the
protocol by hand, as loopfast's client does, only slower): each binds its
TCP port, binds its client name and queues its hello on the rendezvous,
then waits. Prints "queued N"; on a line on stdin each connects its TCP
socket with the SYN's mark (MSS 89), lets it go (as the client's switch
does) and talks on its hello: random bytes whose echo it checks within
BOUND seconds. Prints one JSON line of outcomes."""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, client_name, echoed, outcome, rendezvous  # noqa: E402

fam, sport, ino, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
bound = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
clients = []
for _ in range(n):
    t = socket.socket(FAMILY[fam])
    t.bind((ADDR[fam], 0))
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.bind(client_name(fam, t.getsockname()[1], sport, os.fstat(t.fileno()).st_ino))
    u.connect(rendezvous(fam, ino))
    clients.append((t, u))
print("queued", len(clients), flush=True)
sys.stdin.readline()
outcomes = {}
for t, u in clients:
    t.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 89)
    t.settimeout(bound)
    u.settimeout(bound)

    def talk():
        try:
            t.connect((ADDR[fam], sport))
        except ConnectionResetError:
            pass  # established, then reset by the server before connect returned (an accept resets
            #       the connection of a hello it dropped; a claim ends it with its mark and a FIN)
        return echoed(u, os.urandom(500))

    o = outcome(talk)
    t.close()
    outcomes[o] = outcomes.get(o, 0) + 1
print(json.dumps(outcomes), flush=True)
