# What the received tier socket says of itself (family, type, names,
# TCP options) in the receiving process, against plain TCP.
import os, socket, sys, array
sys.path.insert(0, os.path.dirname(__file__))
from common import *
c, a = tier_pair()
u0, u1 = socket.socketpair()
pid = os.fork()
if pid == 0:
    u0.close(); c.close(); a.close()
    m, anc, fl, _ = u1.recvmsg(1, socket.CMSG_SPACE(4))
    s = socket.socket(fileno=rights(anc)[0])
    print("family", s.family.name, "type", s.type.name, "peer-port-matches", s.getpeername()[1] == int(sys.argv[1]) if len(sys.argv) > 1 else s.getpeername()[0],
          "nodelay", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) >= 0, flush=True)
    os._exit(0)
u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
os.waitpid(pid, 0)
print("expected peer", a.getpeername(), "sock", a.getsockname())
