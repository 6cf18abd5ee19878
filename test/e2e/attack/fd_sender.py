"""A client of another uid (run as the attacker, under loopfast so that it
gets the fast path) that sends descriptors (SCM_RIGHTS: eight of its own
sockets) along with its bytes to a server, as a Unix socket allows and TCP
does not. Prints one JSON line: whether it was on the fast path, what its
sendmsg said, and whether its bytes came back."""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, kernel_domain  # noqa: E402

fam, port = sys.argv[1], int(sys.argv[2])
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
