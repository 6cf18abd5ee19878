# The sender at RLIMIT_NOFILE (no descriptor free): plain sendmsg needs
# none and passes the socket; loopfast's needs two (its /proc look, the
# record memfd).
import os, socket, sys, array, resource
sys.path.insert(0, os.path.dirname(__file__))
from common import *
c, a = tier_pair()
u0, u1 = socket.socketpair()
fd = fds()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(fd) + 1, hard))
fill = []
while True:                                   # the holes below the limit filled
    try:
        fill.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        break
try:
    u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
    print("sent")
except OSError as e:
    print("send", e.strerror)
