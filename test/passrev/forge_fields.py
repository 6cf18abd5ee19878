# A forger passes its own tier socket and ring honestly paired, but with
# hostile fields (count 2^64-1, owed 2^32-1, the other end's kind, every
# flag). The victim must not crash or hang: it reads and writes with 2 s
# timeouts and reports. Run: python3 forge_fields.py build/loopfast
# (passrev's descriptor order: the record first; on branch pass put it last)
import os, socket, sys, struct, subprocess, textwrap
LOOPFAST = sys.argv[1]
victim = textwrap.dedent("""
    import array, socket, sys
    u = socket.socket(socket.AF_UNIX); u.bind(sys.argv[1]); u.listen(8)
    print("ready", flush=True)
    for i in range(int(sys.argv[2])):
        k, _ = u.accept()
        m, anc, fl, _ = k.recvmsg(1, socket.CMSG_SPACE(12))
        fds = array.array("i"); fds.frombytes(anc[0][2]) if anc else None
        res = [f"n={len(fds)}"]
        for f in fds[-1:]:                  # the socket: sent last
            s = socket.socket(fileno=f); s.settimeout(2)
            try: res.append("r" + repr(s.recv(100)[:12]))
            except Exception as e: res.append("r-" + type(e).__name__)
            try: s.sendall(b"V" * 300000); res.append("w-ok")
            except Exception as e: res.append("w-" + type(e).__name__)
            s.close()
        print(*res, flush=True)
""")
forger = textwrap.dedent("""
    import ctypes, fcntl, os, socket, struct, sys
    path, case = sys.argv[1], sys.argv[2]
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
    c = socket.create_connection(l.getsockname()); a, _ = l.accept()
    c.sendall(b"0"); assert a.recv(1) == b"0"; a.sendall(b"1"); assert c.recv(1) == b"1"
    c.sendall(b"mine")
    def link(f):
        try: return os.readlink(f"/proc/self/fd/{f}")
        except OSError: return ""
    ring = next(int(f) for f in os.listdir("/proc/self/fd") if link(f).startswith("/memfd:loopfast-shm"))
    count, owed, kind, flags = {"count": (2**64 - 1, 0, "s", 8), "owed": (0, 2**32 - 1, "s", 8),
                                "kind": (0, 0, "c", 8), "flags": (0, 0, "s", 15)}[case]
    rec = struct.pack("<QQQIiIBBH", os.fstat(a.fileno()).st_ino, os.fstat(ring).st_ino, count, 0, 1, owed, ord(kind), flags, 0)
    f = os.memfd_create("loopfast-pass", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(f, struct.pack("<QII", 0x3173736150664c, 1, 1) + rec); fcntl.fcntl(f, 1033, 15)
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_char_p), ("len", ctypes.c_size_t)]
    class msghdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint), ("iov", ctypes.POINTER(iovec)),
                    ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]
    body = struct.pack("3i", f, ring, a.fileno())
    cm = ctypes.create_string_buffer(socket.CMSG_SPACE(len(body)))
    struct.pack_into("Qii", cm, 0, socket.CMSG_LEN(len(body)), socket.SOL_SOCKET, socket.SCM_RIGHTS)
    ctypes.memmove(ctypes.addressof(cm) + 16, body, len(body))
    io = iovec(b"x", 1)
    u = socket.socket(socket.AF_UNIX); u.connect(path)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(46, u.fileno(), ctypes.byref(msghdr(None, 0, ctypes.pointer(io), 1, ctypes.addressof(cm), len(cm), 0)), 0) == 1
    c.settimeout(3); got = 0
    try:
        while got < 300000:
            d = c.recv(65536)
            if not d: break
            got += len(d)
    except Exception:
        pass
    print(case, "forger-got", got, flush=True)
""")
cases = ["count", "owed", "kind", "flags"]
path = f"/tmp/passrev-fields-{os.getpid()}"
V = subprocess.Popen([LOOPFAST, "run", "--tier", "shm", "--", sys.executable, "-c", victim, path, str(len(cases))],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert V.stdout.readline().strip() == "ready"
for c in cases:
    F = subprocess.run([LOOPFAST, "run", "--tier", "shm", "--", sys.executable, "-c", forger, path, c],
                       capture_output=True, text=True, timeout=30)
    print(F.stdout.strip() or F.stderr[-200:], "| victim:", V.stdout.readline().strip())
print("victim exit", V.wait(timeout=20), V.stderr.read()[-300:])
