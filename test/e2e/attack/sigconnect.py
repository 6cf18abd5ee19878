"""connect() interrupted by a signal, and bounded by SO_SNDTIMEO, while the
listener's accept queue is full (its SYN is dropped, so the handshake
waits): run plainly and under `loopfast run`, the transcript must be the
same. Calls libc's connect itself (ctypes) to see its exact errno. Prints
each step; after "waiting" it waits for a line on stdin (the server then
accepts), and each connection must complete and echo. Lines starting
with "path" name the path taken (they differ between the two runs)."""
import ctypes
import errno
import os
import select
import signal
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, kernel_domain  # noqa: E402

fam, port = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
if fam == "4":
    sa = struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(ADDR[fam]) + bytes(8)
else:
    sa = struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", port, 0) + socket.inet_pton(socket.AF_INET6, "::1") \
        + bytes(4)


def connect(s):
    r = libc.connect(s.fileno(), sa, len(sa))
    return "0" if r == 0 else errno.errorcode[ctypes.get_errno()]


signal.signal(signal.SIGALRM, lambda *_: None)  # Python installs it without SA_RESTART
a = socket.socket(FAMILY[fam])
signal.setitimer(signal.ITIMER_REAL, 0.5)
print("blocking connect, SIGALRM after 0.5 s:", connect(a), flush=True)
b = socket.socket(FAMILY[fam])
b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 300000))
print("blocking connect, SO_SNDTIMEO 0.3 s:", connect(b), flush=True)
print("waiting", flush=True)
sys.stdin.readline()
for name, s in (("interrupted", a), ("timed out", b)):
    p = select.poll()
    p.register(s, select.POLLOUT)
    ev = p.poll(20000)
    print(name, "writable:", bool(ev and ev[0][1] & select.POLLOUT), flush=True)
    print(name, "SO_ERROR:", s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), flush=True)
    print(name, "connect once more:", connect(s), flush=True)
    s.settimeout(20)
    data = os.urandom(3000)
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        d = s.recv(len(data) - len(got))
        if not d:
            break
        got += d
    print(name, "echo", "ok" if got == data else "differs", flush=True)
    print("path", name, "fast" if kernel_domain(s.fileno()) == socket.AF_UNIX else "tcp", flush=True)
