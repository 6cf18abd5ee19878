"""The supervisor's connect against TCP's (issue 21; docs/supervisor.md,
"Connect semantics"): a static C client (progs/sv_connect.c) makes a
blocking connect to a listener whose accept queue is full (backlog 0 and
one connection queued: its SYN is dropped and retransmitted), interrupted
by a signal with and without SA_RESTART, bounded by SO_SNDTIMEO, refused
when the listener closes, and a non-blocking one (EINPROGRESS, then poll
and SO_ERROR); each run without loopfast and under `loopfast run`, the
answers compared, and the connection's path seen from the kernel at both
ends. Then IPv6: ::1, an IPv4-mapped address and a dual-stack [::]
listener, with the C client and server and with Go."""
import errno
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from conftest import echo_server, lf_cmd, readline, stop
import kernel
from test_supervisor import PROGS, assert_path, end_by_sigterm, go_build, program_pid, reaped  # noqa: F401

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = pytest.mark.extra

SERVER = echo_server("go", backlog=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The static programs: {"svconn": the C client, "svs": the C server},
    and "svgo", the Go programs (CGO_ENABLED=0) once asked for."""
    d = tmp_path_factory.mktemp("svconn")
    for src, out in (("sv_connect.c", "svconn"), ("sv_server.c", "svs")):
        done = subprocess.run(["cc", "-O2", "-static", "-o", str(d / out), str(PROGS / src)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr

    def get(name):
        if name == "svgo" and not (d / name).exists():
            go_build(d, PROGS / "sv_go.go", "svgo")
        return str(d / name)
    return get


@pytest.fixture(scope="module")
def prog(built):
    return built("svconn")


def in_syscall(pid, name):
    nr = {"x86_64": {"connect": 42, "accept": 43}, "aarch64": {"connect": 203, "accept": 202}}[os.uname().machine]
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == str(nr[name])
    except (OSError, IndexError):
        return False


def wait_until(what, cond):
    deadline = time.monotonic() + 20
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def full_server(family="4"):
    """A loopfast server (Python, the preload) listening with backlog 0,
    one plain connection queued: the next SYN is dropped. It accepts once
    told "go" on stdin; "close" closes its listener."""
    srv = subprocess.Popen(lf_cmd([sys.executable, "-c", SERVER, family]), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    port = int(readline(srv))
    filler = socket.create_connection(("::1" if family == "::1" else "127.0.0.1", port), timeout=10)
    return srv, port, filler


def tell(srv, what):
    srv.stdin.write(what + "\n")
    srv.stdin.flush()


# What each mode answers over TCP, line by line (names: without the ports).
WANT = {
    "block": ["connect 0", "names", "echo OK 100000", "waiting"],
    "nb": ["connect Operation now in progress", "poll 0", "names", "echo OK 100000", "waiting"],
    "eintr": ["signal", "connect Interrupted system call", "poll 0", "names", "echo OK 100000", "waiting"],
    "restart": ["signal", "connect 0", "names", "echo OK 100000", "waiting"],
    "sndtimeo": ["connect Operation now in progress", "poll 0", "names", "echo OK 100000", "waiting"],
    "refused": ["connect Connection refused"],
}
# Under the supervisor: where the switch could be made in the held call,
# the fast path; an interrupted or timed-out connect goes on as plain TCP.
FAST = {"block": True, "nb": True, "eintr": False, "restart": False, "sndtimeo": False}


@pytest.mark.parametrize("mode", [m if m == "eintr" else pytest.param(m, marks=pytest.mark.extra)
                                  for m in WANT])
def test_connect_to_full_queue(prog, mode):
    """Each of TCP's blocking-connect behaviours, the same answers without
    loopfast and under the supervisor: the signal's handler runs while the
    connect waits (the server accepts only once it has), EINTR without
    SA_RESTART and the handshake then completing in the background (poll,
    SO_ERROR 0), the connect going on under SA_RESTART, SO_SNDTIMEO's
    EINPROGRESS no sooner than its 500 ms, the listener's close refusing
    the connect; a non-blocking connect's EINPROGRESS then 0 from
    SO_ERROR."""
    said = []
    for lf in (False, True):
        srv, port, filler = full_server()
        try:
            cmd = [prog, str(port), "block" if mode == "refused" else mode]
            t0 = time.monotonic()
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True)
            pid = program_pid(c) if lf else c.pid
            lines = []
            if mode in ("eintr", "restart", "sndtimeo"):
                # The answer comes while the SYN is still dropped: nothing
                # is accepted before it.
                lines += [readline(c, 10).strip() for _ in range(2 if mode == "eintr" else 1)]
                if mode == "sndtimeo":
                    assert time.monotonic() - t0 >= 0.5
            elif mode == "nb" and not lf:
                lines.append(readline(c).strip())
            else:  # blocked in connect (under the supervisor: the call held)
                wait_until("the program never waited in connect", lambda: in_syscall(pid, "connect"))
                time.sleep(0.2)
            tell(srv, "close" if mode == "refused" else "go")
            while not lines or lines[-1] not in ("waiting", "connect Connection refused"):
                lines.append(readline(c).strip())
            said.append([ln.split()[0] if ln.startswith("names") else ln for ln in lines])
            assert said[-1] == WANT[mode], ("under loopfast" if lf else "without loopfast", said)
            if mode != "refused":
                assert_path([pid], kernel.process_tree(srv.pid), port, fast=lf and FAST[mode])
                end_by_sigterm(c)
            else:
                assert c.wait(timeout=30) == 1
        finally:
            filler.close()
            stop(srv)


# ---- IPv6: ::1, an IPv4-mapped address, a dual-stack [::] listener

def ports_out(line):
    """A line with every ":PORT" at the end of a word made ":P"."""
    return re.sub(r":\d+(?=\s|$)", ":P", line.strip())


# make test runs three (::1 C to C, Go to Go, a v4-mapped client of a
# dual-stack C server); make test-extra the other four, for its budget.
CASES = [  # server, its SV_HOST, client, its address (sv_connect's family, Go's SV_HOST)
    ("c", "::1", "c", "6"),
    ("go", "::1", "go", "::1"),
    pytest.param("c", "::", "c", "4", marks=pytest.mark.extra),
    ("c", "::", "c", "4m"),
    pytest.param("c", "::", "go", "::1", marks=pytest.mark.extra),
    pytest.param("go", "::", "c", "6", marks=pytest.mark.extra),
    pytest.param("go", "::", "go", "127.0.0.1", marks=pytest.mark.extra),
]


@pytest.mark.parametrize("server,host,client,addr", CASES)
def test_ipv6(built, server, host, client, addr):
    """A static C or Go server listening on ::1 or on [::] (dual-stack),
    and a static C or Go client connecting to ::1, to 127.0.0.1 or to
    ::ffff:127.0.0.1: the same addresses on both sides (accept's and
    getsockname's on the server, the client's names and SO_DOMAIN) and
    the same bytes without loopfast and under `loopfast run` (both
    supervised); the path seen from the kernel at both ends, fast path
    under loopfast, plain TCP without."""
    said = []
    for lf in (False, True):
        cmd = [built("svs")] if server == "c" else [built("svgo"), "echo-server", "log"]
        srv = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, SV_HOST=host))
        try:
            line = readline(srv).split()
            assert line[0] == "listening", line
            port = int(line[1])
            if client == "c":
                cmd, env = [built("svconn"), str(port), "block", addr], os.environ
            else:
                cmd, env = [built("svgo"), "echo-client", str(port), "100000", "wait"], dict(os.environ, SV_HOST=addr)
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True, env=env)
            lines = []
            while not lines or lines[-1] != "waiting":
                lines.append(readline(c).strip())
            lines.append(readline(srv).strip())
            names = next(ln.split() for ln in lines if ln.startswith("names"))
            # The server's accept names the client's port, its getsockname the port it listens on.
            assert lines[-1].split()[2].rsplit(":", 1)[1] == names[1].rsplit(":", 1)[1], lines
            assert lines[-1].split()[1].rsplit(":", 1)[1] == names[2].rsplit(":", 1)[1] == str(port), lines
            lines = [ports_out(ln) for ln in lines]
            assert_path([program_pid(c) if lf else c.pid], [program_pid(srv) if lf else srv.pid], port, fast=lf)
            said.append(lines)
            end_by_sigterm(c)
        finally:
            stop(srv)
    assert said[0] == said[1], said
    assert said[0][-2:] == ["waiting", said[0][-1]] and said[0][-1].startswith("accepted"), said


def test_accept_rcvtimeo(built, prog):
    """SO_RCVTIMEO on a blocking listener bounds its accept: EAGAIN no
    sooner than its 500 ms, under the supervisor (a parked accept) as over
    TCP; then (the timeout taken off) the next connection is accepted, on
    the fast path under loopfast."""
    said = []
    for lf in (False, True):
        cmd = [built("svs"), "rcvtimeo"]
        srv = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True)
        try:
            t0 = time.monotonic()
            line = readline(srv).split()
            assert line[0] == "listening", line
            port = int(line[1])
            lines = [readline(srv, 10).strip()]
            assert time.monotonic() - t0 >= 0.5
            cmd = [prog, str(port), "block"]
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True)
            while not lines or lines[-1] != "waiting":
                lines.append(readline(c).strip())
            lines.append(readline(srv).split()[0])
            assert_path([program_pid(c) if lf else c.pid], [program_pid(srv) if lf else srv.pid], port, fast=lf)
            said.append([ln.split()[0] if ln.startswith("names") else ln for ln in lines])
            end_by_sigterm(c)
        finally:
            stop(srv)
    want = ["accept Resource temporarily unavailable", "connect 0", "names", "echo OK 100000", "waiting", "accepted"]
    assert said == [want, want]


HOLD = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("connected", flush=True)
sys.stdin.readline()
"""


def test_listener_options_inherited(built):
    """Options a static C server set on its listener (SO_KEEPALIVE,
    SO_RCVTIMEO 300 ms) are its accepted connections' over TCP (the kernel
    copies them), and under the supervisor the claimed Unix socket's too:
    the same getsockopt answers, and a read that times out (EAGAIN) where
    the client sends nothing, on the fast path at both ends."""
    said = []
    for lf in (False, True):
        cmd = [built("svs"), "inherit"]
        srv = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True)
        try:
            line = readline(srv).split()
            assert line[0] == "listening", line
            port = int(line[1])
            cmd = [sys.executable, "-c", HOLD, str(port)]
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert readline(c).strip() == "connected"
            assert readline(srv).split()[0] == "accepted"
            said.append([readline(srv).strip()])
            assert said[-1] == ["inherited keepalive 1 rcvtimeo 300"], ("under loopfast" if lf else "without", said)
            said[-1].append(readline(srv, 10).strip())
            assert_path(kernel.process_tree(c.pid), [program_pid(srv) if lf else srv.pid], port, fast=lf)
            c.stdin.close()
            c.wait(timeout=30)
        finally:
            stop(srv)
    want = ["inherited keepalive 1 rcvtimeo 300", "read Resource temporarily unavailable"]
    assert said == [want, want]


