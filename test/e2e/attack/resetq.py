"""A connection reset before anyone accepted it (run as root, under
`loopfast run` or not, both ends in this process): a client connects to a
listener that accepts nothing; once its connect has returned, HOW resets
the connection without a claim:
  "shutdown"      the server shuts its listener down (the kernel resets
                  every connection still in its accept queue);
  "rogue-reset"   a child of the server accepts it with the raw system call
                  (no loopfast) and closes it with SO_LINGER 0.
Then the client reads (READ: "select" or "epoll", a read once the wait
says it is ready; "blocking", a blocking recv under an alarm). Over TCP
the client reads ECONNRESET; it must never wait for a claim that will not
come. Prints one JSON line: the client's path after connect, and what its
read gave ("ECONNRESET", "EOF", "data", "hung", or the error's name)."""
import ctypes
import errno
import json
import os
import select
import signal
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, SYS_ACCEPT4, kernel_domain, raw  # noqa: E402

SYS_SETSOCKOPT = {"x86_64": 54, "aarch64": 208}[os.uname().machine]
BOUND_S = 10  # only catches a hang

fam, how, read = sys.argv[1], sys.argv[2], sys.argv[3]
lst = socket.socket(FAMILY[fam])
lst.bind((ADDR[fam], 0))
lst.listen(8)
c = socket.socket(FAMILY[fam])
c.connect(lst.getsockname()[:2])
path = "fast" if kernel_domain(c.fileno()) == socket.AF_UNIX else "tcp"

if how == "shutdown":
    lst.shutdown(socket.SHUT_RDWR)
else:
    pid = os.fork()
    if pid == 0:
        fd = raw(SYS_ACCEPT4, lst.fileno(), 0, 0, 0)
        lg = ctypes.create_string_buffer(struct.pack("ii", 1, 0))
        raw(SYS_SETSOCKOPT, fd, socket.SOL_SOCKET, socket.SO_LINGER, ctypes.addressof(lg), 8)
        os._exit(0)
    os.waitpid(pid, 0)


def hung(*_):
    raise TimeoutError


def got():
    try:
        if read in ("select", "epoll"):
            if read == "select":
                ready = select.select([c], [], [], BOUND_S)[0]
            else:
                ep = select.epoll()
                ep.register(c.fileno(), select.EPOLLIN)
                ready = ep.poll(BOUND_S)
            if not ready:
                return "hung"
            d = c.recv(100, socket.MSG_DONTWAIT)
        else:
            signal.signal(signal.SIGALRM, hung)
            signal.alarm(BOUND_S)
            d = c.recv(100)
            signal.alarm(0)
        return "data" if d else "EOF"
    except TimeoutError:
        return "hung"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


print(json.dumps({"path": path, "read": got()}), flush=True)
