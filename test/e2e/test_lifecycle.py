"""Servers that start, stop and restart while their clients run, as under a
service manager, compose or a connection pool: a client that starts
before its server and retries until it listens, a pool that reconnects
across a restart (redis-py's, against redis-server), a server that goes
from plain TCP to loopfast on the same port, and a listener whose socket
outlives the process serving it (socket activation: the listener is held
by the test, as systemd holds it, and handed to each new server). Every
connection made once the new listener, or its rendezvous, exists must be
on the fast path; each path is read from the kernel at both ends
(conftest's fast_path_pairs and tcp_pairs), never from loopfast's own
report. Every program started is checked for how it ended."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import fast_path_pairs, free_port, lf_cmd, need, process_tree, readline, stop, tcp_pairs

pytestmark = pytest.mark.timeout(300)

# A line server: listens on HOST PORT (or serves the listening socket it
# inherited as fd N: "fd N"), says "listening PORT", answers each line with
# it, holds every connection until the peer closes it. SIGTERM ends it (the
# default action: the test checks it died of that signal).
SERVER = textwrap.dedent("""
    import socket, sys, threading
    if sys.argv[1] == "fd":
        s = socket.socket(fileno=int(sys.argv[2]))
    else:
        host, port = sys.argv[1], int(sys.argv[2])
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(64)
    print("listening", s.getsockname()[1], flush=True)
    def serve(c):
        f = c.makefile("rb")
        for line in f:
            c.sendall(line)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
""")

# A client that keeps connections as a pool does. Commands on stdin:
# "open HOST PORT N": N connections, each retried every 20 ms while it is
# refused (it says "refused" once, at the first refusal), then "opened";
# "ping": a line over each, answered ("pinged"); "close": closes them all
# ("closed"); EOF: exit 0.
CLIENT = textwrap.dedent("""
    import socket, sys, time
    held = []
    for cmd in sys.stdin:
        w = cmd.split()
        if w[0] == "open":
            host, port, n = w[1], int(w[2]), int(w[3])
            said = False
            deadline = time.monotonic() + 60
            for _ in range(n):
                while True:
                    c = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
                    try:
                        c.connect((host, port))
                        break
                    except ConnectionRefusedError:
                        c.close()
                        if not said:
                            print("refused", flush=True)
                            said = True
                        assert time.monotonic() < deadline, "refused for a minute"
                        time.sleep(0.02)
                c.settimeout(10)
                held.append(c)
            print("opened", flush=True)
        elif w[0] == "ping":
            for c in held:
                c.sendall(b"ping\\n")
                assert c.recv(5) == b"ping\\n"
            print("pinged", flush=True)
        elif w[0] == "close":
            for c in held:
                c.close()
            held.clear()
            print("closed", flush=True)
""")


def spawn(args, under_loopfast, **kw):
    cmd = lf_cmd(args) if under_loopfast else list(args)
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kw)


def say(proc, cmd, expect):
    proc.stdin.write(cmd + "\n")
    proc.stdin.flush()
    line = readline(proc)
    assert line.split()[0] == expect, f"{cmd!r}: {line!r}"
    return line


def paths(client, server_pid, port, want, timeout=30):
    """(fast, tcp): the client's connections to port whose both ends are
    seen in kernel state, once `want` of them are (bounded: a connection
    not seen at both ends by then fails the test). A connection keeps the
    path it took, so the first sample that shows them all is the answer."""
    deadline = time.monotonic() + timeout
    while True:
        cpids, spids = process_tree(client.pid), process_tree(server_pid)
        fast, tcp = fast_path_pairs(cpids, spids, port), tcp_pairs(cpids, spids, port)
        if len(fast) + len(tcp) >= want:
            return fast, tcp
        if time.monotonic() > deadline:
            pytest.fail(f"{len(fast) + len(tcp)} of {want} connection(s) to port {port} seen at both ends "
                        f"within {timeout} s")
        time.sleep(0.05)


def assert_fast(client, server_pid, port, want, what):
    fast, tcp = paths(client, server_pid, port, want)
    assert len(fast) == want and not tcp, f"{what}: {len(tcp)} of {want} connection(s) on plain TCP: {tcp}"


def assert_tcp(client, server_pid, port, want, what):
    fast, tcp = paths(client, server_pid, port, want)
    assert len(tcp) == want and not fast, f"{what}: {len(fast)} of {want} connection(s) on the fast path: {fast}"


def stopped(proc, sig=signal.SIGTERM, status=None):
    """Sends sig and checks how the program ended: death by sig, or the
    exit status it gives for it."""
    want = -sig if status is None else status
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == want, f"{proc.args!r}: exit status {proc.returncode}, not {want}"


def ended(client):
    """Closes the client's stdin: it must exit 0."""
    client.stdin.close()
    try:
        client.wait(timeout=30)
    finally:
        stop(client)
    assert client.returncode == 0, f"{client.args!r}: exit status {client.returncode}"


