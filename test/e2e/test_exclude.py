"""The opt-out: `loopfast run --exclude` / LOOPFAST_EXCLUDE keeps the named
listeners (server side) and destinations (client side) on plain TCP while
every other loopback connection of the same processes takes the fast path.
Each connection is checked from kernel state, both ends, while it is held."""
import os
import socket
import subprocess
import sys

import pytest

from conftest import LOOPFAST, echo_server, process_tree, readline, stop, tcp_pairs, wait_fast_path, wait_tcp

# Echoes on every listening socket it inherits (fds in argv), one thread per
# connection.
SERVER = echo_server("fds")

# Connects to every address in argv, says so, holds the connections until
# its stdin closes, then checks an echo on each.
CLIENT = """
import socket, sys
conns = [socket.create_connection((h, int(p))) for h, p in (a.rsplit(":", 1) for a in sys.argv[1:])]
print("connected", flush=True)
sys.stdin.read()
for c in conns:
    c.sendall(b"ping")
    got = b""
    while len(got) < 4:
        got += c.recv(4)
    assert got == b"ping", got
print("echoed", flush=True)
"""


def listeners(n, host="127.0.0.1"):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks = []
    for _ in range(n):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.bind((host, 0))
        s.listen(64)
        s.set_inheritable(True)
        socks.append(s)
    return socks


def run_pair(server_exclude, client_exclude, host="127.0.0.1"):
    """A server holding two listeners (A, B) and a client connected to
    both, each under `loopfast run` with the given --exclude (None: none).
    Returns (server, client, port A, port B); the caller stops both."""
    a, b = listeners(2, host)
    pa, pb = a.getsockname()[1], b.getsockname()[1]

    def lf(exclude, *args):
        ex = ["--exclude", exclude.format(a=pa, b=pb)] if exclude else []
        return [str(LOOPFAST), "run", *ex, "--", sys.executable, "-c", *args]

    srv = subprocess.Popen(lf(server_exclude, SERVER, str(a.fileno()), str(b.fileno())), pass_fds=(a.fileno(), b.fileno()),
                           stdout=subprocess.PIPE, text=True)
    a.close()
    b.close()
    cli = None
    try:
        assert readline(srv).strip() == "serving"
        addr = f"[{host}]" if ":" in host else host
        cli = subprocess.Popen(lf(client_exclude, CLIENT, f"{host}:{pa}", f"{host}:{pb}"), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        assert readline(cli).strip() == "connected", addr
    except BaseException:
        for p in (cli, srv):
            if p:
                stop(p)
        raise
    return srv, cli, pa, pb


@pytest.mark.timeout(120)
@pytest.mark.parametrize("server_exclude, client_exclude", [
    ("{a}", "{a}"),                       # what `loopfast run --exclude` gives a process tree
    ("{a}", None),                        # the listener alone: its clients find no rendezvous
    (None, "127.0.0.1:{a}"),              # the destination alone: the server sees a plain client
    ("{b},127.0.0.1:{a}", "{b},{a}"),     # lists; B excluded too
], ids=["both", "server-only", "client-only", "lists"])
def test_excluded_port_stays_tcp_other_port_fast(build, server_exclude, client_exclude):
    srv, cli, pa, pb = run_pair(server_exclude, client_exclude)
    try:
        wait_tcp(cli, srv.pid, pa)  # TCP connection held at both ends, and not on the fast path
        if "{b}" in (server_exclude or ""):
            wait_tcp(cli, srv.pid, pb)
        else:
            wait_fast_path(cli, srv.pid, pb)
        cli.stdin.close()
        assert readline(cli).strip() == "echoed"
        assert cli.wait(timeout=30) == 0
    finally:
        stop(cli, srv)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host, server_exclude, client_exclude, a_fast", [
    ("::1", "[::1]:{a}", None, False),          # an IPv6 listener, by address
    ("::1", "{a}", None, False),                # ... by port alone
    ("::1", "localhost:{a}", None, False),      # ... as localhost (127.0.0.1 and ::1)
    ("::1", "127.0.0.1:{a}", None, True),       # another address: not excluded
    ("::1", None, "[::1]:{a}", False),          # an IPv6 destination, by address
    ("::1", None, "{a}", False),                # ... by port alone
    ("::1", None, "127.0.0.1:{a}", True),       # another address: not excluded
    ("127.0.0.1", "127.0.0.1:{a}", None, False),  # an IPv4 listener, by address
    ("127.0.0.1", "[::1]:{a}", None, True),       # another address: not excluded
    ("127.0.0.1", None, "localhost:{a}", False),  # an IPv4 destination, as localhost
], ids=["v6-listener-addr", "v6-listener-port", "v6-listener-localhost", "v6-listener-other-addr",
        "v6-dest-addr", "v6-dest-port", "v6-dest-other-addr", "v4-listener-addr", "v4-listener-other-addr",
        "v4-dest-localhost"])
