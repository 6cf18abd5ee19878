# Helpers for the passrev reproducers: a TCP connection on the tier (when
# run under `loopfast run --tier shm`), a Unix socketpair to pass it on,
# and what the process holds.
import os, socket, array

def tier_pair():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
    c = socket.create_connection(s.getsockname()); a, _ = s.accept()
    c.sendall(b"0"); assert a.recv(1) == b"0"     # the client has the answer: on the tier from here
    a.sendall(b"1"); assert c.recv(1) == b"1"
    s.close()
    return c, a

def fds():
    """The open descriptors, less the one that lists them."""
    out = []
    for x in os.listdir("/proc/self/fd"):
        try:
            os.readlink(f"/proc/self/fd/{x}")
            out.append(int(x))
        except OSError:
            pass
    return sorted(out)

def kinds(fdlist):
    out = []
    for f in fdlist:
        try:
            out.append(os.readlink(f"/proc/self/fd/{f}").split(":")[0].split("[")[0].replace("/memfd", "memfd"))
        except OSError:
            out.append("?")
    return out

def memfds():
    r = []
    for f in fds():
        try:
            l = os.readlink(f"/proc/self/fd/{f}")
        except OSError:
            continue
        if "memfd:" in l:
            r.append(l)
    return r

def rights(cmsgs):
    out = []
    for lvl, typ, data in cmsgs:
        if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            a = array.array("i"); a.frombytes(data[:len(data) - len(data) % 4]); out += list(a)
    return out