def server(host, port, under_loopfast=True, **kw):
    srv = spawn([sys.executable, "-c", SERVER, host, str(port)], under_loopfast, **kw)
    port = int(readline(srv).split()[1])
    return srv, port


LISTENERS = [("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "::1")]


@pytest.mark.parametrize("listen,connect", LISTENERS, ids=["127.0.0.1", "0.0.0.0", "[::]"])
def test_client_started_before_its_server(build, listen, connect):
    """A client under loopfast starts first and retries its connect every
    20 ms while it is refused; its server (under loopfast) then starts on
    that port. The first connection that succeeds is on the fast path at
    both ends, in every one of five rounds (before the fix, the refused
    attempts were remembered and it took plain TCP nearly every time)."""
    client = spawn([sys.executable, "-c", CLIENT], True)
    try:
        for rnd in range(5):
            port = free_port()
            client.stdin.write(f"open {connect} {port} 1\n")
            client.stdin.flush()
            assert readline(client).split()[0] == "refused"
            srv, port = server(listen, port)
            try:
                assert readline(client).split()[0] == "opened"
                assert_fast(client, srv.pid, port, 1, f"round {rnd}: the first connection to {listen}:{port}")
                say(client, "ping", "pinged")
                say(client, "close", "closed")
            finally:
                stopped(srv)
        ended(client)
    finally:
        stop(client)


def test_server_from_plain_to_loopfast_on_the_same_port(build):
    """A server runs plainly; a client under loopfast holds three
    connections to it: plain TCP at both ends (and the client now knows
    this listener has no rendezvous). The server is stopped and started
    again under loopfast on the same port, at once: the client's next
    three connections are on the fast path at both ends."""
    client = spawn([sys.executable, "-c", CLIENT], True)
    srv, port = server("127.0.0.1", 0, under_loopfast=False)
    try:
        say(client, f"open 127.0.0.1 {port} 3", "opened")
        assert_tcp(client, srv.pid, port, 3, "to the plain server")
        say(client, "ping", "pinged")
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 1", "opened")  # fresh: what it knows is under a second old
        stopped(srv)
        srv, _ = server("127.0.0.1", port)
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 3", "opened")
        assert_fast(client, srv.pid, port, 3, "to the server restarted under loopfast")
        say(client, "ping", "pinged")
        stopped(srv)
        ended(client)
    finally:
        stop(srv)
        stop(client)


def test_listener_handed_to_a_new_server(build):
    """Socket activation: the listening socket outlives the processes that
    serve it (the test holds it, as systemd does, and hands it to each
    server as an inherited descriptor). A plain server serves it first;
    the client under loopfast connects, plain TCP at both ends. The plain
    server stops; the client connects while none serves (its connection
    waits in the accept queue, plain TCP); a server under loopfast takes
    the same listener (same inode) and makes its rendezvous. The client's
    next connections are on the fast path at both ends, although the
    listener is the one it met without a rendezvous moments before."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(64)
    port = lst.getsockname()[1]
    fd = str(lst.fileno())
    client = spawn([sys.executable, "-c", CLIENT], True)
    srv = spawn([sys.executable, "-c", SERVER, "fd", fd], False, pass_fds=[lst.fileno()])
    try:
        readline(srv)
        say(client, f"open 127.0.0.1 {port} 2", "opened")
        assert_tcp(client, srv.pid, port, 2, "to the plain server")
        say(client, "close", "closed")
        stopped(srv)
        say(client, f"open 127.0.0.1 {port} 1", "opened")  # queued: no server, no rendezvous
        srv = spawn([sys.executable, "-c", SERVER, "fd", fd], True, pass_fds=[lst.fileno()])
        readline(srv)
        assert_tcp(client, srv.pid, port, 1, "queued while no server ran")
        say(client, "ping", "pinged")
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 3", "opened")
        assert_fast(client, srv.pid, port, 3, "once the new server made the listener's rendezvous")
        say(client, "ping", "pinged")
        stopped(srv)
        ended(client)
    finally:
        stop(srv)
        stop(client)
        lst.close()


# redis-py's ConnectionPool, as an application uses it: get_connection()
# reconnects a pooled connection whose server has gone. Commands on stdin:
# "take N": N connections from the pool, each answering PING (while the
# server is down, the whole attempt is retried every 20 ms: it says
# "retrying" once), held; "give": back to the pool; EOF: exit 0.
REDIS_CLIENT = textwrap.dedent("""
    import sys, time
    import redis
    pool = redis.ConnectionPool(host="127.0.0.1", port=int(sys.argv[1]))
    held = []
    for cmd in sys.stdin:
        w = cmd.split()
        if w[0] == "take":
            said = False
            deadline = time.monotonic() + 60
            while True:
                try:
                    for _ in range(int(w[1])):
                        c = pool.get_connection("PING")
                        held.append(c)
                        c.send_command("PING")
                        assert c.read_response() in (b"PONG", "PONG", True)
                    break
                except redis.ConnectionError:
                    for c in held:
                        pool.release(c)
                    held.clear()
                    if not said:
                        print("retrying", flush=True)
                        said = True
                    assert time.monotonic() < deadline, "no redis for a minute"
                    time.sleep(0.02)
            print("took", len(held), flush=True)
        elif w[0] == "give":
            for c in held:
                pool.release(c)
            held.clear()
            print("gave", flush=True)
""")


def redis_python():
    """A python that has redis-py (Debian's python3-redis is for the system
    python; the tests may run under another)."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import redis"], capture_output=True).returncode == 0:
            return py
    pytest.fail("redis-py is not installed (scripts/deps.sh installs python3-redis)")


