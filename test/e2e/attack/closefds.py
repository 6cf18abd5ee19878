"""A client (run as root under `loopfast run`) that wrecks its descriptor
table between two connects, as daemons and sandboxes do: HOW is
"close_range" (the raw system call closes every fd >= 3, loopfast's own
included), "dup2" (libc's dup2 of /dev/null over every fd >= 3, then close
them all), or "dup3-raw" (the same with raw system calls, which loopfast
cannot see, then close_range). Its descriptor limit is lowered first so
that loopfast's hidden descriptors are within reach. Each connect must
echo within BOUND seconds; prints one JSON line (outcome and path of each)."""
import json
import os
import resource
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, SYS_CLOSE_RANGE, SYS_DUP3, kernel_domain, raw  # noqa: E402

fam, port, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def attempt():
    s = socket.socket(FAMILY[fam])
    s.settimeout(10)
    try:
        s.connect((ADDR[fam], port))
        path = "fast" if kernel_domain(s.fileno()) == socket.AF_UNIX else "tcp"
        data = os.urandom(2000)
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            d = s.recv(len(data) - len(got))
            if not d:
                return "EOF", path
            got += d
        return ("ok" if got == data else "mismatch"), path
    except socket.timeout:
        return "hung", None
    except OSError as e:
        return type(e).__name__, None
    finally:
        s.close()


first = attempt()
if how == "close_range":
    assert raw(SYS_CLOSE_RANGE, 3, 0xFFFFFFFF, 0) == 0
elif how == "dup2":
    n = os.open("/dev/null", os.O_RDONLY)
    for fd in range(3, 1024):
        if fd != n:
            os.dup2(n, fd)
    for fd in range(3, 1024):
        try:
            os.close(fd)
        except OSError:
            pass
else:
    n = os.open("/dev/null", os.O_RDONLY)
    for fd in range(3, 1024):
        if fd != n:
            raw(SYS_DUP3, n, fd, 0)
    assert raw(SYS_CLOSE_RANGE, 3, 0xFFFFFFFF, 0) == 0
second = attempt()
print(json.dumps({"first": first, "second": second}), flush=True)
