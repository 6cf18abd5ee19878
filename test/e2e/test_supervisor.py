"""loopfast run's seccomp supervisor (issue 21; docs/supervisor.md):
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
client stopped with SIGTERM ends as it does without loopfast.

Servers (the server side: listen and accept trapped): a Go server (net/http
and a raw net.Conn echo, CGO_ENABLED=0) and a C server linked -static
(blocking accept), each run without loopfast and under `loopfast run` with
the same clients, the outputs compared and the path of each connection
proved from the kernel at both ends; stopped with SIGTERM as without
loopfast; a blocking accept interrupted by a signal handler as over TCP;
a listener closed and made again on its port; a program of another uid
than the supervisor kept on plain TCP; busybox's static nc and httpd; a
set-uid root program run by a second user's supervisor (said, run
without its privilege, still on the fast path)."""
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import BUILD, LOOPFAST, answers_plain_and_under, echo_server, go_binary, lf_cmd, readline, stop
import kernel
from test_security import USER, attacker  # noqa: F401 (the fixture: the second user)

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = pytest.mark.extra

PROGS = pathlib.Path(__file__).resolve().parent / "progs"

ECHO = echo_server()


def go_build(d, src, out):
    """Builds the Go program src into d/out with CGO_ENABLED=0, offline
    (the build cache kept in the build directory: a loaded machine
    rebuilds Go's standard library slowly)."""
    shutil.copy(src, d / src.name)
    env = dict(os.environ, CGO_ENABLED="0", GOCACHE=str(BUILD / "go-cache"), GOPATH=str(d / "gopath"), GOFLAGS="",
               GOTOOLCHAIN="local", GOPROXY="off", GO111MODULE="off", HOME=str(d))
    done = subprocess.run([go_binary(), "build", "-o", str(d / out), src.name], cwd=d, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def clients():
    """{"c": the C client linked -static, "go": the Go client built with
    CGO_ENABLED=0, "server-c": the C server linked -static, "server-go":
    the Go servers}, all checked to have no program interpreter. The
    directory is readable by every uid (test_other_uid_stays_tcp)."""
    with tempfile.TemporaryDirectory(prefix="lf-sv-") as d:
        d = pathlib.Path(d)
        os.chmod(d, 0o755)
        for src, out in (("sv_client.c", "svc"), ("sv_server.c", "svs")):
            done = subprocess.run(["cc", "-O2", "-static", "-o", str(d / out), str(PROGS / src)],
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
        go_build(d, PROGS / "sv_go.go", "svgo")
        for p in ("svc", "svs", "svgo"):
            ph = subprocess.run(["readelf", "-lW", str(d / p)], capture_output=True, text=True, timeout=30).stdout
            assert "INTERP" not in ph, f"{p} has a program interpreter"
        yield {"c": [str(d / "svc")], "c-nb": [str(d / "svc")], "go": [str(d / "svgo"), "echo-client"],
               "server-c": [str(d / "svs")], "server-go": [str(d / "svgo")]}


@pytest.fixture(autouse=True)
def reaped(monkeypatch):
    """Every program a test here starts is in a process group of its own,
    and the whole group is killed when the test ends, passed or not. A
    supervised program is the supervisor's child, not the test's: killing
    `loopfast run` alone (stop(), a subprocess.run timeout, a failed
    assertion before the cleanup) leaves it to init, where its trapped
    calls fail with ENOSYS (the kernel's answer once the supervisor is
    gone, issue 21): a server whose accept loop retries on errors
    (busybox httpd) then spins for ever. Orphans keep their group, so
    killpg reaches them."""
    started, init = [], subprocess.Popen.__init__

    def own_group(self, *args, **kw):
        kw.setdefault("start_new_session", True)
        init(self, *args, **kw)
        started.append(self)

    monkeypatch.setattr(subprocess.Popen, "__init__", own_group)
    yield
    monkeypatch.undo()
    for p in started:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


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


def kill_supervisor_then_connect(c, running=True):
    """SIGKILL to `loopfast run` c, then the "late" client's go: its
    connect fails with ENOSYS (the kernel's answer when no one listens to
    the filter), and the program ends, not a hang. running: first wait
    until the program runs (exec'd, the kernel shows it blocked reading its
    go): its child exists before it has its filter."""
    prog = program_pid(c)
    deadline = time.monotonic() + 30
    while running and not (kernel.blocked_in(prog) == "read" and
                           os.path.realpath(f"/proc/{prog}/exe") != os.path.realpath(LOOPFAST)):
        assert c.poll() is None and time.monotonic() < deadline, "the program never waited for its go"
        time.sleep(0.02)
    c.send_signal(signal.SIGKILL)
    c.wait(timeout=30)
    c.stdin.write("go\n")
    c.stdin.flush()
    assert readline(c).strip() == "connect Function not implemented"
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{prog}"):
        assert time.monotonic() < deadline, "the program did not end"
        time.sleep(0.05)


def test_supervisor_killed_gives_enosys(clients):
    """The supervisor killed: the program's next trapped call fails with
    ENOSYS (the kernel's answer when no one listens), not a hang."""
    srv, port = server(True)
    try:
        c = subprocess.Popen(lf_cmd([*clients["c"], str(port), "10", "late"]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        kill_supervisor_then_connect(c)
    finally:
        stop(srv)


def test_supervisor_killed_before_the_program_runs(clients, tmp_path):
    """The supervisor killed between the filter's installation and its
    word that the child may exec (held there by a NOTIFY_SOCKET whose queue
    is full, its sendto of MAINPID blocked, as the kernel shows): the
    child runs the program anyway, whose trapped calls fail with ENOSYS;
    it never waits for a word that cannot come."""
    import socket as so
    srv, port = server(True)
    path = str(tmp_path / "notify")
    sink, filler = so.socket(so.AF_UNIX, so.SOCK_DGRAM), so.socket(so.AF_UNIX, so.SOCK_DGRAM)
    sink.bind(path)
    filler.setblocking(False)
    try:
        while True:
            filler.sendto(b"x", path)
    except BlockingIOError:
        pass                                              # the queue is full: the next sender waits
    c = None
    try:
        c = subprocess.Popen([str(LOOPFAST), "run", "--notify-mainpid", "--", *clients["c"], str(port), "10", "late"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "NOTIFY_SOCKET": path})
        deadline = time.monotonic() + 30
        while kernel.blocked_in(c.pid) != "sendto":
            assert c.poll() is None and time.monotonic() < deadline, "the supervisor never waited on NOTIFY_SOCKET"
            time.sleep(0.02)
        kill_supervisor_then_connect(c, running=False)
    finally:
        stop(c, srv)
        sink.close(), filler.close()


# ---- the server side: listen and accept trapped


def run_server(cmd, lf, **kw):
    """cmd started without loopfast or under `loopfast run`; its port."""
    p = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, **kw)
    line = readline(p).split()
    assert line[0] == "listening", line
    return p, int(line[1])


def prog_of(p, lf):
    """The program's pid: the child of the supervisor under loopfast."""
    return program_pid(p) if lf else p.pid


def assert_path(client_pids, server_pids, port, fast):
    """The connection to port is on the fast path (one Unix pair, no TCP
    pair) or plain TCP (the reverse), seen from the kernel at both ends:
    the programs' own descriptors (server_pids: a list, or a function
    that gives it, for a server that forks per connection)."""
    want = (1, 0) if fast else (0, 1)
    deadline = time.monotonic() + 20
    while True:
        spids = server_pids() if callable(server_pids) else server_pids
        got = (len(kernel.unix_pairs(client_pids, spids, port)), len(kernel.tcp_pairs(client_pids, spids, port)))
        if got == want:
            return
        assert time.monotonic() < deadline, (got, want, kernel.unix_sockets())
        time.sleep(0.05)


def end_server(srv):
    """SIGTERM: the server ends by it, under loopfast as without."""
    srv.send_signal(signal.SIGTERM)
    srv.wait(timeout=30)
    assert srv.returncode == -signal.SIGTERM, (srv.returncode, srv.stderr.read())


SERVERS = {"go": ["echo-server", "log"], "c": []}


@pytest.mark.parametrize("client", ["c", "go"])
@pytest.mark.parametrize("kind", ["go", "c"])
def test_echo_server(clients, kind, client):
    """A Go (net.Conn) or C (blocking accept) echo server, static, with a
    static C or Go client: without loopfast plain TCP, under `loopfast
    run` (both supervised) the fast path at both ends; the same bytes, the
    same TCP addresses on both sides (accept's and getsockname's on the
    server, the client's names); SIGTERM ends the server alike."""
    said = []
    for lf in (False, True):
        srv, port = run_server(clients["server-" + kind] + SERVERS[kind], lf)
        try:
            c = start_client(clients[client], client, port, 100000, lf)
            local = read_client(c, port, 100000)
            assert readline(srv).split() == ["accepted", f"127.0.0.1:{port}", f"127.0.0.1:{local}"]
            assert_path([prog_of(c, lf)], [prog_of(srv, lf)], port, fast=lf)
            end_by_sigterm(c)
            end_server(srv)
            said.append(srv.stdout.read())
        finally:
            stop(srv)
    assert said[0] == said[1] == ""


@pytest.mark.parametrize("client", ["curl", "go"])
def test_go_http_server(clients, client):
    """Go's net/http server (static) with curl (C, under the preload) and
    with Go's http client (static, supervised): the same answers without
    and under loopfast, and under loopfast the request's connection on the
    fast path at both ends while the handler holds it."""
    answers = []
    for lf in (False, True):
        srv, port = run_server(clients["server-go"] + ["http-server"], lf)
        try:
            url = f"http://127.0.0.1:{port}/held/{client}"
            cmd = ["curl", "-sS", url] if client == "curl" else clients["server-go"] + ["http-client", str(port),
                                                                                       f"held/{client}"]
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert readline(srv).strip() == f"held {client}"
            cpid = c.pid if client == "curl" or not lf else program_pid(c)
            assert_path([cpid], [prog_of(srv, lf)], port, fast=lf)
            srv.stdin.write("\n")
            srv.stdin.flush()
            out, err = c.communicate(timeout=30)
            assert c.returncode == 0, err
            answers.append(out)
            end_server(srv)
        finally:
            stop(srv)
    want = f"hello {client} from go\n"
    assert answers == ([want] * 2 if client == "curl" else [f"status 200 body {want!r}\n".replace("'", '"')] * 2)


def blocked_in_accept(pid):
    """Whether pid waits in accept (its /proc syscall line)."""
    nr = {"x86_64": 43, "aarch64": 202}[os.uname().machine]
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == str(nr)
    except (OSError, IndexError):
        return False


def parked(sup, prog, port):
    """Whether the supervisor sup has parked prog's accept on port: it holds
    two descriptors of the program's listening socket (the kernel's
    /proc/PID/fd), its copy of the listener and the park's dup of it. Only
    then has it received the accept's notification: a signal that comes
    sooner interrupts the accept in the kernel, which proves nothing of the
    park's own interruption (received, the call waits killable only:
    SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV). A fixed 200 ms sleep stood
    here: a supervisor stopped 0.5 s let mutant
    supervisor-parked-accept-ignores-signals pass 1 run in 3."""
    mine = kernel.socket_inodes([prog])
    listening = [ino for ino, (state, local, _) in kernel.tcp_sockets().items()
                 if state == "LISTEN" and local[1] == port and ino in mine]
    if len(listening) != 1:
        return False
    fds = 0
    for fd in os.listdir(f"/proc/{sup}/fd"):
        try:
            fds += os.readlink(f"/proc/{sup}/fd/{fd}") == f"socket:[{listening[0]}]"
        except OSError:
            pass
    return fds == 2


def signal_pending(pid, sig):
    with open(f"/proc/{pid}/status") as f:
        st = dict(line.split(":", 1) for line in f if ":" in line)
    return bool((int(st["SigPnd"], 16) | int(st["ShdPnd"], 16)) & (1 << (sig - 1)))


@pytest.mark.parametrize("mode", ["eintr", "restart"])
def test_blocking_accept_signal(clients, mode):
    """A signal for a handler arrives while a static C server waits in a
    blocking accept: without SA_RESTART the accept fails with EINTR, with
    it the handler runs and the accept goes on, under the supervisor (a
    parked accept) as over TCP; the next connection is accepted."""
    said = []
    for lf in (False, True):
        srv, port = run_server(clients["server-c"] + [mode], lf)
        try:
            prog = prog_of(srv, lf)
            deadline = time.monotonic() + 20
            while not blocked_in_accept(prog) or lf and not parked(srv.pid, prog, port):
                assert time.monotonic() < deadline, "the server never waited in accept (under loopfast: parked)"
                time.sleep(0.05)
            os.kill(prog, signal.SIGUSR1)
            deadline = time.monotonic() + 20
            while signal_pending(prog, signal.SIGUSR1):
                assert time.monotonic() < deadline, "the signal was never handled"
                time.sleep(0.05)
            lines = []
            if mode == "eintr":
                lines += [readline(srv).strip(), readline(srv).strip()]
            c = start_client(clients["c"], "c", port, 1000, lf)
            local = read_client(c, port, 1000)
            if mode == "restart":
                lines.append(readline(srv).strip())
            assert readline(srv).split() == ["accepted", f"127.0.0.1:{port}", f"127.0.0.1:{local}"]
            assert_path([prog_of(c, lf)], [prog], port, fast=lf)
            end_by_sigterm(c)
            said.append(lines)
        finally:
            stop(srv)
    want = ["signal", "accept Interrupted system call"] if mode == "eintr" else ["signal"]
    assert said == [want, want]


def test_listener_made_again(clients):
    """A Go server closes its listener and listens again on the same port
    (as a server that reloads does): the supervisor lets go of its copy
    of the old listener, so the port is free as over TCP, and the new
    listener is served on the fast path."""
    said = []
    for lf in (False, True):
        srv, port = run_server(clients["server-go"] + ["echo-server", "relisten"], lf)
        try:
            lines = []
            for _ in range(2):
                c = start_client(clients["go"], "go", port, 1000, lf)
                local = read_client(c, port, 1000)
                assert readline(srv).split() == ["accepted", f"127.0.0.1:{port}", f"127.0.0.1:{local}"]
                assert_path([prog_of(c, lf)], [prog_of(srv, lf)], port, fast=lf)
                end_by_sigterm(c)
                if not lines:
                    lines.append(readline(srv).strip())
            said.append(lines)
        finally:
            stop(srv)
    assert said == [["relisten ok"], ["relisten ok"]]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a supervisor of another uid than its program")
def test_other_uid_stays_tcp(clients):
    """A root `loopfast run` over a program that runs as nobody (setpriv
    in the tree): what the supervisor would make carries root's
    credentials, so it makes nothing: the program's listener and its
    connects stay on plain TCP, both ends seen from the kernel, it works,
    and loopfast says why on stderr."""
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    sup = [str(LOOPFAST), "run", "--mode", "seccomp", "--"]
    srv, port = run_server(sup + nobody + clients["server-go"] + SERVERS["go"], False)
    try:
        c = start_client(clients["go"], "go", port, 1000)
        local = read_client(c, port, 1000)
        assert readline(srv).split()[2] == f"127.0.0.1:{local}"
        assert_path([program_pid(c)], [program_pid(srv)], port, fast=False)
        end_by_sigterm(c)
        end_server(srv)
        assert "uses sockets of uid 65534, loopfast run runs as uid 0: they stay on plain TCP" in srv.stderr.read()
    finally:
        stop(srv)
    srv, port = server(True)
    try:
        c = subprocess.Popen(sup + nobody + clients["go"] + [str(port), "1000", "wait"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        read_client(c, port, 1000)
        assert_path([program_pid(c)], kernel.process_tree(srv.pid), port, fast=False)
        end_by_sigterm(c)
        assert "they stay on plain TCP" in c.stderr.read()
    finally:
        stop(srv)


def test_per_socket_opts_in_nothing_by_itself(clients):
    """Under `loopfast run --per-socket` a supervised program that sets no
    SOL_LOOPFAST option (the Go echo server and client) is plain TCP at
    both ends, and works (examples/go opts in and gets the fast path:
    test_examples.py)."""
    per = [str(LOOPFAST), "run", "--per-socket", "--"]
    srv = subprocess.Popen(per + clients["server-go"] + SERVERS["go"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(readline(srv).split()[1])
        c = subprocess.Popen(per + clients["go"] + [str(port), "1000", "wait"], stdout=subprocess.PIPE, text=True)
        read_client(c, port, 1000)
        assert_path([program_pid(c)], [program_pid(srv)], port, fast=False)
        end_by_sigterm(c)
    finally:
        stop(srv)


def busybox():
    """Debian's busybox-static (.ci installs it), checked to be static."""
    bb = shutil.which("busybox")
    if not bb:
        pytest.fail("busybox is not installed (scripts/deps.sh installs busybox-static)")
    ph = subprocess.run(["readelf", "-lW", bb], capture_output=True, text=True, timeout=30).stdout
    assert "INTERP" not in ph, f"{bb} is not the static busybox"
    return bb


def free_port():
    """A port nobody listens on now (busybox's servers take a number)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_busybox_nc():
    """busybox's nc as server (-l) and as client, both static: a line
    each way, the same without and under loopfast, and under loopfast the
    connection on the fast path at both ends."""
    bb = busybox()
    said = []
    for lf in (False, True):
        port = free_port()
        cmd = [bb, "nc", "-l", "-p", str(port)]
        srv = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 20
            while not any(s[2] == ("127.0.0.1", port) or s[1][1] == port for s in kernel.tcp_sockets().values()):
                assert time.monotonic() < deadline, "nc -l never listened"
                time.sleep(0.05)
            cmd = [bb, "nc", "127.0.0.1", str(port)]
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            c.stdin.write("from the client\n")
            c.stdin.flush()
            got = readline(srv).strip()
            assert_path([prog_of(c, lf)], [prog_of(srv, lf)], port, fast=lf)
            srv.stdin.write("from the server\n")
            srv.stdin.close()
            said.append((got, readline(c).strip()))
            c.stdin.close()
            c.wait(timeout=30)
            srv.wait(timeout=30)
        finally:
            stop(srv)
    assert said == [("from the client", "from the server")] * 2


def test_busybox_httpd(tmp_path):
    """busybox's httpd (static, forks a child per connection) with curl
    (the preload) and busybox's wget (static): the same answers without
    and under loopfast, and under loopfast the connection on the fast path
    at both ends while a CGI script holds the answer (it waits on a
    FIFO)."""
    bb = busybox()
    www = tmp_path / "www"
    (www / "cgi-bin").mkdir(parents=True)
    body = bytes((i * 7 + 3) % 251 for i in range(300000))
    (www / "f.bin").write_bytes(body)
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    cgi = www / "cgi-bin" / "held"
    cgi.write_text(f"#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\ncat {fifo}\n")
    cgi.chmod(0o755)
    said = []
    for lf in (False, True):
        port = free_port()
        cmd = [bb, "httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", str(www)]
        srv = subprocess.Popen(lf_cmd(cmd) if lf else cmd)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 20
            while subprocess.run(["curl", "-sf", "-o", "/dev/null", url + "/f.bin"], timeout=30).returncode:
                assert time.monotonic() < deadline, "httpd never answered"
                time.sleep(0.1)
            cmd = ["curl", "-sS", url + "/cgi-bin/held"]
            c = subprocess.Popen(lf_cmd(cmd) if lf else cmd, stdout=subprocess.PIPE, text=True)
            prog = prog_of(srv, lf)
            assert_path([c.pid], lambda: kernel.process_tree(prog), port, fast=lf)
            with open(fifo, "w") as f:
                f.write("released\n")
            out = c.communicate(timeout=30)[0]
            cmd = [bb, "wget", "-q", "-O", "-", url + "/f.bin"]
            got = subprocess.run(lf_cmd(cmd) if lf else cmd, capture_output=True, timeout=60)
            said.append((c.returncode, out, got.returncode, got.stdout == body))
        finally:
            stop(srv)
    assert said == [(0, "released\n", 0, True)] * 2


def test_sol_loopfast_answers(clients):
    """The SOL_LOOPFAST option under the supervisor answers as loopfast.h
    says (Go's syscall.SetsockoptInt/GetsockoptInt, --per-socket): an
    unconnected socket 0, then opted in 1; connected on the fast path 1,
    and setting it again EISCONN either way; LOOPFAST_SPIN refused
    (EOPNOTSUPP: no spinning without the library in the program) and read
    0; a listener opted in before listen 1, opting it out EISCONN; one
    opted in after listen gets its rendezvous then (a connection to it
    reads 1). Without loopfast the kernel refuses the level. (The path
    itself is proved from the kernel by the other tests.)"""
    srv, port = server(True)
    try:
        cmd = clients["server-go"] + ["options", str(port)]
        run = lambda c: subprocess.run(c, capture_output=True, text=True, timeout=60).stdout.splitlines()
        eisconn = "transport endpoint is already connected"
        assert run([str(LOOPFAST), "run", "--per-socket", "--"] + cmd) == [
            "unconnected 0 | ok | 1",
            f"connected 1 | {eisconn} | {eisconn} | operation not supported | 0",
            f"listener 1 | {eisconn}",
            "listener-after 0 | ok | 1",
            "connected-after 1",
        ]
        assert run(cmd)[0] == "unconnected operation not supported | protocol not available | operation not supported"
    finally:
        stop(srv)


def uids(pid):
    """pid's real, effective, saved and filesystem uids (/proc)."""
    with open(f"/proc/{pid}/status") as f:
        return [int(u) for line in f if line.startswith("Uid:") for u in line.split()[1:]]


def test_setuid_root_program_under_a_user_supervisor(clients, attacker, shared_build):  # noqa: F811
    """A set-uid root program (a copy of the static C client owned by
    root, mode 4755) run by a second user: without loopfast it runs with
    euid 0. That user's `loopfast run` must set no_new_privs (seccomp's
    rule without CAP_SYS_ADMIN), under which the kernel runs it without
    its privilege: loopfast says so on stderr, naming the process and the
    program (the program is PROG itself: its own exec is trapped too), and
    the program still runs, as the user (its uids from /proc), and reaches
    a loopfast server of the same user on the fast path (both ends from
    the kernel). (test_supervisor_security.py: the same for a set-uid exec
    further down the tree, and root's supervisor, which keeps it.)"""
    exe = pathlib.Path(clients["c"][0]).with_name("svc-suid-root")
    shutil.copy(clients["c"][0], exe)
    os.chown(exe, 0, 0)
    os.chmod(exe, 0o4755)
    user = pwd.getpwnam(USER)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    lf_user = [str(shared_build / "loopfast"), "run", "--"]
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")  # one the user can run
    srv = subprocess.Popen([*as_user, *lf_user, py, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    port = int(readline(srv))
    try:
        seen = []
        for lf in (False, True):
            c = subprocess.Popen([*as_user, *(lf_user if lf else []), str(exe), str(port), "1000", "wait"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            read_client(c, port, 1000)
            prog = program_pid(c) if lf else c.pid
            seen.append(uids(prog))
            assert_path([prog], kernel.process_tree(srv.pid), port, fast=lf)
            end_by_sigterm(c)
            said = [line for line in c.stderr.read().splitlines() if "set-uid" in line]
            assert said == ([f"loopfast: process {prog} runs {exe}, a set-uid program: under loopfast run's seccomp "
                             "filter (no_new_privs, which seccomp needs without root) it runs WITHOUT its privilege; "
                             "run loopfast run as root, or without loopfast"] if lf else []), said
        u = user.pw_uid
        assert seen == [[u, 0, 0, 0], [u, u, u, u]], seen  # the control: the set-uid took effect
    finally:
        stop(srv)


# A dual-stack listener (AF_INET6 on ::, IPV6_V6ONLY 0 set before bind, as
# Go's net.Listen makes it) and a client of 127.0.0.1 in one static
# program, and a client of ::1 with IPV6_V6ONLY 1 set before its connect:
# prints the port, what the accepted socket reads for IPV6_V6ONLY and
# what the second client reads, then holds the connections until its
# stdin closes.
DUAL_STACK = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void)
{
	int ls = socket(AF_INET6, SOCK_STREAM, 0), zero = 0, v = -1;
	socklen_t vl = sizeof(v);
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t l6 = sizeof(a6);
	setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	bind(ls, (void *)&a6, l6);
	listen(ls, 8);
	getsockname(ls, (void *)&a6, &l6);
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = a6.sin6_port, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int c = socket(AF_INET, SOCK_STREAM, 0);
	connect(c, (void *)&a4, sizeof(a4));
	int s = accept(ls, NULL, NULL);
	int r = getsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &v, &vl);
	int c6 = socket(AF_INET6, SOCK_STREAM, 0), one = 1, w = -1;
	setsockopt(c6, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	a6.sin6_addr = in6addr_loopback;
	connect(c6, (void *)&a6, sizeof(a6));
	int s6 = accept(ls, NULL, NULL);
	vl = sizeof(w);
	int r6 = getsockopt(c6, IPPROTO_IPV6, IPV6_V6ONLY, &w, &vl);
	printf("%d %d %d %d %d %d\n", ntohs(a6.sin6_port), r, v, r6, w, s6 >= 0);
	fflush(stdout);
	char b;
	return read(0, &b, 1) < 0;
}
"""


def test_dual_stack_listener_v6only_as_tcp(tmp_path):
    """A connection accepted on a dual-stack listener (IPV6_V6ONLY 0 set
    before bind) reads IPV6_V6ONLY 0, and a client that set it to 1 before
    its connect to ::1 reads 1, as over TCP (the same static program
    without loopfast is the control), both connections on the fast path at
    both ends. Found in review: the supervisor kept the set and made it
    again on its copy before the get, but V6ONLY cannot be set on a
    connected socket; the library then answered its reference's value (1
    for the accepted end, 0 for the client)."""
    src, prog = tmp_path / "dual.c", tmp_path / "dual"
    src.write_text(DUAL_STACK)
    subprocess.run(["cc", "-O1", "-static", "-o", str(prog), str(src)], check=True, timeout=120)
    answers = answers_plain_and_under([str(prog)], lf_cmd([]), pairs=2)
    assert answers["tcp"] == ["0", "0", "0", "1", "1"], answers
    assert answers["lf"] == answers["tcp"], answers


TWO_LISTENERS = r"""
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
static unsigned short listener(int *fd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	*fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	bind(*fd, (void *)&a, l);
	listen(*fd, 8);
	getsockname(*fd, (void *)&a, &l);
	return a.sin_port;
}
static void dial(unsigned short port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	connect(socket(AF_INET, SOCK_STREAM, 0), (void *)&a, sizeof(a));
}
/* Which listener's port the connection accepted on l has (1: l's own),
 * or -errno. */
static int took(int l, unsigned short port)
{
	struct pollfd p = { l, POLLIN, 0 };
	poll(&p, 1, 10000);
	int s = accept(l, NULL, NULL);
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	if (s < 0)
		return -errno;
	getsockname(s, (void *)&a, &al);
	return a.sin_port == port;
}
int main(void)
{
	int la, lb;
	unsigned short pa = listener(&la), pb = listener(&lb);
	dial(pa), dial(pb), dial(pa), dial(pb);
	int r1 = took(la, pa), r2 = took(lb, pb), r3 = took(lb, pb), r4 = took(la, pa);
	printf("%d %d %d %d %d\n", ntohs(pb), r1, r2, r3, r4);
	fflush(stdout);
	char b;
	return read(0, &b, 1) < 0;
}
"""


def test_accepts_on_two_listeners_alternated(tmp_path):
    """A static program with two listeners, two connections queued on
    each, accepts on the first, then twice on the second, then on the
    first again: each accept takes a connection of its own listener (its
    local port), as over TCP, the second listener's two on the fast path
    at both ends. The supervisor recognises the listener of an accept by
    one kcmp against the listener the previous accept found (held_of),
    and by its inode otherwise: a kcmp taken as a match for the other
    listener would accept the first one's queued connection instead
    (mutant supervisor-accept-listener-not-compared)."""
    src, prog = tmp_path / "two.c", tmp_path / "two"
    src.write_text(TWO_LISTENERS)
    subprocess.run(["cc", "-O1", "-static", "-o", str(prog), str(src)], check=True, timeout=120)
    answers = answers_plain_and_under([str(prog)], lf_cmd([]), pairs=2)
    assert answers["tcp"] == ["1", "1", "1", "1"], answers
    assert answers["lf"] == answers["tcp"], answers