def said_plain_and_under(prog, mode):
    """What the static C client prog prints in mode up to "waiting"
    ("names ..." cut to its first word), over plain TCP and under the
    supervisor, each on its path at both ends (kernel state): [plain,
    supervised]."""
    said = []
    for lf in (False, True):
        srv, port, filler = full_server()
        try:
            tell(srv, "go")
            cmd = [prog, str(port), mode]
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True)
            lines = [readline(c).strip()]
            while lines[-1] != "waiting":
                lines.append(readline(c).strip())
            assert_path([program_pid(c) if lf else c.pid], kernel.process_tree(srv.pid), port, fast=lf)
            said.append([ln.split()[0] if ln.startswith("names") else ln for ln in lines])
            end_by_sigterm(c)
        finally:
            filler.close()
            stop(srv)
    return said


def test_client_options_carried(prog):
    """SO_RCVTIMEO set on a static C client's socket before its connect:
    over TCP a read with nothing sent times out (EAGAIN); under the
    supervisor the Unix socket that replaces the TCP socket carries it,
    so the same, on the fast path at both ends."""
    said = said_plain_and_under(prog, "rcvtimeo")
    want = ["connect 0", "read Resource temporarily unavailable", "names", "echo OK 100000", "waiting"]
    assert said == [want, want]