def redis_server(port, tmp):
    srv = subprocess.Popen(lf_cmd(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", tmp]),
                           stdout=subprocess.PIPE, text=True)
    while "Ready to accept connections" not in readline(srv):
        pass
    return srv


def test_redis_pool_across_server_restarts(build, tmp_path):
    """redis-server under loopfast, and a redis-py pool in a client under
    loopfast holding four connections: all on the fast path at both ends.
    redis-server is stopped; the client asks its pool for connections
    while it is down (refused, retried every 20 ms, as applications
    retry); redis-server starts again on the same port. Every connection
    the pool makes after that is on the fast path at both ends, after each
    of three restarts."""
    need("redis-server")
    port = free_port()
    srv = redis_server(port, str(tmp_path))
    client = spawn([redis_python(), "-c", REDIS_CLIENT, str(port)], True)
    try:
        say(client, "take 4", "took")
        assert_fast(client, srv.pid, port, 4, "the pool's first connections")
        say(client, "give", "gave")
        for rnd in range(3):
            stopped(srv, status=0)  # redis-server shuts down cleanly on SIGTERM
            srv = None
            client.stdin.write("take 4\n")
            client.stdin.flush()
            assert readline(client).split()[0] == "retrying"
            srv = redis_server(port, str(tmp_path))
            assert readline(client).split()[0] == "took"
            assert_fast(client, srv.pid, port, 4, f"after restart {rnd + 1}")
            say(client, "give", "gave")
        stopped(srv, status=0)
        ended(client)
    finally:
        if srv:
            stop(srv)
        stop(client)