def test_exclude_by_family_and_address(build, host, server_exclude, client_exclude, a_fast):
    """Listener A (server side) or destination A (client side) excluded in
    each way it can be written, on IPv6 and IPv4: A's connection is plain
    TCP at both ends (sock_diag's TCP sockets, held by the client and the
    server) and not on the fast path, while B, in the same processes, is
    on the fast path (both ends' Unix sockets paired); an entry naming
    another address leaves A on the fast path."""
    srv, cli, pa, pb = run_pair(server_exclude, client_exclude, host=host)
    try:
        if a_fast:
            wait_fast_path(cli, srv.pid, pa)
        else:
            assert len(wait_tcp(cli, srv.pid, pa)) == 1
        wait_fast_path(cli, srv.pid, pb)
        assert not tcp_pairs(process_tree(cli.pid), process_tree(srv.pid), pb)
        cli.stdin.close()
        assert readline(cli).strip() == "echoed"
        assert cli.wait(timeout=30) == 0
    finally:
        stop(cli, srv)


@pytest.mark.parametrize("value", ["", "x", "0", "65536", "::1:80", "[::1]", "127.0.0.1:", "80,foo"])
def test_bad_exclude_one_line_status_2(build, value):
    p = subprocess.run([str(LOOPFAST), "run", "--exclude", value, "--", "true"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--exclude" in lines[0], p.stderr


def test_bad_environment_value_one_line_and_ignored(build):
    """A bad entry in LOOPFAST_EXCLUDE: one line on stderr from the process,
    the good entries still apply, the program runs."""
    a, b = listeners(2)
    pa, pb = a.getsockname()[1], b.getsockname()[1]
    env = dict(os.environ, LOOPFAST_EXCLUDE=f"nonsense,{pa},[::1]")
    srv = subprocess.Popen([str(LOOPFAST), "run", "--", sys.executable, "-c", SERVER, str(a.fileno()), str(b.fileno())],
                           pass_fds=(a.fileno(), b.fileno()), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
    a.close()
    b.close()
    cli = None
    try:
        assert readline(srv).strip() == "serving"
        cli = subprocess.Popen([str(LOOPFAST), "run", "--", sys.executable, "-c", CLIENT, f"127.0.0.1:{pa}",
                                f"127.0.0.1:{pb}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        assert readline(cli).strip() == "connected"
        wait_tcp(cli, srv.pid, pa)
        wait_fast_path(cli, srv.pid, pb)
        cli.stdin.close()
        assert readline(cli).strip() == "echoed"
        assert cli.wait(timeout=30) == 0
        err = cli.stderr.read().strip().splitlines()
        assert len(err) == 1 and "LOOPFAST_EXCLUDE: ignoring 'nonsense'" in err[0], err
    finally:
        stop(cli, srv)
    err = srv.stderr.read().strip().splitlines()
    assert len(err) == 1 and "ignoring 'nonsense'" in err[0], err