def test_keepalive_options_as_tcp(prog):
    """TCP_NODELAY, TCP_KEEPIDLE, TCP_KEEPINTVL and TCP_KEEPCNT (Go sets
    them on every connection) set on a static C client's connected
    socket, a valid value twice, then values TCP refuses (0, 40000, an
    optlen of 2), then read back: the same answers under the supervisor,
    which answers a value it saw accepted without the library's
    reference set (supervise_sockopt.c, pure_set), as over TCP; on the
    fast path at both ends. The socket, made with SOCK_CLOEXEC, is still
    close-on-exec once switched (the flag read from the program's fdinfo
    for the ADDFD)."""
    said = said_plain_and_under(prog, "keepopts")
    bad = os.strerror(errno.EINVAL)
    assert said[0][1] == "cloexec 1", said
    assert said[0][2] == f"opt {socket.TCP_NODELAY} set 0 0 0 0 {bad} get 1", said
    assert said[0][3] == f"opt {socket.TCP_KEEPIDLE} set 0 0 {bad} {bad} {bad} get 7", said
    assert said[1] == said[0]


HELLO_SERVER = """
import socket, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
def serve(c):
    time.sleep(0.3)
    c.sendall(b"hello")
    while c.recv(4096): pass
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# The lines each mode prints, and the connections it ends with under the
# supervisor (Unix pairs, TCP pairs; over TCP all are TCP).
EPOLL_MODES = {
    "epollet": (["connect 0"], (0, 1)),
    "epollet-nb": (["connect Operation now in progress"], (0, 1)),
    "epollet-late": (["first connect 0", "connect 0"], (1, 1)),
}


@pytest.mark.parametrize("mode", list(EPOLL_MODES))
def test_epoll_before_connect(prog, mode):
    """A static C client puts its socket in an epoll set (EPOLLET) before
    a blocking or non-blocking connect, then waits on that registration
    alone for the bytes a loopfast server sends 300 ms after its accept:
    it gets them under the supervisor as over TCP (the switch would have
    left the registration on a TCP file that goes away: epoll_wait
    silent, the bytes never told), and its connection stays on plain TCP
    at both ends (docs/supervisor.md, "Options and epoll"). epollet-late:
    the program connected once (on the fast path) before it had any
    epoll, so the supervisor's cache of its epoll fds must be renewed."""
    first, (unix, tcp) = EPOLL_MODES[mode]
    for lf in (False, True):
        srv = subprocess.Popen(lf_cmd([sys.executable, "-c", HELLO_SERVER]), stdout=subprocess.PIPE, text=True)
        try:
            port = int(readline(srv))
            cmd = [prog, str(port), mode]
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True)
            lines = [readline(c, 20).strip()]
            while lines[-1] != "waiting":
                lines.append(readline(c, 20).strip())
            assert lines == first + ["epoll got 'hello'", "waiting"], ("loopfast run" if lf else "TCP", lines)
            pids, spids = [program_pid(c) if lf else c.pid], kernel.process_tree(srv.pid)
            want = (unix, tcp) if lf else (0, unix + tcp)
            wait_until(f"connections {want} (unix, tcp)",
                       lambda: (len(kernel.unix_pairs(pids, spids, port)),
                                len(kernel.tcp_pairs(pids, spids, port))) == want)
            end_by_sigterm(c)
        finally:
            stop(srv)
