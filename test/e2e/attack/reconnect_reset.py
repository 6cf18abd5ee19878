"""A pending connect whose connection is reset before anyone claimed it
(run as root, under `loopfast run` or not, both ends in this process): the
listener's accept queue is full, so the client's non-blocking connect
stays in progress (its SYN is dropped, then sent again); a process without
loopfast (raw system calls) accepts the connection and closes it with a
reset. The application then finishes its connect as TCP allows: HOW is
"connect" (connect again) or "poll" (poll, then SO_ERROR). Then it reads.
Prints one JSON line: what finishing the connect said and what the read
gave (the bound only catches a hang)."""
import ctypes
import errno
import json
import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, SYS_ACCEPT4, raw  # noqa: E402

SYS_SETSOCKOPT = {"x86_64": 54, "aarch64": 208}[os.uname().machine]
SYS_CLOSE = {"x86_64": 3, "aarch64": 57}[os.uname().machine]
fam, how = sys.argv[1], sys.argv[2]
addr = (ADDR[fam], 0)
lst = socket.socket(FAMILY[fam])
lst.bind(addr)
lst.listen(0)
addr = lst.getsockname()[:2]
fill = socket.create_connection(addr)  # a backlog of 0 holds one: the queue is full
c = socket.socket(FAMILY[fam])
c.setblocking(False)
assert c.connect_ex(addr) == errno.EINPROGRESS
raw(SYS_CLOSE, raw(SYS_ACCEPT4, lst.fileno(), 0, 0, 0))  # room again: the SYN is sent again within seconds
x = raw(SYS_ACCEPT4, lst.fileno(), 0, 0, 0)  # blocks until then
lg = ctypes.create_string_buffer(struct.pack("ii", 1, 0))
raw(SYS_SETSOCKOPT, x, socket.SOL_SOCKET, socket.SO_LINGER, ctypes.addressof(lg), 8)
raw(SYS_CLOSE, x)
time.sleep(0.2)  # the reset crosses loopback (not a wait for a result)


def name(e):
    return errno.errorcode.get(e, str(e))


if how == "connect":
    finished = name(c.connect_ex(addr))
else:
    select.select([], [c], [], 10)
    finished = name(c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
c.settimeout(10)
try:
    d = c.recv(100)
    got = "data" if d else "EOF"
except socket.timeout:
    got = "hung"
except OSError as e:
    got = name(e.errno)
print(json.dumps({"finished": finished, "read": got}), flush=True)
