"""One client (run as root under `loopfast run`) that binds its port first
(--port: that one; else an ephemeral one), prints it, waits for a line on
stdin, then connects to PORT, sends random bytes and checks the echo
within BOUND seconds (--read: how it waits for it). --abandon: a non-blocking connect instead, closed
after half a second, whatever its state (a client giving up). Prints one
JSON line (outcome, whether the kernel says the socket is a Unix one),
then holds the connection until stdin closes. --drop USER: once its socket
is made and bound, switches to USER (groups, real, effective and saved
ids), as a daemon that prepares its sockets before it drops privileges.
--mapped (with FAM 4): a dual-stack AF_INET6 socket, bound and connecting
to v4-mapped addresses (::ffff:127.0.0.1), as Java's sockets are."""
import argparse
import json
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, kernel_domain, outcome, read_exactly  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fam", choices=["4", "6"])
ap.add_argument("sport", type=int)
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--bound", type=float, default=10.0)
ap.add_argument("--abandon", action="store_true")
ap.add_argument("--drop")
ap.add_argument("--mapped", action="store_true")
ap.add_argument("--read", choices=["poll", "blocking", "peek"], default="poll",
                help="how the echo is waited for: Python's timeout (poll), or a blocking recv, or a blocking "
                     "recv(MSG_PEEK) first, with SIGALRM after BOUND seconds as the watchdog")
a = ap.parse_args()

if a.mapped:
    FAMILY, ADDR = {"4": socket.AF_INET6}, {"4": "::ffff:127.0.0.1"}
s = socket.socket(FAMILY[a.fam])
s.bind((ADDR[a.fam], a.port))
if a.drop:
    import pwd
    pw = pwd.getpwnam(a.drop)
    os.setgroups([])
    os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
    os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
print(s.getsockname()[1], flush=True)
sys.stdin.readline()
if a.abandon:
    s.setblocking(False)
    err = s.connect_ex((ADDR[a.fam], a.sport))
    time.sleep(0.5)
    s.close()
    print(json.dumps({"outcome": "abandoned", "connect": os.strerror(err)}), flush=True)
    sys.stdin.read()
    sys.exit(0)
s.settimeout(a.bound)
fast = False


def talk():
    global fast
    s.connect((ADDR[a.fam], a.sport))
    fast = kernel_domain(s.fileno()) == socket.AF_UNIX
    data = os.urandom(1000)
    s.sendall(data)
    if a.read != "poll":
        def watchdog(*_):
            raise socket.timeout()
        signal.signal(signal.SIGALRM, watchdog)
        signal.alarm(int(a.bound))
        s.settimeout(None)
        if a.read == "peek" and not s.recv(1, socket.MSG_PEEK):
            raise EOFError()
    return "ok" if read_exactly(s, len(data)) == data else "mismatch"


said = outcome(talk)
print(json.dumps({"outcome": said, "fast": fast}), flush=True)
sys.stdin.read()
