"""A blocking read that glibc's set*id broadcast interrupts (run as root,
under `loopfast run` or not, both ends in this process). The client
connects to a listener that has not accepted yet (on the fast path its
claim is not seen, so its read waits on the bell too), and reads with
libc's recv, which C programs see as is (Python's own would retry EINTR).
Another thread waits until the reader is blocked in the kernel, then calls
setresgid, which makes glibc signal every thread (SIGSETXID, a handler
with SA_RESTART: the read must go on), and only then accepts and sends
"hi". Prints one JSON line: what the read returned ("hi", or the error's
name), and whether the reader was blocked in a system call when the
signals were sent."""
import ctypes
import errno
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY  # noqa: E402

fam = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
lst = socket.socket(FAMILY[fam])
lst.bind((ADDR[fam], 0))
lst.listen(8)
c = socket.socket(FAMILY[fam])
c.connect(lst.getsockname()[:2])
reader = threading.get_native_id()
blocked = []


def in_syscall(tid):
    """The thread sleeps inside a system call (not in user space)."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/self/task/{tid}/syscall") as f:
        nr = f.read().split()[0]
    return state == "S" and nr not in ("running", "-1")


def server():
    deadline = time.monotonic() + 10
    while not in_syscall(reader) and time.monotonic() < deadline:
        time.sleep(0.01)
    blocked.append(in_syscall(reader))
    g = os.getgid()
    for _ in range(5):
        os.setresgid(g, g, g)
    s, _ = lst.accept()
    s.sendall(b"hi")
    time.sleep(0.5)
    s.close()


t = threading.Thread(target=server, daemon=True)
t.start()
buf = ctypes.create_string_buffer(16)
n = libc.recv(c.fileno(), buf, 16, 0)
read = buf.raw[:n].decode() if n >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
t.join(timeout=30)
print(json.dumps({"read": read, "blocked": blocked == [True]}), flush=True)
