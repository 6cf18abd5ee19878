# A passed tier socket that does not fit the receiver's control buffer
# (room 16: MSG_CTRUNC, no descriptor) after the sender closed its copy:
# the end is gone, so the peer reads the end (EOF), as over plain TCP;
# and writes by the peer before that do not block forever.
import os, socket, sys, array
sys.path.insert(0, os.path.dirname(__file__))
from common import *
c, a = tier_pair()
c.sendall(b"Q" * 1000)                    # unread bytes in the end that goes
u0, u1 = socket.socketpair()
u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
a.close()
m, anc, fl, _ = u1.recvmsg(1, 16)
out = [f"ctrunc={int(bool(fl & socket.MSG_CTRUNC))}", f"anc={len(anc)}"]
c.settimeout(3)
try:
    d = c.recv(10); out.append("EOF" if d == b"" else f"data{d!r}")
except socket.timeout:
    out.append("NO-END(timeout)")
except ConnectionResetError:
    out.append("reset")
print(*out)
