"""The SOL_LOOPFAST socket option (include/loopfast.h, loopfast(3)) and
`loopfast run --per-socket`: what the option answers on a listener, an
unconnected socket and a connected one, its errors, opting out, the
kernel's ENOPROTOOPT without loopfast, and Ctrl-C on a blocking recv that
waits on the fast path. Every path is proved from the kernel, both ends."""
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import kernel
from conftest import LOOPFAST, readline, stop, wait_paths

PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs")
CASES = [sys.executable, os.path.join(PROGS, "sockopt_cases.py")]
PEER = [sys.executable, os.path.join(PROGS, "sockopt_peer.py")]
PER_SOCKET = [str(LOOPFAST), "run", "--per-socket", "--"]
WHOLE = [str(LOOPFAST), "run", "--"]
SOL, FAST = 0x4C46, 1


def run_cases(cmd):
    """Starts sockopt_cases.py; returns (process, its answers)."""
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, json.loads(readline(p))


def test_per_socket_answers_and_paths(build):
    """Under --per-socket: opted in by the option, the connection is on the
    fast path; the socket beside it that did not opt in is plain TCP; a
    listener opted out before listen gives an opted-in client plain TCP."""
    p, a = run_cases(PER_SOCKET + CASES)
    try:
        assert a["listener_before"] == 0 and a["listener_set"] == 0 and a["listener_after"] == 1, a
        assert a["listener_out_after_listen"] == "EISCONN" and a["listener_still"] == 1, a
        assert a["unconnected_before"] == 0 and a["unconnected_set"] == 0 and a["unconnected_after"] == 1, a
        assert (a["connected_fast"], a["accepted_fast"], a["connected_plain"], a["accepted_plain"]) == (1, 1, 0, 0), a
        assert a["connected_set"] == a["connected_out"] == a["plain_out_after"] == "EISCONN", a
        assert a["syn_sent"] >= 1 and a["connecting_set"] == a["connecting_out"] == "EISCONN", a
        assert a["listener_out_before_listen"] == 0 and a["listener_out_get"] == 0 and a["out_connected"] == 0, a
        wait_paths(p.pid, p.pid, a["ports"]["fast"], fast=1, plain=1)
        wait_paths(p.pid, p.pid, a["ports"]["out"], fast=0, plain=1)
    finally:
        stop(p)


def test_errors_and_spin(build):
    p, a = run_cases(PER_SOCKET + CASES)
    stop(p)
    assert a["spin_set"] == 0 and a["spin_get"] == 40 and a["connected_spin_get"] == 40, a
    assert a["spin_negative"] == a["spin_too_big"] == "EINVAL", a
    assert a["short_len"] == a["short_get"] == "EINVAL", a
    assert a["unknown_set"] == a["unknown_get"] == "ENOPROTOOPT", a
    assert {a["udp_set"], a["udp_get"], a["unix_set"]} == {errno.errorcode[errno.EOPNOTSUPP]}, a


def test_opt_out_in_whole_process_mode(build):
    """Under whole-process `loopfast run`, every socket starts opted in;
    the option's 0 keeps one client, and one listener, on plain TCP."""
    p, a = run_cases(WHOLE + CASES + ["whole"])
    try:
        assert a["listener_before"] == 1 and a["unconnected_before"] == 1, a
        assert a["plain_out"] == 0 and a["plain_out_get"] == 0 and a["connected_plain"] == 0, a
        assert a["listener_out_before_listen"] == 0 and a["listener_out_get"] == 0, a
        wait_paths(p.pid, p.pid, a["ports"]["fast"], fast=1, plain=1)
        wait_paths(p.pid, p.pid, a["ports"]["out"], fast=0, plain=1)
    finally:
        stop(p)


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_kernel_refuses_without_loopfast(family):
    """The seed's "fails on an older system": without loopfast the kernel
    refuses the level; setsockopt with ENOPROTOOPT, getsockopt with
    ENOPROTOOPT (IPv6) or EOPNOTSUPP (IPv4: ip_getsockopt's answer)."""
    code = "import socket,sys\ns=socket.socket(%d)\n" % family + \
        "for f in (lambda: s.setsockopt(0x4c46,1,1), lambda: s.getsockopt(0x4c46,1)):\n" \
        "    try: f(); print('ok')\n    except OSError as e: print(e.errno)\n"
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LOOPFAST_ENABLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env)
    got = [int(x) for x in out.stdout.split()]
    want_get = errno.ENOPROTOOPT if family == socket.AF_INET6 else errno.EOPNOTSUPP
    assert got == [errno.ENOPROTOOPT, want_get], out


