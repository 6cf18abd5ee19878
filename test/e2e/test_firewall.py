"""The host's firewall applies to fast-path connections as to TCP: the
doorbell's SYN crosses netfilter. A loopback REJECT (tcp-reset) refuses
the connection on both paths and the server sees nothing; a DROP makes a
client with a connect timeout time out, as TCP does, and once the rule is
gone a connect works (on the fast path under loopfast). Each test adds one
rule for SYNs to its own server's port only (the server holds that port)
and always removes it. Needs root and iptables (scripts/deps.sh)."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import readline, stop, wrap

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = [pytest.mark.timeout(120), pytest.mark.extra]

# Listens on the loopback address of the family, says its port, and serves
# connections one at a time: each sends one line; "count" gets the number
# of connections accepted before it, anything else is echoed.
SERVER = textwrap.dedent("""
    import socket, sys
    fam = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
    l = socket.socket(fam)
    l.bind(("::1" if fam == socket.AF_INET6 else "127.0.0.1", 0))
    l.listen(16)
    print(l.getsockname()[1], flush=True)
    n = 0
    while True:
        c, _ = l.accept()
        f = c.makefile("rb")
        line = f.readline()
        c.sendall(b"%d\\n" % n if line == b"count\\n" else line)
        f.close()
        c.close()
        n += 1
""")

# One connect (create_connection, with a timeout or without), and what
# became of it on one line: "connected <path>" (then "count" is sent and
# the answer printed), or the exception's class, or the errno name.
CLIENT = textwrap.dedent("""
    import errno, os, socket, sys, time
    host, port = sys.argv[1], int(sys.argv[2])
    timeout = float(sys.argv[3]) if sys.argv[3] != "none" else None
    def path(fd):
        ino = os.readlink(f"/proc/self/fd/{fd}")[8:-1]
        with open("/proc/net/unix") as f:
            return "unix" if any(l.split()[6:7] == [ino] for l in f) else "tcp"
    t = time.monotonic()
    try:
        c = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        print("timeout after %.1f s" % (time.monotonic() - t))
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e)))
    else:
        p = path(c.fileno())
        c.settimeout(30)
        c.sendall(b"count\\n")
        print("connected", p, "server had accepted", c.makefile().readline().strip())
""")


def iptables(family):
    return "ip6tables" if family == "6" else "iptables"


class Rule:
    """One netfilter rule on loopback for SYNs to port; removed by remove()
    (idempotent), which callers run in a finally."""

    def __init__(self, family, port, target):
        self.cmd = iptables(family)
        self.spec = ["INPUT", "-i", "lo", "-p", "tcp", "--syn", "--dport", str(port), "-j", *target]
        self.added = False

    def add(self):
        subprocess.run([self.cmd, "-w", "10", "-I", *self.spec], check=True, capture_output=True, timeout=30)
        self.added = True

    def remove(self):
        if self.added:
            subprocess.run([self.cmd, "-w", "10", "-D", *self.spec], check=True, capture_output=True,
                           timeout=30)
            self.added = False


@pytest.fixture(scope="module", autouse=True)
def firewall_available():
    for family in ("4", "6"):
        cmd = iptables(family)
        if not shutil.which(cmd):
            pytest.fail(f"{cmd} is not installed (scripts/deps.sh installs it)")
        p = subprocess.run([cmd, "-w", "10", "-L", "INPUT", "-n"], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            pytest.fail(f"{cmd} cannot read the INPUT chain (root and CAP_NET_ADMIN are needed): {p.stderr}")


@pytest.fixture(params=["4", "6"], ids=["v4", "v6"])
def family(request):
    return request.param


@pytest.fixture
def server(build, mode, family):
    srv = subprocess.Popen(wrap(mode, [sys.executable, "-c", SERVER, family]), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        yield srv, int(readline(srv).strip())
    finally:
        stop(srv)


def client(mode, family, port, timeout):
    host = "::1" if family == "6" else "127.0.0.1"
    # The bound only catches a hang: every outcome here takes seconds.
    p = subprocess.run(wrap(mode, [sys.executable, "-c", CLIENT, host, str(port), timeout]),
                       capture_output=True, text=True, timeout=15, env=dict(os.environ, LOOPFAST_DEBUG="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip(), p.stderr


def check_served_nothing_before(mode, family, port):
    out, err = client(mode, family, port, "5")
    want = "unix" if mode == "loopfast" else "tcp"
    assert out == f"connected {want} server had accepted 0", out + "\n" + err


def test_reject_refuses_and_the_server_sees_nothing(mode, family, server):
    srv, port = server
    rule = Rule(family, port, ["REJECT", "--reject-with", "tcp-reset"])
    try:
        rule.add()
        for timeout in ("none", "2"):
            out, err = client(mode, family, port, timeout)
            assert out == "ECONNREFUSED", f"connect with timeout {timeout}: {out}\n{err}"
    finally:
        rule.remove()
    assert srv.poll() is None, srv.stderr.read()
    check_served_nothing_before(mode, family, port)


def test_drop_times_out_as_tcp_then_connects(mode, family, server):
    srv, port = server
    rule = Rule(family, port, ["DROP"])
    try:
        rule.add()
        out, err = client(mode, family, port, "2")
        assert out.startswith("timeout after "), out + "\n" + err
    finally:
        rule.remove()
    assert srv.poll() is None, srv.stderr.read()
    check_served_nothing_before(mode, family, port)
