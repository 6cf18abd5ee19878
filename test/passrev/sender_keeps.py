# The sender keeps its copy after the pass (documented as after a fork):
# the receiver closes its copy at once without reading; the sender's copy
# must go on working both ways (60,000 bytes in the ring at pass time
# included), and the peer must see no end until the sender closes.
# Run plain and under `loopfast run --tier shm`; the lines must be equal.
import os, socket, sys, array
sys.path.insert(0, os.path.dirname(__file__))
from common import *

def recvall(s, n):
    got = b""
    while len(got) < n:
        d = s.recv(n - len(got))
        if not d: break
        got += d
    return got

c, a = tier_pair()
pre = bytes(i % 251 for i in range(60000))
c.sendall(pre)
u0, u1 = socket.socketpair()
pid = os.fork()
if pid == 0:
    u0.close(); c.close(); a.close()
    m, anc, fl, _ = u1.recvmsg(1, socket.CMSG_SPACE(4))
    for f in rights(anc): os.close(f)
    u1.sendall(b"closed")
    os._exit(0)
u1.close()
u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
assert u0.recv(6) == b"closed"; os.waitpid(pid, 0)
out = []
c.settimeout(0.5)
try:
    d = c.recv(1); out.append("EOF" if d == b"" else f"stray{d!r}")
except socket.timeout:
    out.append("no-end")
except ConnectionResetError:
    out.append("RESET")
c.settimeout(5)
got = recvall(a, len(pre)); out.append("pre-ok" if got == pre else f"pre-bad({len(got)})")
a.sendall(b"B" * 100000); got = recvall(c, 100000); out.append("back-ok" if got == b"B" * 100000 else f"back-bad({len(got)})")
c.sendall(b"C" * 100000); got = recvall(a, 100000); out.append("fwd-ok" if got == b"C" * 100000 else f"fwd-bad({len(got)})")
a.close()
out.append("eof" if c.recv(1) == b"" else "data")
print(*out)