def blocked_in(pid, calls, timeout=20):
    """Waits until pid sleeps in one of the system calls (numbers, x86_64)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/syscall") as f:
            nr = f.read().split()[0]
        if nr in calls:
            return nr
        time.sleep(0.05)
    pytest.fail(f"{pid} never blocked in {calls}")


RECVFROM, PPOLL = "45", "271"


@pytest.mark.parametrize("case", ["tcp", "fast", "fast-before-accept"])
def test_ctrl_c_interrupts_blocking_recv(build, case):
    """Python's SIGINT handler is installed at start-up, before the
    socket option opts the client in; a SIGINT must still end its blocking
    recv with KeyboardInterrupt, as over plain TCP ("tcp", the control):
    on an accepted fast-path connection (the kernel's recv) and on one the
    server has not accepted yet (loopfast's own wait on the bell)."""
    opt = "0" if case == "tcp" else "1"
    accept = "0" if case == "fast-before-accept" else "1"
    srv = subprocess.Popen(PER_SOCKET + PEER + ["server", opt, accept], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        port = int(readline(srv).strip())
        cl = subprocess.Popen(PER_SOCKET + PEER + ["client", str(port), opt], stdout=subprocess.PIPE, text=True)
        assert readline(cl).strip() == "ready"
        if accept == "1":
            assert readline(srv).strip() == "accepted " + opt
        deadline = time.monotonic() + 20
        while True:  # the path, from the kernel
            if case == "tcp":
                ok = kernel.tcp_pairs([cl.pid], [srv.pid], port) and not kernel.unix_pairs([cl.pid], [srv.pid])
            elif case == "fast":
                ok = kernel.unix_pairs([cl.pid], [srv.pid], port)
            else:  # the client's end is loopfast's Unix stream, its peer queued on the rendezvous
                socks, mine = kernel.unix_sockets(), kernel.socket_inodes([cl.pid])
                ok = any(kernel._CLIENT.match(socks.get(i, ("", 0))[0]) for i in mine)
            if ok or time.monotonic() > deadline:
                assert ok, case
                break
            time.sleep(0.05)
        nr = blocked_in(cl.pid, {RECVFROM, PPOLL})
        assert nr == (PPOLL if case == "fast-before-accept" else RECVFROM)
        time.sleep(0.2)
        os.kill(cl.pid, signal.SIGINT)
        try:
            out, _ = cl.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            cl.kill()
            cl.wait()
            pytest.fail(f"{case}: SIGINT did not interrupt the blocking recv")
        assert out.strip() == "KeyboardInterrupt" and cl.returncode == 0, (out, cl.returncode)
    finally:
        stop(srv)


def test_per_socket_environment(build):
    """--per-socket loads the interposer and says so in the environment
    children inherit; the default mode stays whole-process."""
    def env_of(args):
        p = subprocess.run([str(LOOPFAST), "run", *args, "--", "env"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    per, whole = env_of(["--per-socket"]), env_of([])
    assert per["LOOPFAST_ENABLE"] == "per-socket" and "libloopfast-preload.so" in per["LD_PRELOAD"], per
    assert whole["LOOPFAST_ENABLE"] == "1", whole


def test_per_socket_needs_a_program(build):
    p = subprocess.run([str(LOOPFAST), "run", "--per-socket"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "needs a program" in p.stderr, p.stderr


V6 = """
import socket, sys
ls = socket.socket(socket.AF_INET6)
ls.bind(("::1", 0))
ls.setsockopt(0x4c46, 1, 1)
ls.listen(4)
c = socket.socket(socket.AF_INET6)
c.setsockopt(0x4c46, 1, 1)
c.connect(ls.getsockname()[:2])
a, _ = ls.accept()
print(ls.getsockname()[1], c.getsockopt(0x4c46, 1), a.getsockopt(0x4c46, 1), flush=True)
sys.stdin.read()
"""


def test_ipv6(build):
    """The option on IPv6 sockets (::1): the fast path, from the kernel."""
    p = subprocess.Popen(PER_SOCKET + [sys.executable, "-c", V6], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        port, c, a = map(int, readline(p).split())
        assert (c, a) == (1, 1)
        wait_paths(p.pid, p.pid, port, fast=1, plain=0)
    finally:
        stop(p)
