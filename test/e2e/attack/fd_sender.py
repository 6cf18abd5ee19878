"""A client of another uid (run as the attacker) that sends descriptors
(SCM_RIGHTS: eight of its own sockets) along with its bytes to a server,
as a Unix socket allows and TCP does not. Without INO it runs under
loopfast (its sendmsg goes through loopfast's, which refuses descriptors as
TCP's does); with the listener's inode INO it follows the protocol by hand
(its TCP port, its hello on the rendezvous, the SYN's mark, its TCP socket
kept), so that its sendmsg on the hello reaches the kernel as an attacker's
would. Prints one JSON line: whether it was on the fast path, what its
sendmsg said, and whether its bytes came back."""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, client_name, kernel_domain, rendezvous  # noqa: E402

fam, port = sys.argv[1], int(sys.argv[2])
if len(sys.argv) > 3:
    t = socket.socket(FAMILY[fam])
    t.bind((ADDR[fam], 0))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(client_name(fam, t.getsockname()[1], port, os.getpid()))
    s.connect(rendezvous(fam, int(sys.argv[3])))
    t.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 89)
    try:
        t.connect((ADDR[fam], port))
    except ConnectionResetError:
        pass  # established, then reset by the server before connect returned (an accept resets
        #       the connection of a hello it dropped; a claim ends it with its mark and a FIN)
    s.settimeout(10)
else:
    s = socket.create_connection((ADDR[fam], port), timeout=10)
fast = kernel_domain(s.fileno()) == socket.AF_UNIX
mine = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(8)]
data = b"here are some descriptors"
try:
    s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, b"".join(m.fileno().to_bytes(4, "little") for m in mine))])
    sent = "sent"
except OSError as e:
    sent = type(e).__name__
    s.sendall(data)
got = b""
while len(got) < len(data):
    d = s.recv(100)
    if not d:
        break
    got += d
print(json.dumps({"fast": fast, "sendmsg": sent, "echo": got == data}), flush=True)
