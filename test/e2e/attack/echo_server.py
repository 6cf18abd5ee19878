"""An echo server (run as root under `loopfast run`): binds FAM's loopback
address, prints "PORT INODE PID", optionally waits for a line on stdin
before it listens (--go), then serves every connection in a thread of its
own, in this process or in --workers forked workers that accept on the one
listener (their pids on a line "workers P..."). Serves until stdin closes.
--hold: accepts nothing until a line on stdin (its accept queue fills).
--rogue: the first connection is accepted by a child with the raw system
call (no loopfast: a worker killed between its accept and its claim),
which then exits at once; only then does the server accept.
--recvmsg: reads with recvmsg and room for descriptors (as a server that
wants ancillary data does), counts the descriptors that arrive (closing
them) and, when stdin closes, prints {"fds": N} (single process only).
--close-others: once listening, closes every other descriptor from 3 up
with libc's close(), loopfast's own included, as a daemon that tidies up
after binding does (its descriptor limit is lowered to 1024 first so that
they are within reach).
A line "count" on stdin prints "accepted N bytes M" (the connections
accepted and the bytes read so far; single process only).
--drop USER: once listening, switches to USER (groups, real, effective and
saved ids), as a daemon that listens as root and serves as a service
account does (single process only).
--any: binds the wildcard address (0.0.0.0 or ::) instead of loopback."""
import argparse
import ctypes
import json
import os
import pwd
import resource
import signal
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, SYS_ACCEPT4, fds_in, raw  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fam", choices=["4", "6"])
ap.add_argument("--backlog", type=int, default=128)
ap.add_argument("--workers", type=int, default=0)
ap.add_argument("--go", action="store_true")
ap.add_argument("--hold", action="store_true")
ap.add_argument("--rogue", action="store_true")
ap.add_argument("--recvmsg", action="store_true")
ap.add_argument("--close-others", action="store_true")
ap.add_argument("--drop")
ap.add_argument("--any", action="store_true")
a = ap.parse_args()
if a.close_others:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

s = socket.socket(FAMILY[a.fam])
s.bind((("::" if a.fam == "6" else "0.0.0.0") if a.any else ADDR[a.fam], 0))
print(s.getsockname()[1], os.fstat(s.fileno()).st_ino, os.getpid(), flush=True)
if a.go:
    sys.stdin.readline()
s.listen(a.backlog)
if a.close_others:
    for fd in range(3, 1024):
        if fd != s.fileno():
            try:
                os.close(fd)
            except OSError:
                pass
if a.drop:
    pw = pwd.getpwnam(a.drop)
    os.setgroups([])
    os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
    os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)


received = [0]


def serve(c):
    try:
        while True:
            if a.recvmsg:
                d, anc, _, _ = c.recvmsg(65536, socket.CMSG_SPACE(4 * 64))
                received[0] += fds_in(anc)
            else:
                d = c.recv(65536)
            if not d:
                break
            received_bytes[0] += len(d)
            c.sendall(d)
    except OSError:
        pass
    finally:
        c.close()


accepted, received_bytes = [0], [0]


def accept_loop():
    while True:
        try:
            c, _ = s.accept()
        except OSError:
            continue  # ECONNABORTED and the like: as any server does
        accepted[0] += 1
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if a.workers:
    libc, parent = ctypes.CDLL(None), os.getpid()
    pids = []
    for _ in range(a.workers):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no worker outlives a killed server
            if os.getppid() != parent:
                os._exit(0)
            accept_loop()
        pids.append(pid)
    print("listening", flush=True)
    print("workers", *pids, flush=True)
    sys.stdin.read()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
else:
    print("listening", flush=True)
    if a.rogue:
        pid = os.fork()
        if pid == 0:
            raw(SYS_ACCEPT4, s.fileno(), 0, 0, 0)
            os._exit(0)
        print("rogue", pid, flush=True)
        os.waitpid(pid, 0)
        print("rogue gone", flush=True)
    if a.hold:
        sys.stdin.readline()
    threading.Thread(target=accept_loop, daemon=True).start()
    for line in sys.stdin:
        if line.strip() == "count":
            print("accepted", accepted[0], "bytes", received_bytes[0], flush=True)
    if a.recvmsg:
        print(json.dumps({"fds": received[0]}), flush=True)
os._exit(0)
