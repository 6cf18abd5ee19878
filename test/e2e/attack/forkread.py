"""A client that forks right after its connect (run as root, under
`loopfast run` or not, both ends in this process): the server sends "one",
which the child reads, and, once the child has exited, "two", which the
parent reads. After a fork both processes hold the client's connection,
and on the fast path both hold its bell until they see the claim. Prints
one JSON line: the path after connect and what each read."""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, kernel_domain  # noqa: E402

fam = sys.argv[1]
lst = socket.socket(FAMILY[fam])
lst.bind((ADDR[fam], 0))
lst.listen(8)
c = socket.socket(FAMILY[fam])
c.connect(lst.getsockname()[:2])
c.settimeout(10)  # only catches a hang
path = "fast" if kernel_domain(c.fileno()) == socket.AF_UNIX else "tcp"
r, w = os.pipe()
ready_r, ready_w = os.pipe()  # the child says it is about to wait in recv


def read():
    try:
        return c.recv(100).decode()
    except OSError as e:
        return type(e).__name__


pid = os.fork()
if pid == 0:
    os.write(ready_w, b"r")
    os.write(w, read().encode())
    os._exit(0)
child_done = threading.Event()


def server():
    # The accept (and its claim) comes once the child waits in recv, so
    # that the child's wait sees the claim's mark arrive (a bell that
    # consumed the mark would leave the parent none to see).
    os.read(ready_r, 1)
    time.sleep(0.2)
    s, _ = lst.accept()
    s.sendall(b"one")
    child_done.wait(30)
    s.sendall(b"two")
    s.close()


threading.Thread(target=server, daemon=True).start()
os.waitpid(pid, 0)
child = os.read(r, 100).decode()
child_done.set()
print(json.dumps({"path": path, "child": child, "parent": read()}), flush=True)
