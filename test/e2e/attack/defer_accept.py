"""A listener with TCP_DEFER_ACCEPT set before listen (run as root, under
`loopfast run` or not, both ends in this process): its accept returns a
connection only once data has arrived on it, which a fast-path doorbell
never carries, so loopfast keeps it on plain TCP. The client connects,
sends "x" and reads the echo. Prints one JSON line: the client's path and
what it read."""
import json
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, kernel_domain  # noqa: E402

fam = sys.argv[1]
lst = socket.socket(FAMILY[fam])
lst.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 30)
lst.bind((ADDR[fam], 0))
lst.listen(8)


def server():
    s, _ = lst.accept()
    s.sendall(s.recv(10))
    s.close()


threading.Thread(target=server, daemon=True).start()
c = socket.create_connection(lst.getsockname()[:2], timeout=20)  # the bound only catches a stall
path = "fast" if kernel_domain(c.fileno()) == socket.AF_UNIX else "tcp"
c.sendall(b"x")
try:
    got = c.recv(10).decode()
except socket.timeout:
    got = "hung"
print(json.dumps({"path": path, "read": got}), flush=True)
