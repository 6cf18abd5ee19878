# The stream after a pass to a forked child (the usual hand-off: the
# sender closes its copy at once). Run plain and under `loopfast run
# --tier shm` and diff: the lines must be equal.
#   handoff  the server end, 60,000 bytes in the ring at pass time
#   client   the client end passed instead
#   late     the server end passed before the client read the answer
#            (its first bytes on the Unix stream, the rest on the ring)
#   oob      an urgent byte sent before the pass
#   edge     the sender's epoll ET saw the bytes before the pass
import os, socket, sys, array, select, time
sys.path.insert(0, os.path.dirname(__file__))
from common import *

def recvall(s, n):
    got = b""
    while len(got) < n:
        d = s.recv(n - len(got))
        if not d: break
        got += d
    return got

def run(mode):
    out = [mode]
    u0, u1 = socket.socketpair()
    if mode == "late":
        lst = socket.socket(); lst.bind(("127.0.0.1", 0)); lst.listen(8)
        c = socket.create_connection(lst.getsockname()); a, _ = lst.accept(); lst.close()
        c.sendall(b"E" * 5000)
    else:
        c, a = tier_pair()
    give, keep = (c, a) if mode == "client" else (a, c)
    pre = b"".join(bytes([i % 251]) for i in range(60000)) if mode != "late" else b"E" * 5000
    if mode != "late":
        keep.sendall(pre)
    if mode == "oob":
        keep.send(b"!", socket.MSG_OOB)
    ep = None
    if mode == "edge":
        ep = select.epoll(); ep.register(a, select.EPOLLIN | select.EPOLLET)
        out.append(f"sender-ev={len(ep.poll(1))}")
    pid = os.fork()
    if pid == 0:
        u0.close(); keep.close()
        if ep: ep.close()
        m, anc, fl, _ = u1.recvmsg(1, socket.CMSG_SPACE(4))
        s = socket.socket(fileno=rights(anc)[0]); res = []
        if mode == "edge":
            e2 = select.epoll(); e2.register(s, select.EPOLLIN | select.EPOLLET)
            res.append(f"recv-ev={len(e2.poll(2))}")
        got = recvall(s, len(pre))
        res.append("pre-ok" if got == pre else f"pre-bad({len(got)})")
        if mode == "oob":
            time.sleep(0.3)
            try:
                res.append("oob=" + repr(s.recv(1, socket.MSG_OOB | socket.MSG_DONTWAIT)))
            except Exception as e:
                res.append("oob-" + type(e).__name__)
        s.sendall(b"k")
        more = recvall(s, 5000)
        res.append("more-ok" if more == b"R" * 5000 else f"more-bad({len(more)},{more[:6]!r})")
        s.sendall(b"B" * 70000)
        u1.sendall(b"done"); u1.recv(1)      # the parent checks the peer saw no end while we hold it
        s.close()
        print(" ".join(res), flush=True)
        os._exit(0)
    u1.close()
    give.sendall(b"") if False else None
    try:
        u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [give.fileno()]))])
    except OSError as e:
        out.append("send-" + e.strerror); print(*out); os.kill(pid, 9); os.waitpid(pid, 0); return
    give.close()                              # the hand-off: the sender's copy gone
    assert keep.recv(1) == b"k"
    keep.sendall(b"R" * 5000)
    back = recvall(keep, 70000)
    out.append("back-ok" if back == b"B" * 70000 else f"back-bad({len(back)})")
    assert u0.recv(4) == b"done"
    keep.settimeout(0.5)
    try:
        d = keep.recv(1)
        out.append("EARLY-EOF" if d == b"" else f"stray{d!r}")
    except socket.timeout:
        out.append("no-end-while-held")
    except ConnectionResetError:
        out.append("RESET-while-held")
    keep.settimeout(5)
    u0.sendall(b"g")
    try:
        out.append("eof-after" if keep.recv(1) == b"" else "data-after")
    except Exception as e:
        out.append("after-" + type(e).__name__)
    os.waitpid(pid, 0)
    print(*out, flush=True)

for m in sys.argv[1:] or ["handoff", "client", "late", "oob", "edge"]:
    run(m)
