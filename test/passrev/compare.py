# What the application sees from recvmsg/recvmmsg when a tier socket (and
# plain descriptors) are passed, case by case; run plain and under
# `loopfast run --tier shm` and diff the outputs (they must be equal).
# Each case prints the flags, cmsg lengths and kinds it got, the
# descriptors it gained (leak check) and what the passed socket reads.
import os, socket, sys, array, struct, fcntl, select
sys.path.insert(0, os.path.dirname(__file__))
from common import *

def desc(anc, flags, base):
    out = [f"ctrunc={int(bool(flags & socket.MSG_CTRUNC))}"]
    for lvl, typ, data in anc:
        if typ == socket.SCM_RIGHTS:
            a = array.array("i"); a.frombytes(data[:len(data) - len(data) % 4])
            out.append(f"rights{len(data)}:" + "+".join(kinds(a)) +
                       ":cloexec=" + "".join(str(int(bool(fcntl.fcntl(f, fcntl.F_GETFD) & 1))) for f in a))
        elif typ == socket.SCM_CREDENTIALS:
            out.append(f"creds{len(data)}")
        else:
            out.append(f"other{lvl},{typ},{len(data)}")
    return " ".join(out)

def drain(fd, want):
    s = socket.socket(fileno=os.dup(fd)); s.settimeout(2); got = b""
    try:
        while len(got) < len(want):
            d = s.recv(65536)
            if not d: break
            got += d
    except Exception as e:
        return f"read-{type(e).__name__}"
    finally:
        s.close()
    return "ok" if got == want else f"bad({len(got)},{got[:8]!r})"

def case(name, typ=socket.SOCK_STREAM, room=None, flags=0, passcred=False, extra_pipe=False, mm=False, ntier=1):
    base = fds()
    tiers = [tier_pair() for _ in range(ntier)]
    for i, (c, a) in enumerate(tiers):
        c.sendall(bytes([65 + i]) * 1000)
    u0, u1 = socket.socketpair(socket.AF_UNIX, typ)
    if passcred:
        u1.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    r, w = os.pipe()
    send = [a.fileno() for c, a in tiers]
    if extra_pipe:
        send = [r] + send + [w]
    nfd = len(send)
    room = socket.CMSG_SPACE(4 * nfd) + (socket.CMSG_SPACE(12) if passcred else 0) if room is None else room
    try:
        u0.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", send))])
    except OSError as e:
        print(name, "send", e.strerror); return
    for c, a in tiers: a.close()
    os.close(r); os.close(w)
    before = fds()
    if mm:
        # recvmmsg by ctypes: two messages.
        u0.sendmsg([b"y"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [u0.fileno()]))])
        res = recvmmsg(u1.fileno(), 2, room, flags)
    else:
        if flags & socket.MSG_PEEK:
            m, anc, fl, _ = u1.recvmsg(1, room, flags)
            res = [desc(anc, fl, before)]
            for f in rights(anc): os.close(f)
        m, anc, fl, _ = u1.recvmsg(1, room, flags & ~socket.MSG_PEEK)
        res = [desc(anc, fl, before)] if not (flags & socket.MSG_PEEK) else res + [desc(anc, fl, before)]
        got = rights(anc)
    allg = [f for f in fds() if f not in before]
    hidden = [f for f in allg if "loopfast-shm" in os.readlink(f"/proc/self/fd/{f}")]
    gained = [f for f in allg if f not in hidden]
    reads = []
    socks = [f for f in gained if kinds([f])[0] == "socket"]
    for i, f in enumerate(socks[:ntier]):
        reads.append(drain(f, bytes([65 + i]) * 1000))
    print(name, "|", " / ".join(res), "| gained", "+".join(kinds(gained)), "| reads", ",".join(reads), flush=True)
    for f in gained: os.close(f)
    for c, a in tiers: c.close()
    hidden = [f for f in hidden if f in fds()]
    u0.close(); u1.close()
    leak = [f for f in fds() if f not in base and f not in hidden]
    if leak:
        print(name, "LEAK", kinds(leak), flush=True)

import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint), ("iov", ctypes.POINTER(iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]
class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]

def parse_cmsgs(buf, n):
    out, off = [], 0
    while off + 16 <= n:
        ln, lvl, typ = struct.unpack_from("Qii", buf, off)
        if ln < 16: break
        out.append((lvl, typ, bytes(buf[off + 16: off + min(ln, n - off)])))
        off += (ln + 7) & ~7
    return out

def recvmmsg(fd, n, room, flags):
    v = (mmsghdr * n)(); keep = []
    for i in range(n):
        data = ctypes.create_string_buffer(8); ctl = ctypes.create_string_buffer(max(room, 1))
        io = iovec(ctypes.cast(data, ctypes.c_void_p), 1); keep += [data, ctl, io]
        v[i].hdr.iov = ctypes.pointer(io); v[i].hdr.iovlen = 1
        v[i].hdr.control = ctypes.cast(ctl, ctypes.c_void_p) if room else None; v[i].hdr.controllen = room
    r = libc.recvmmsg(fd, v, n, flags | socket.MSG_DONTWAIT, None)
    out = [f"r={r}"]
    for i in range(max(r, 0)):
        ctl = keep[3 * i + 1]
        out.append(desc(parse_cmsgs(ctl.raw, v[i].hdr.controllen), v[i].hdr.flags, None) + f" cl={v[i].hdr.controllen}")
    return out

case("one")
case("one-exact-cmsglen", room=socket.CMSG_LEN(4))
case("tiny-room", room=8)
case("room-16", room=16)
case("room-20", room=20)
case("pipe+tier+pipe", extra_pipe=True)
case("pipe+tier+pipe-room2", extra_pipe=True, room=socket.CMSG_LEN(8))
case("two-tiers", ntier=2)
case("cloexec", flags=socket.MSG_CMSG_CLOEXEC)
case("passcred", passcred=True)
case("passcred-room-creds-only", passcred=True, room=socket.CMSG_SPACE(12))
case("passcred-room-creds+hdr", passcred=True, room=socket.CMSG_SPACE(12) + 16)
case("passcred-room-32", passcred=True, room=32)
case("passcred-pipes", passcred=True, extra_pipe=True)
case("seqpacket", typ=socket.SOCK_SEQPACKET)
case("dgram", typ=socket.SOCK_DGRAM)
case("dgram-pipes", typ=socket.SOCK_DGRAM, extra_pipe=True, room=socket.CMSG_LEN(8))
case("peek", flags=socket.MSG_PEEK)
case("recvmmsg", mm=True, typ=socket.SOCK_DGRAM)
case("recvmmsg-stream", mm=True)
case("recvmmsg-tiny", mm=True, typ=socket.SOCK_DGRAM, room=20)
