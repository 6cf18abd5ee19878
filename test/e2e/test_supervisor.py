"""loopfast run's seccomp supervisor (issue 21, first cut; docs/supervisor.md):
programs the preload cannot reach, a C client linked -static and a Go
client built with CGO_ENABLED=0 (both built here), connect to an echo
server.

Against a server under loopfast the connection is on the fast path at both
ends, from the kernel: the Unix stream that the client program itself
holds (not the supervisor) is joined to one the server holds; the bytes
come back intact; the program sees TCP's addresses and SO_DOMAIN and
SO_PROTOCOL (getsockname, getpeername and those two getsockopt calls are
answered by the supervisor); once the server has claimed
the connection the supervisor holds no copy of it. Against a plain server
the same client is on plain TCP (both ends' TCP sockets) and works. A
client stopped with SIGTERM ends as it does without loopfast."""
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import LOOPFAST, go_binary, lf_cmd, readline, stop
import kernel

PROGS = pathlib.Path(__file__).resolve().parent / "progs"

ECHO = """
import socket, sys, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
def serve(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


@pytest.fixture(scope="module")
def clients():
    """{"c": the C client linked -static, "go": the Go client built with
    CGO_ENABLED=0}, both checked to have no program interpreter."""
    with tempfile.TemporaryDirectory(prefix="lf-sv-") as d:
        d = pathlib.Path(d)
        out = subprocess.run(["cc", "-O2", "-static", "-o", str(d / "svc"), str(PROGS / "sv_client.c")],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        shutil.copy(PROGS / "sv_goclient.go", d / "sv_goclient.go")
        env = dict(os.environ, CGO_ENABLED="0", GOCACHE=str(d / "cache"), GOPATH=str(d / "gopath"), GOFLAGS="",
                   GOTOOLCHAIN="local", GOPROXY="off", GO111MODULE="off", HOME=str(d))
        out = subprocess.run([go_binary(), "build", "-o", str(d / "goc"), "sv_goclient.go"], cwd=d, env=env,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr
        for p in ("svc", "goc"):
            ph = subprocess.run(["readelf", "-lW", str(d / p)], capture_output=True, text=True, timeout=30).stdout
            assert "INTERP" not in ph, f"{p} has a program interpreter"
        yield {"c": [str(d / "svc")], "c-nb": [str(d / "svc")], "go": [str(d / "goc")]}


def server(under_lf):
    cmd = [sys.executable, "-c", ECHO]
    p = subprocess.Popen(lf_cmd(cmd) if under_lf else cmd, stdout=subprocess.PIPE, text=True)
    return p, int(readline(p))


def start_client(prog, kind, port, n, lf=True):
    args = [*prog, str(port), str(n), *(["nb"] if kind == "c-nb" else []), "wait"]
    return subprocess.Popen(lf_cmd(args) if lf else args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def program_pid(sup):
    """The supervised program: the one child of `loopfast run`."""
    for _ in range(100):
        kids = [p for p in kernel.process_tree(sup.pid) if p != sup.pid]
        if kids:
            return kids[0]
        time.sleep(0.05)
    pytest.fail("loopfast run started no program")


def read_client(c, port, n):
    names = readline(c).split()
    assert names[0] == "names" and names[2] == f"127.0.0.1:{port}", names
    assert names[1].startswith("127.0.0.1:") and names[1] != "127.0.0.1:0", names
    if len(names) > 3:  # the C client: SO_DOMAIN and SO_PROTOCOL are TCP's (AF_INET, IPPROTO_TCP)
        assert names[3:] == ["domain", "2", "protocol", "6"], names
    assert readline(c).split() == ["echo", "OK", str(n)]
    assert readline(c).strip() == "waiting"
    return int(names[1].rsplit(":", 1)[1])


def end_by_sigterm(c):
    c.send_signal(signal.SIGTERM)
    c.wait(timeout=30)
    assert c.returncode == -signal.SIGTERM, (c.returncode, c.stderr.read())


@pytest.mark.parametrize("kind", ["c", "c-nb", "go"])
def test_fast_path(clients, kind):
    srv, port = server(True)
    try:
        n = 200000
        c = start_client(clients[kind], kind, port, n)
        local = read_client(c, port, n)
        prog = program_pid(c)
        pairs = kernel.unix_pairs([prog], kernel.process_tree(srv.pid), port)
        assert len(pairs) == 1, (pairs, kernel.unix_sockets())
        assert not kernel.tcp_pairs([prog], kernel.process_tree(srv.pid), port)
        # The name the kernel holds for the client's socket carries the TCP
        # address the program was told.
        assert f"/{local}/127.0.0.1/{port}/" in kernel.unix_sockets()[pairs[0].client_ino][0]
        # Claimed: the supervisor has let go of its copy and of the bell.
        deadline = time.monotonic() + 20
        while pairs[0].client_ino in kernel.socket_inodes([c.pid]):
            assert time.monotonic() < deadline, "the supervisor still holds the connection"
            time.sleep(0.05)
        end_by_sigterm(c)
    finally:
        stop(srv)


@pytest.mark.parametrize("kind", ["c", "go"])
def test_plain_server_stays_tcp(clients, kind):
    srv, port = server(False)
    try:
        c = start_client(clients[kind], kind, port, 5000)
        read_client(c, port, 5000)
        prog = program_pid(c)
        assert len(kernel.tcp_pairs([prog], [srv.pid], port)) == 1
        assert not kernel.unix_pairs([prog], [srv.pid], port)
        end_by_sigterm(c)
    finally:
        stop(srv)


@pytest.mark.parametrize("kind", ["c", "go"])
def test_sigterm_as_without_loopfast(clients, kind):
    """Exit by SIGTERM: the same ending with and without loopfast run."""
    srv, port = server(True)
    try:
        endings = []
        for lf in (False, True):
            c = start_client(clients[kind], kind, port, 100, lf)
            read_client(c, port, 100)
            c.send_signal(signal.SIGTERM)
            c.wait(timeout=30)
            endings.append(c.returncode)
        assert endings == [-signal.SIGTERM, -signal.SIGTERM]
    finally:
        stop(srv)


def test_detection(clients, tmp_path):
    """Static and Go binaries are supervised, a dynamic program is not
    (LOOPFAST_DEBUG says which), and --mode chooses either way."""
    env = dict(os.environ, LOOPFAST_DEBUG="1")

    def says(*args):
        out = subprocess.run([str(LOOPFAST), "run", *args], capture_output=True, text=True, env=env, timeout=60)
        return "supervised (seccomp" in out.stderr
    assert says("--", clients["c"][0], "1", "1")  # connect refused, at once: it only needs to start
    assert says("--", clients["go"][0], "1", "1")
    assert not says("--", "true")
    assert says("--mode", "seccomp", "--", "true")
    assert not says("--mode", "preload", "--", clients["c"][0], "1", "1")


def test_nested_preload_negotiates_once(clients, tmp_path):
    """A dynamically linked client under the preload (an inner `loopfast
    run`) in a supervised tree: the preload negotiates, the supervisor
    leaves its doorbell alone (one hello, not two), and the connection is
    on the fast path with its bytes intact. (Negotiated twice, it works
    too, as the server takes the first hello: which of the two negotiated
    is read from the supervisor's LOOPFAST_DEBUG lines.)"""
    dyn = tmp_path / "svc-dyn"
    out = subprocess.run(["cc", "-O2", "-o", str(dyn), str(PROGS / "sv_client.c")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    srv, port = server(True)
    try:
        c = subprocess.Popen([str(LOOPFAST), "run", "--supervise", "--", *lf_cmd([str(dyn), str(port), "100000", "wait"])],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, LOOPFAST_DEBUG="1"))
        read_client(c, port, 100000)
        pairs = kernel.unix_pairs(kernel.process_tree(c.pid), kernel.process_tree(srv.pid), port)
        assert len(pairs) == 1, pairs
        c.send_signal(signal.SIGTERM)
        err = c.communicate(timeout=30)[1]
        assert c.returncode == -signal.SIGTERM
        assert "supervised (seccomp" in err
        assert "supervisor: connect fd" not in err, err
    finally:
        stop(srv)


@pytest.mark.parametrize("kind", ["c", "go"])
def test_server_dead_before_claim_is_eof(clients, kind):
    """The server's worker dies between its accept and its claim (a child
    of the server accepts with the raw system call and exits): over TCP
    the client reads the end of its connection; under the supervisor the
    supervisor's watch of the bell shuts the program's fast-path socket
    down, so that it reads EOF too, and does not hang."""
    srv = subprocess.Popen(lf_cmd([sys.executable, str(PROGS.parent / "attack" / "echo_server.py"), "4", "--rogue"]),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(readline(srv).split()[0])
        assert readline(srv).strip() == "listening"
        assert readline(srv).split()[0] == "rogue"
        c = start_client(clients[kind], kind, port, 100)
        names = readline(c).split()
        assert names[0] == "names", names
        assert readline(srv).strip() == "rogue gone"
        assert readline(c, 30).split()[:3] == ["echo", "BAD", "0"]
        assert readline(c).strip() == "waiting"
        end_by_sigterm(c)
    finally:
        srv.stdin.close()
        stop(srv)


def test_supervisor_killed_gives_enosys(clients):
    """The supervisor killed: the program's next trapped call fails with
    ENOSYS (the kernel's answer when no one listens), not a hang."""
    srv, port = server(True)
    try:
        c = subprocess.Popen(lf_cmd([*clients["c"], str(port), "10", "late"]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        prog = program_pid(c)
        c.send_signal(signal.SIGKILL)
        c.wait(timeout=30)
        c.stdin.write("go\n")
        c.stdin.flush()
        assert readline(c).strip() == "connect Function not implemented"
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{prog}"):
            assert time.monotonic() < deadline, "the program did not end"
            time.sleep(0.05)
    finally:
        stop(srv)
