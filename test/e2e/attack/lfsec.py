"""What the security tests' scripts share: loopfast's abstract names (as an
attacker writes them), the kernel's own answer to "what is this socket"
(a raw getsockopt that no interposer sees), and the client ends of TCP
connections to a port as /proc/net/tcp shows them to any uid."""
import ctypes
import os
import select
import socket
import struct

# LF_PROTO_VERSION (src/protocol/protocol.h): the scripts run as another
# uid from a copy, so it is written here; test_security.py checks it
# against the header.
VERSION = 9
ADDR = {"4": "127.0.0.1", "6": "::1"}
FAMILY = {"4": socket.AF_INET, "6": socket.AF_INET6}
# getsockopt's number: the raw call bypasses loopfast's interposed getsockopt,
# which answers SO_DOMAIN as TCP would.
SYS_GETSOCKOPT = {"x86_64": 55, "aarch64": 209}[os.uname().machine]
SYS_ACCEPT4 = {"x86_64": 288, "aarch64": 242}[os.uname().machine]
SYS_DUP3 = {"x86_64": 292, "aarch64": 24}[os.uname().machine]
SYS_CLOSE_RANGE = 436  # the same on every architecture
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def kernel_domain(fd):
    """The socket's real address family (AF_UNIX for a fast-path one)."""
    v, n = ctypes.c_int(0), ctypes.c_uint32(4)
    if _libc.syscall(SYS_GETSOCKOPT, fd, socket.SOL_SOCKET, 39, ctypes.byref(v), ctypes.byref(n)) < 0:
        return -1
    return v.value


def raw(nr, *args):
    """A system call that no interposer sees; -errno on failure."""
    r = _libc.syscall(nr, *[ctypes.c_long(x) for x in args])
    return -ctypes.get_errno() if r < 0 else r


CLAIM_MARK = b"LFclaim%d" % VERSION  # what a server writes on the doorbell before its close (src/fastpath/bell.c)


def claim(c):
    """Claims a doorbell as loopfast's server does: the claim's mark, then
    a close (a FIN, which TCP delivers after the mark)."""
    c.send(CLAIM_MARK)
    c.close()


def rendezvous(fam, ino):
    return b"\0loopfast/%d/L/%s/%d" % (VERSION, fam.encode(), ino)


def client_name(fam, cport, sport, nonce, caddr=None, saddr=None, kind="C"):
    """kind "T": the name of a client that asks for the shared-memory tier."""
    caddr, saddr = caddr or ADDR[fam], saddr or ADDR[fam]
    return b"\0loopfast/%d/%s/%s/%s/%d/%s/%d/%x" % (VERSION, kind.encode(), fam.encode(), caddr.encode(), cport,
                                                  saddr.encode(), sport, nonce)


def fds_in(ancillary):
    """How many descriptors a recvmsg's ancillary data carried (and closes them)."""
    n = 0
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            k = len(data) // 4
            for i in range(k):
                try:
                    os.close(int.from_bytes(data[4 * i:4 * i + 4], "little"))
                except OSError:
                    pass
            n += k
    return n


def read_exactly(s, n):
    """n bytes from s; EOFError if the peer ends first."""
    got = b""
    while len(got) < n:
        d = s.recv(n - len(got))
        if not d:
            raise EOFError()
        got += d
    return got


def echoed(s, data):
    """Sends data on s and reads as many bytes back: "ok" if they are the
    same, else "mismatch"."""
    s.sendall(data)
    return "ok" if read_exactly(s, len(data)) == data else "mismatch"


def outcome(step):
    """step()'s answer, or what stopped it as the attack scripts count it:
    "hung" (a timeout), "EOF" or the OSError's class name."""
    try:
        return step()
    except socket.timeout:
        return "hung"
    except EOFError:
        return "EOF"
    except OSError as e:
        return type(e).__name__


def tcp_clients(fam, sport):
    """Local ports of the TCP sockets whose remote port is sport (any state
    but TIME_WAIT): what a watcher of another uid learns of the server's
    clients. Asked of inet_diag, as fast as an attacker can: with the
    kernel leaving out TIME_WAIT (after a benchmark, tens of thousands of
    sockets, and /proc/net/tcp took half a second to read)."""
    sk = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)  # NETLINK_SOCK_DIAG
    try:
        states = 0xFFF & ~(1 << 6)  # every TCP state but TIME_WAIT
        req = struct.pack("=BBBBI48x", FAMILY[fam], socket.IPPROTO_TCP, 0, 0, states)
        sk.send(struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0) + req)  # SOCK_DIAG_BY_FAMILY, REQUEST|DUMP
        ports = set()
        while True:
            buf = sk.recv(1 << 16)
            off = 0
            while off + 16 <= len(buf):
                length, kind = struct.unpack_from("=IH", buf, off)
                if kind in (2, 3):  # NLMSG_ERROR, NLMSG_DONE
                    return ports
                lport, rport = struct.unpack_from(">HH", buf, off + 16 + 4)  # inet_diag_msg.id
                if rport == sport:
                    ports.add(lport)
                off += (length + 3) & ~3
    finally:
        sk.close()


def reap_flood(pending):
    """Of the non-blocking connects in pending ({fd: socket}), those done
    now: each is reset (SO_LINGER 0) and closed. Returns how many had
    connected."""
    if not pending:
        return 0
    p, n = select.poll(), 0
    for fd in pending:
        p.register(fd, select.POLLOUT)
    for fd, _ in p.poll(0):
        t = pending.pop(fd)
        n += t.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        t.close()
    return n
