# The sender's own control with several messages: SCM_CREDENTIALS, then
# two SCM_RIGHTS (a pipe; the tier socket), as the kernel joins them in
# one array. The receiver (SO_PASSCRED) must get the same as plain.
import os, socket, sys, array, struct
sys.path.insert(0, os.path.dirname(__file__))
from common import *
c, a = tier_pair()
c.sendall(b"Z" * 5000)
u0, u1 = socket.socketpair()
u1.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
r, w = os.pipe()
creds = struct.pack("iII", os.getpid(), os.getuid(), os.getgid())
u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds),
                    (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [r])),
                    (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
a.close(); os.close(r)
m, anc, fl, _ = u1.recvmsg(1, 256)
print("flags", fl, [(l, t, len(d)) for l, t, d in anc], kinds(rights(anc)))
s = socket.socket(fileno=rights(anc)[1]); got = b""
s.settimeout(2)
while len(got) < 5000:
    got += s.recv(5000)
print("read-ok" if got == b"Z" * 5000 else "read-bad")
os.write(w, b"p"); print("pipe", os.read(rights(anc)[0], 1))
