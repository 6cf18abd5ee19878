# A tier socket received by a process whose RLIMIT_NOFILE leaves room for
# `free` more descriptors (argv[1], default 1): the application's one
# descriptor fits, the extra memfds that loopfast adds do not.
# Plain (no loopfast): the app gets the socket, no MSG_CTRUNC, and reads
# the peer's bytes. Run: python3 fd_exhaustion.py [free]  and
# loopfast run --tier shm -- python3 fd_exhaustion.py [free]
import os, socket, resource, sys, array
sys.path.insert(0, os.path.dirname(__file__))
from common import *

free = int(sys.argv[1]) if len(sys.argv) > 1 else 1
c, a = tier_pair()
c.sendall(b"A" * 100)                 # in the ring at pass time (tier) / kernel queue (plain)
u0, u1 = socket.socketpair()
pid = os.fork()
if pid == 0:                          # the receiver
    c.close(); a.close(); u0.close()
    before = fds()
    slots = [i for i in range(max(before) + 64) if i not in before]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (slots[free - 1] + 1, hard))
    msg, anc, flags, _ = u1.recvmsg(1, socket.CMSG_SPACE(4))
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    got = rights(anc)
    new = [f for f in fds() if f not in before]
    print("fds", len(got), "ctrunc", int(bool(flags & socket.MSG_CTRUNC)), "new", kinds(new), flush=True)
    if got:
        s = socket.socket(fileno=got[0]); s.settimeout(2)
        try:
            d = s.recv(200)
            print("read", len(d), "all-A" if d == b"A" * len(d) else repr(d[:24]), flush=True)
        except Exception as e:
            print("read", type(e).__name__, e, flush=True)
    os._exit(0)
u1.close()
try:
    u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
except OSError as e:
    print("send", e)
a.close()
os.waitpid(pid, 0)
