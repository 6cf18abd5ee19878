"""Forged records of a passed tier socket (docs/shm.md, "Passing the
socket"), sent by a process of another uid under loopfast (LOOPFAST_TIER
=shm) to a victim's Unix socket PATH. It makes a tier connection of its
own and, for each forgery, sends one message ("x") whose descriptors are
its server end, then what the forgery says, then a record memfd named as
loopfast names them (sealed unless told): the record's header (magic, the
application's count, the records) and records (inodes, stream count,
positions, owed, end, flags). Prints one JSON line: the forgeries sent, and
the inodes of the memfds it maps. MODE "honest": no forgery, its own
tier socket passed by loopfast's sendmsg (the victim's /proc/PID/maps is
not its to read: the connection leaves the tier first), with "mine" in its
ring, then closed; prints what the send gave ("kept": what its connection
still carries if the send failed)."""
import ctypes
import fcntl
import json
import os
import socket
import struct
import sys

path, mode = sys.argv[1], sys.argv[2]
MAGIC, SEALS = 0x3173736150664c, 0x0001 | 0x0002 | 0x0004 | 0x0008
F_ADD_SEALS = 1033
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(4)
c = socket.create_connection(s.getsockname())
a, _ = s.accept()
c.sendall(b"0")
assert a.recv(1) == b"0"  # its own connection, on the tier
c.sendall(b"mine")  # in the ring of the end it passes


def link(f):
    try:
        return os.readlink(f"/proc/self/fd/{f}")
    except OSError:  # listdir's own descriptor
        return ""


ring = next(int(f) for f in os.listdir("/proc/self/fd") if link(f).startswith("/memfd:loopfast-shm"))
ino, mino = os.fstat(a.fileno()).st_ino, os.fstat(ring).st_ino


def rec(sock, mfd, ino=ino, mino=mino, kind=b"s"):
    return struct.pack("<QQQIiIBBH", ino, mino, 0, sock, mfd, 0, kind[0], 8, 0)


def record(napp, recs, n=None, seal=True):
    f = os.memfd_create("loopfast-pass", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(f, struct.pack("<QII", MAGIC, napp, len(recs) if n is None else n) + b"".join(recs))
    if seal:
        fcntl.fcntl(f, F_ADD_SEALS, SEALS)
    return f


def junk_ring():
    f = os.memfd_create("loopfast-shm", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(f, b"\xff" * 4096)
    fcntl.fcntl(f, F_ADD_SEALS, SEALS)
    return [f, record(1, [rec(0, 1, mino=os.fstat(f).st_ino)])]


FORGERIES = {
    "own": lambda: [ring, record(1, [rec(0, 1)])],                           # its own socket and ring, honestly
    "swapped": lambda: [ring, record(1, [rec(1, 0)])],                       # the socket where the memfd is
    "outside": lambda: [ring, record(1, [rec(0, 7)])],                       # a memfd past the array
    "count": lambda: [ring, record(1, [rec(0, 1)], n=128)],                  # more records than it holds
    "dup-of-nothing": lambda: [ring, record(1, [rec(0, -1)])],               # a dup of no socket named before
    "wrong-inode": lambda: [ring, record(1, [rec(0, 1, ino=ino + 1)])],       # another socket's inode
    "junk-ring": junk_ring,                                                  # a sealed memfd that is no ring
    "unsealed": lambda: [ring, record(1, [rec(0, 1)], seal=False)],          # a record that could still change
}
if mode == "honest":  # its own tier socket, by loopfast's sendmsg: the victim's /proc is not its to read
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    try:
        socket.send_fds(u, [b"p"], [a.fileno()])
        res = "passed"
    except OSError as e:
        res = "EOPNOTSUPP" if e.errno == 95 else type(e).__name__
        u.sendall(b"n")
    u.close()
    got = b""
    if res == "passed":
        a.close()  # the usual hand-off
    else:
        c.sendall(b"after")
        while len(got) < 9:
            got += a.recv(100)
    print(json.dumps({"sent": res, "kept": got.decode()}), flush=True)
    sys.stdin.readline()
    sys.exit(0)
libc = ctypes.CDLL(None, use_errno=True)


class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_char_p), ("len", ctypes.c_size_t)]


class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint), ("iov", ctypes.POINTER(iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


def raw_send_fds(u, data, fds):
    """sendmsg as a raw system call (SYS_sendmsg, x86_64): past loopfast's
    own, which would refuse (or rewrite) a message that passes a tier socket."""
    io = iovec(data, len(data))
    body = struct.pack(f"{len(fds)}i", *fds)
    cm = ctypes.create_string_buffer(socket.CMSG_SPACE(len(body)))
    struct.pack_into("Qii", cm, 0, socket.CMSG_LEN(len(body)), socket.SOL_SOCKET, socket.SCM_RIGHTS)
    ctypes.memmove(ctypes.addressof(cm) + 16, body, len(body))
    m = msghdr(None, 0, ctypes.pointer(io), 1, ctypes.addressof(cm), len(cm), 0)
    assert libc.syscall(46, u.fileno(), ctypes.byref(m), 0) == len(data), ctypes.get_errno()


for name, extra in FORGERIES.items():
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    ex = extra()  # the memfds, the record last: sent record first, then the memfds, then the socket (shm_pass.c)
    raw_send_fds(u, b"x", [ex[-1]] + ex[:-1] + [a.fileno()])
    u.close()
maps = set()
for line in open("/proc/self/maps"):
    if "memfd:loopfast-shm" in line:
        maps.add(int(line.split()[4]))
print(json.dumps({"sent": list(FORGERIES), "maps": sorted(maps)}), flush=True)
sys.stdin.readline()
