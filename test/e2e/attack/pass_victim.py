"""A process on the shared-memory tier (run as root under `loopfast run
--tier shm`) that takes descriptors from whoever connects to its Unix
socket PATH (mode 0777). It holds a tier connection of its own (both ends,
its "secret" in the server end's ring, unread). Prints its TCP port, then
takes N messages, each with room for 8 descriptors; for each it records the
data, the descriptors it got (what each is: a socket, or the file it
links to), MSG_CTRUNC, and for each socket what a read with a 1 s
timeout gives (the bytes, "eof", "timeout" or the error's name), then
closes them. Then reads its own connection (the secret, then a round trip
each way) and makes a new tier connection to itself; prints one JSON
line and waits for a line on stdin."""
import array
import json
import os
import socket
import stat
import sys

path, n = sys.argv[1], int(sys.argv[2])
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(4)
c = socket.create_connection(s.getsockname())
a, _ = s.accept()
c.sendall(b"0")
assert a.recv(1) == b"0"  # the client has the answer: on the tier from here
c.sendall(b"secret")
u = socket.socket(socket.AF_UNIX)
u.bind(path)
os.chmod(path, 0o777)
u.listen(8)
print(s.getsockname()[1], flush=True)


def what(f):
    if stat.S_ISSOCK(os.fstat(f).st_mode):
        return "sock"
    return os.readlink(f"/proc/self/fd/{f}").split(" ")[0]


def read1(f):
    t = socket.socket(fileno=os.dup(f))
    t.settimeout(1)
    try:
        d = t.recv(100)
        return d.decode(errors="replace") if d else "eof"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return type(e).__name__
    finally:
        t.close()


msgs = []
for _ in range(n):
    v, _ = u.accept()
    data, cm, flags, _ = v.recvmsg(16, socket.CMSG_SPACE(8 * 4))
    fds = []
    for level, kind, d in cm:
        fds += list(array.array("i", d[:len(d) - len(d) % 4]))
    kinds = [what(f) for f in fds]
    reads = [read1(f) for f, k in zip(fds, kinds) if k == "sock"]
    for f in fds:
        os.close(f)
    msgs.append({"data": data.decode(), "kinds": kinds, "ctrunc": bool(flags & socket.MSG_CTRUNC), "reads": reads})
    v.close()
own = a.recv(100).decode()
c.sendall(b"after")
own += " " + a.recv(100).decode()
a.sendall(b"back")
own += " " + c.recv(100).decode()
c2 = socket.create_connection(s.getsockname())
a2, _ = s.accept()
c2.sendall(b"new")
own += " " + a2.recv(100).decode()
print(json.dumps({"msgs": msgs, "own": own}), flush=True)
sys.stdin.readline()
