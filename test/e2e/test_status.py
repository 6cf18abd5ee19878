"""`loopfast status`: whose rows it shows (the invoking user's by default,
root: everyone's; --all, --user, --pid), that every row names its process
or says why it cannot, and each process's counts of fast-path and plain
TCP connections with the reasons."""
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import (LOOPFAST, NOBODY, fast_path_pairs, free_port, new_netns, process_tree, readline, socket_inodes,
                      stop, tcp_connections, tcp_pairs, unix_sockets, wait_fast_path, wait_tcp)
from test_exclude import CLIENT, SERVER, listeners

# nobody cannot run a python that lives under /root (pyenv).
PY_ALL = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


# Prefixed to SERVER: listen on a port of its own, say which.
BIND = """
import socket, sys
_s = socket.socket()
_s.bind(("127.0.0.1", 0))
_s.listen(64)
print(_s.getsockname()[1], flush=True)
sys.argv[1:] = [str(_s.fileno())]
"""


def status(*args, as_nobody=None, text=False):
    """`loopfast status ARGS` (JSON unless text); as_nobody: a shared_build
    (conftest) whose command is run as nobody."""
    lf = as_nobody / "loopfast" if as_nobody else LOOPFAST
    argv = [str(lf), *([] if text else ["--json"]), "status", *args]
    p = subprocess.run((NOBODY if as_nobody else []) + argv, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout if text else json.loads(p.stdout)


def wait_for(check, *args, as_nobody=None, timeout=30):
    """Samples status until check(st) holds (a sock_diag dump can miss a
    socket that others' churn moved, so absence is never proven by one)."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        st = status(*args, as_nobody=as_nobody)
        if check(st):
            return st
        if time.monotonic() > deadline:
            pytest.fail(f"status {args} never showed what was expected: {json.dumps(st)[:3000]}")
        time.sleep(0.1)


def every_row_has_an_owner(st):
    for row in st["listeners"] + st["connections"]:
        assert (row["pid"] > 0) != bool(row["pid_unknown"]), row


def fast_pair(nobody=None):
    """A fast-path server and a client holding one connection to it, both
    under `loopfast run` (as nobody, from nobody's shared_build, when
    given). Returns (server, client, port)."""
    py = PY_ALL if nobody else sys.executable
    prefix = NOBODY if nobody else []
    lf = nobody / "loopfast" if nobody else LOOPFAST
    # The listener is made by the server itself: a listener made by another
    # uid (this test, root) gets no rendezvous in a process of nobody.
    srv = subprocess.Popen([*prefix, str(lf), "run", "--", py, "-c", BIND + SERVER], stdout=subprocess.PIPE,
                           text=True)
    port = int(readline(srv))
    assert readline(srv).strip() == "serving"
    cli = subprocess.Popen([*prefix, str(lf), "run", "--", py, "-c", CLIENT, f"127.0.0.1:{port}"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert readline(cli).strip() == "connected"
    wait_fast_path(cli, srv.pid, port)
    return srv, cli, port


@pytest.mark.timeout(120)
def test_counts_per_process_with_reasons(build):
    """One client: a fast-path connection, one to a server that did not opt
    in, one that it excludes. Its counts say so, and so do the server's."""
    fast, excl = listeners(2)
    (plain,) = listeners(1)
    pf, pe, pp = fast.getsockname()[1], excl.getsockname()[1], plain.getsockname()[1]
    srv = subprocess.Popen([str(LOOPFAST), "run", "--", sys.executable, "-c", SERVER, str(fast.fileno()),
                            str(excl.fileno())], pass_fds=(fast.fileno(), excl.fileno()), stdout=subprocess.PIPE,
                           text=True)
    psrv = subprocess.Popen([sys.executable, "-c", SERVER, str(plain.fileno())], pass_fds=(plain.fileno(),),
                            stdout=subprocess.PIPE, text=True)
    for s in (fast, excl, plain):
        s.close()
    cli = None
    try:
        assert readline(srv).strip() == "serving" and readline(psrv).strip() == "serving"
        cli = subprocess.Popen([str(LOOPFAST), "run", "--exclude", str(pe), "--", sys.executable, "-c", CLIENT,
                                f"127.0.0.1:{pf}", f"127.0.0.1:{pp}", f"127.0.0.1:{pe}"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert readline(cli).strip() == "connected"
        wait_fast_path(cli, srv.pid, pf)
        wait_tcp(cli, srv.pid, pe)

        def counted(st):
            procs = {p["pid"]: p for p in st["processes"]}
            return cli.pid in procs

        st = wait_for(counted, "--pid", str(cli.pid))
        assert [p["pid"] for p in st["processes"]] == [cli.pid]
        c = st["processes"][0]
        assert (c["fast"], c["tcp"], c["refused"]) == (1, 2, 0), c
        assert c["counts"]["fast_client"] == 1 and c["counts"]["no_rendezvous"] == 1 and c["counts"]["excluded"] == 1
        assert c["comm"] and c["user"] == "root" and c["counts_error"] is None
        assert st["scope"] == {"who": "pid", "uid": None, "user": None, "pid": cli.pid}
        rows = st["connections"]
        assert rows and all(r["pid"] == cli.pid for r in rows) and not st["listeners"]
        assert any(r["role"] == "client" and r["peer"] == f"127.0.0.1:{pf}" for r in rows)

        # The server: one connection claimed, one whose client did not
        # queue a hello (it excluded the port).
        st = wait_for(lambda st: any(p["pid"] == srv.pid and p["counts"]["plain_peer"] == 1 for p in st["processes"]),
                      "--pid", str(srv.pid))
        s = st["processes"][0]
        assert s["counts"]["fast_server"] == 1 and s["tcp"] == 1, s
        assert {l["address"] for l in st["listeners"]} == {f"127.0.0.1:{pf}", f"127.0.0.1:{pe}"}

        text = status("--pid", str(cli.pid), text=True)
        line = next(l for l in text.splitlines() if l.strip().startswith(f"pid {cli.pid} ") and "fast path" in l)
        assert "fast path 1 (client 1)" in line and "plain TCP 2" in line, text
        assert "peer not opted in 1" in line and "excluded 1" in line, text
        cli.stdin.close()
        assert readline(cli).strip() == "echoed"
    finally:
        stop(cli, srv, psrv)


@pytest.mark.timeout(120)
def test_other_users_rows_hidden_or_said_in_words(build, shared_build):
    srv, cli, port = fast_pair()
    addr = f"127.0.0.1:{port}"
    try:
        mine = wait_for(lambda st: any(c["peer"] == addr for c in st["connections"]))
        every_row_has_an_owner(mine)
        assert mine["scope"]["who"] == "all"  # root sees everyone's by default

        # Another user, by default: only its own rows (none), and a count
        # of what it does not show.
        theirs = wait_for(lambda st: st["not_shown"] >= 3, as_nobody=shared_build)
        assert theirs["scope"]["who"] == "own" and theirs["scope"]["user"] == "nobody"
        assert not [r for r in theirs["listeners"] + theirs["connections"] if r["user"] != "nobody"]

        # --all: root's rows are there, without pid, saying why.
        def ours_listed(st):
            return (any(l["address"] == addr for l in st["listeners"])
                    and any(c["peer"] == addr and c["role"] == "client" for c in st["connections"])
                    and any(c["local"] == addr and c["role"] == "server" for c in st["connections"]))
        st = wait_for(ours_listed, "--all", as_nobody=shared_build)
        every_row_has_an_owner(st)
        for row in st["listeners"] + st["connections"]:
            if addr in (row.get("address"), row.get("local"), row.get("peer")):
                assert row["pid"] == -1 and row["pid_unknown"] == "another user's process" and row["user"] == "root"
        assert st["notes"]
        text = status("--all", as_nobody=shared_build, text=True)
        assert "pid -1" not in text
        assert any(addr in l and "pid unknown: another user's process (root)" in l for l in text.splitlines()), text
        # root can name them by user, too.
        assert wait_for(ours_listed, "--user", "root")["scope"]["who"] == "own"
        cli.stdin.close()
        assert readline(cli).strip() == "echoed"
    finally:
        stop(cli, srv)


@pytest.mark.timeout(120)
def test_non_root_user_sees_own_processes(build, shared_build):
    srv, cli, port = fast_pair(nobody=shared_build)
    addr = f"127.0.0.1:{port}"
    try:
        def both(st):
            return ({(c["pid"], c["role"]) for c in st["connections"] if addr in (c["local"], c["peer"])}
                    == {(cli.pid, "client"), (srv.pid, "server")})
        st = wait_for(both, as_nobody=shared_build)
        every_row_has_an_owner(st)
        assert all(r["user"] == "nobody" for r in st["listeners"] + st["connections"])
        procs = {p["pid"]: p for p in st["processes"]}
        assert procs[cli.pid]["counts"]["fast_client"] == 1 and procs[srv.pid]["counts"]["fast_server"] == 1
        # root, asking for that user, sees the same rows.
        assert both(wait_for(both, "--user", "nobody"))
        cli.stdin.close()
        assert readline(cli).strip() == "echoed"
    finally:
        stop(cli, srv)


@pytest.mark.timeout(120)
def test_pid_shows_one_process(build):
    srv1, cli1, p1 = fast_pair()
    srv2, cli2, p2 = fast_pair()
    try:
        st = wait_for(lambda st: any(c["peer"] == f"127.0.0.1:{p2}" for c in st["connections"]), "--pid",
                      str(cli2.pid))
        assert {(c["pid"], c["peer"]) for c in st["connections"]} == {(cli2.pid, f"127.0.0.1:{p2}")}
        assert [p["pid"] for p in st["processes"]] == [cli2.pid]
        for c in (cli1, cli2):
            c.stdin.close()
            assert readline(c).strip() == "echoed"
    finally:
        stop(cli1, cli2, srv1, srv2)


@pytest.mark.parametrize("args", [["--pid"], ["--pid", "x"], ["--pid", "0"], ["--pid", "999999999"],
                                  ["--user"], ["--user", "no-such-user-here"], ["--all", "--user", "root"],
                                  ["--bogus"]])
def test_bad_arguments_one_line_status_2(build, args):
    p = subprocess.run([str(LOOPFAST), "status", *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopfast: "), p.stderr
    p = subprocess.run([str(LOOPFAST), "--json", "status", *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "error" in json.loads(p.stdout)


# Connects, forks; the child connects again; both hold their connections
# and say their pids.
FORKING_CLIENT = """
import os, socket, sys
a = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
pid = os.fork()
if pid == 0:
    b = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    os.write(1, b"child %d\\n" % os.getpid())  # one write: the two processes share the pipe
    sys.stdin.read()
    os._exit(0)
os.write(1, b"parent %d\\n" % os.getpid())
sys.stdin.read()
os.waitpid(pid, 0)
"""


@pytest.mark.timeout(120)
def test_forked_child_counts_on_its_own(build):
    """Counts are per process: a child forked after its parent counted one
    connection counts only its own, and holds only its own page."""
    srv, cli, port = fast_pair()
    fk = subprocess.Popen([str(LOOPFAST), "run", "--", sys.executable, "-c", FORKING_CLIENT, str(port)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pids = dict(readline(fk).split() for _ in range(2))
        parent, child = int(pids["parent"]), int(pids["child"])
        st = wait_for(lambda st: {parent, child} <= {p["pid"] for p in st["processes"]})
        procs = {p["pid"]: p for p in st["processes"]}
        assert procs[parent]["counts"]["fast_client"] == 1 and procs[child]["counts"]["fast_client"] == 1, procs
        pages = [fd for fd in os.listdir(f"/proc/{child}/fd")
                 if os.readlink(f"/proc/{child}/fd/{fd}") == "/memfd:loopfast-stats (deleted)"]
        assert len(pages) == 1, pages
        fk.stdin.close()
        assert fk.wait(timeout=30) == 0
        cli.stdin.close()
        assert readline(cli).strip() == "echoed"
    finally:
        stop(fk, cli, srv)


# ---- each count against the kernel: a process causes N connections of one
# kind, its count of that kind rises by exactly N and no other count moves,
# and the kernel shows those N connections as they should be (plain TCP at
# both ends, or the fast path's Unix pair), held while they are checked.

# Driven on stdin, one command a line, one answer line each; holds every
# listener and connection until its stdin closes.
#   listen HOST [PORT] [bound] -> "PORT INODE" (port 0 unless given;
#                           bound: bind only, listen later)
#   listen-now PORT      -> "ok"
#   accept PORT N        -> "ok" (N connections accepted and held)
#   close PORT           -> "ok" (the listener closed, its queue reset)
CTL_SERVER = """
import os, socket, sys
lst, held = {}, []
for line in sys.stdin:
    cmd, *a = line.split()
    if cmd == "listen":
        s = socket.socket(socket.AF_INET6 if ":" in a[0] else socket.AF_INET)
        s.bind((a[0], int(a[1]) if a[1:2] and a[1].isdigit() else 0))
        if "bound" not in a:
            s.listen(64)
        lst[s.getsockname()[1]] = s
        print(s.getsockname()[1], os.fstat(s.fileno()).st_ino, flush=True)
        continue
    s = lst[int(a[0])]
    if cmd == "listen-now":
        s.listen(64)
    elif cmd == "accept":
        held += [s.accept()[0] for _ in range(int(a[1]))]
    elif cmd == "close":
        s.close()
    print("ok", flush=True)
"""

# The client's side, the same way; each answer is one word per connection
# ("ok" or the errno's name).
#   connect HOST PORT N        -> N connects, held
#   connect-from HOST PORT P.. -> one connect from each local port P
#   starved HOST PORT N        -> N connects made with no descriptor free
#   read PORT                  -> a blocking read on each held connection to PORT
CTL_CLIENT = """
import errno, os, resource, socket, sys
held = []
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
def sock(host, src=0):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    if src:
        s.bind((host, src))
    return s
def connect(s, host, port):
    try:
        s.connect((host, port))
    except OSError as e:
        s.close()
        return errno.errorcode[e.errno]
    held.append((port, s))
    return "ok"
def read(s):
    try:
        return "eof" if s.recv(1) == b"" else "data"
    except OSError as e:
        return errno.errorcode[e.errno]
for line in sys.stdin:
    cmd, *a = line.split()
    if cmd == "connect":
        out = [connect(sock(a[0]), a[0], int(a[1])) for _ in range(int(a[2]))]
    elif cmd == "connect-from":
        out = [connect(sock(a[0], int(p)), a[0], int(a[1])) for p in a[2:]]
    elif cmd == "starved":
        socks, fill = [sock(a[0]) for _ in range(int(a[2]))], []
        try:
            while True:
                fill.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        out = [connect(s, a[0], int(a[1])) for s in socks]
        for f in fill:
            os.close(f)
    elif cmd == "read":
        out = [read(s) for p, s in held if p == int(a[0])]
    print(*out, flush=True)
"""


class Ctl:
    """A CTL_SERVER or CTL_CLIENT, under `loopfast run` (with its options)
    unless lf is None; ctl("cmd", args...) returns the answer's words."""

    def __init__(self, script, lf=(), prefix=()):
        run = [] if lf is None else [str(LOOPFAST), "run", *lf, "--"]
        self.p = subprocess.Popen([*prefix, *run, sys.executable, "-c", script], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.pid = self.p.pid

    def __call__(self, *words, timeout=60):
        self.p.stdin.write(" ".join(map(str, words)) + "\n")
        self.p.stdin.flush()
        return readline(self.p, timeout).split()

    def stop(self):
        stop(self.p)


def counts(pid):
    """The process's counts, as `loopfast status --pid` reads them (all 0
    before its first count)."""
    st = status("--pid", str(pid))
    procs = [p for p in st["processes"] if p["pid"] == pid]
    if not procs:
        return {}
    assert procs[0]["counts_error"] is None, procs[0]
    return dict(procs[0]["counts"], _groups=(procs[0]["fast"], procs[0]["tcp"], procs[0]["refused"]))


def rose(pid, before, **want):
    """Checks that pid's counts rose from before by exactly want (every
    other count unchanged, and the fast / plain TCP / refused sums with
    them); returns the counts now."""
    after = counts(pid)
    keys = set(after) - {"_groups"}
    got = {k: after[k] - before.get(k, 0) for k in keys if after[k] != before.get(k, 0)}
    assert got == want, (pid, got, after)
    fast = sum(v for k, v in want.items() if k.startswith("fast_"))
    refused = sum(v for k, v in want.items() if k in ("unvouched", "dropped"))
    tcp = sum(want.values()) - fast - refused - want.get("orphaned", 0)
    was = before.get("_groups", (0, 0, 0))
    assert after["_groups"] == (was[0] + fast, was[1] + tcp, was[2] + refused), (pid, after)
    return after


def started(srv, cli, port, m=2, host="127.0.0.1"):
    """m fast-path connections from cli to srv's port (the first counts of
    both; cli's first connects also make what later ones need: its
    sock_diag socket and its page of counts); checked in the kernel,
    both ends. Returns (client counts, server counts)."""
    c0, s0 = counts(cli.pid), counts(srv.pid)
    assert cli("connect", host, port, m) == ["ok"] * m
    assert srv("accept", port, m) == ["ok"]
    assert len(wait_fast_path(cli.p, srv.pid, port, want=m)) == m
    return rose(cli.pid, c0, fast_client=m), rose(srv.pid, s0, fast_server=m)


def held_tcp(cli, srv_pid, port, n, fast=0):
    """Exactly n plain TCP connections from cli to port, both ends held,
    and exactly `fast` on the fast path."""
    assert len(wait_tcp(cli.p, srv_pid, port, want=n, fast=fast)) == n
    assert len(tcp_pairs(process_tree(cli.pid), process_tree(srv_pid), port)) == n


def listener_rendezvous(pid, ino):
    """The abstract name of the rendezvous of listener inode ino that pid
    holds, from the kernel (`ss -x -l`, the sockets in /proc/PID/fd)."""
    held = socket_inodes([pid])
    out = subprocess.run(["ss", "-H", "-x", "-l", "-n"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[4].startswith("@loopfast/") and "/L/" in f[4] and f[4].endswith(f"/{ino}") \
                and int(f[5]) in held:
            return f[4]
    pytest.fail(f"pid {pid} holds no rendezvous for listener inode {ino}:\n{out}")


N = 3  # fallbacks of each kind


@pytest.fixture
def procs():
    """Ctl processes to stop at the end: procs(ctl) registers and returns it."""
    started_ = []

    def add(ctl):
        started_.append(ctl)
        return ctl
    yield add
    for c in reversed(started_):
        c.stop()


def lf_server(procs, *hosts, lf=()):
    """A CTL_SERVER under loopfast with a listener on each host; returns it
    and [(port, inode)]."""
    srv = procs(Ctl(CTL_SERVER, lf=lf))
    return srv, [tuple(map(int, srv("listen", h))) for h in hosts]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_count_no_rendezvous(build, procs, host):
    """"peer not opted in": N connects to a server not under loopfast, all
    counted so, the second and later ones too (they take plain TCP without
    asking again, README)."""
    srv, [(pf, _)] = lf_server(procs, host)
    plain = procs(Ctl(CTL_SERVER, lf=None))
    pp = int(plain("listen", host)[0])
    cli = procs(Ctl(CTL_CLIENT))
    c1, _ = started(srv, cli, pf, host=host)
    assert cli("connect", host, pp, N) == ["ok"] * N
    assert plain("accept", pp, N) == ["ok"]
    held_tcp(cli, plain.pid, pp, N)
    rose(cli.pid, c1, no_rendezvous=N)
    assert counts(plain.pid) == {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_count_excluded(build, procs, host):
    """"excluded": N connects to a destination the client excludes; the
    server counts them as its clients' choice ("client not opted in")."""
    srv, [(pf, _), (px, _)] = lf_server(procs, host, host)
    cli = procs(Ctl(CTL_CLIENT, lf=["--exclude", f"[{host}]:{px}" if ":" in host else f"{host}:{px}"]))
    c1, s1 = started(srv, cli, pf, host=host)
    assert cli("connect", host, px, N) == ["ok"] * N
    assert srv("accept", px, N) == ["ok"]
    held_tcp(cli, srv.pid, px, N)
    rose(cli.pid, c1, excluded=N)
    rose(srv.pid, s1, plain_peer=N)


@pytest.mark.timeout(120)
def test_count_excluded_listener(build, procs):
    """A listener the server excludes has no rendezvous: its clients count
    N connects to it as "peer not opted in", and the server counts none
    (only a listener with a rendezvous counts its clients)."""
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        px = s.getsockname()[1]
    srv, [(pf, _)] = lf_server(procs, "::1", lf=["--exclude", f"[::1]:{px}"])
    assert int(srv("listen", "::1", px)[0]) == px
    cli = procs(Ctl(CTL_CLIENT))
    c1, s1 = started(srv, cli, pf, host="::1")
    assert cli("connect", "::1", px, N) == ["ok"] * N
    assert srv("accept", px, N) == ["ok"]
    held_tcp(cli, srv.pid, px, N)
    rose(cli.pid, c1, no_rendezvous=N)
    rose(srv.pid, s1)


@pytest.mark.timeout(120)
def test_count_plain_peer(build, procs):
    """"client not opted in": N connects from a client not under loopfast,
    counted by the server."""
    srv, [(pf, _)] = lf_server(procs, "127.0.0.1")
    cli = procs(Ctl(CTL_CLIENT))
    plain = procs(Ctl(CTL_CLIENT, lf=None))
    _, s1 = started(srv, cli, pf)
    assert plain("connect", "127.0.0.1", pf, N) == ["ok"] * N
    assert srv("accept", pf, N) == ["ok"]
    held_tcp(plain, srv.pid, pf, N)
    rose(srv.pid, s1, plain_peer=N)
    assert counts(plain.pid) == {}


@pytest.mark.timeout(120)
def test_count_no_listener(build, procs):
    """"no listener": N connects to a port nothing listens on, refused as
    over TCP; there is no connection for the kernel to show."""
    srv, [(pf, _)] = lf_server(procs, "127.0.0.1")
    cli = procs(Ctl(CTL_CLIENT))
    c1, _ = started(srv, cli, pf)
    port = free_port()
    assert cli("connect", "127.0.0.1", port, N) == ["ECONNREFUSED"] * N
    rose(cli.pid, c1, no_listener=N)
    assert not tcp_connections([cli.pid], port)


@pytest.mark.timeout(120)
def test_count_setup_failed(build, procs):
    """"setup failed": N connects made when the client has no descriptor
    free for its hello (EMFILE): plain TCP, which needs none."""
    srv, [(pf, _), (px, _)] = lf_server(procs, "127.0.0.1", "127.0.0.1")
    cli = procs(Ctl(CTL_CLIENT))
    c1, s1 = started(srv, cli, pf)
    assert cli("starved", "127.0.0.1", px, N) == ["ok"] * N
    assert srv("accept", px, N) == ["ok"]
    held_tcp(cli, srv.pid, px, N)
    rose(cli.pid, c1, failed=N)
    rose(srv.pid, s1, plain_peer=N)


# Fills a rendezvous (argv[1], as ss prints it) with connections that send
# nothing until it refuses more (EAGAIN), says how many, and holds them.
FLOOD = """
import resource, socket, sys
hard = max(10000, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
while True:
    u = socket.socket(socket.AF_UNIX)
    u.setblocking(False)
    try:
        u.connect(b"\\0" + sys.argv[1][1:].encode())
    except BlockingIOError:
        break
    held.append(u)
print(len(held), flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(180)
def test_count_rendezvous_full(build, procs):
    """"rendezvous full": N connects to a listener whose rendezvous a flood
    has filled, all counted so (the second and later ones too, which take
    plain TCP for a second without asking again)."""
    srv, [(pf, _), (px, ino)] = lf_server(procs, "127.0.0.1", "127.0.0.1")
    cli = procs(Ctl(CTL_CLIENT))
    c1, s1 = started(srv, cli, pf)
    flood = subprocess.Popen([sys.executable, "-c", FLOOD, listener_rendezvous(srv.pid, ino)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert int(readline(flood, 120)) >= 64  # it took what the backlog holds, then EAGAIN
        assert cli("connect", "127.0.0.1", px, N) == ["ok"] * N
        assert srv("accept", px, N) == ["ok"]
        held_tcp(cli, srv.pid, px, N)
        rose(cli.pid, c1, busy=N)
        rose(srv.pid, s1, plain_peer=N)
    finally:
        stop(flood)


# Binds and listens on a rendezvous name (argv[1], as ss prints it) before
# its listener does; holds it until its stdin closes.
SQUAT = """
import socket, sys
r = socket.socket(socket.AF_UNIX)
r.bind(b"\\0" + sys.argv[1][1:].encode())
r.listen(64)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(120)
def test_count_rendezvous_not_the_owners(build, procs):
    """"rendezvous not the listener owner's": another user (nobody) took the
    rendezvous name of a listener before it listened; N connects to it."""
    srv, [(pf, ref)] = lf_server(procs, "127.0.0.1")
    px, ino = map(int, srv("listen", "127.0.0.1", "bound"))
    name = listener_rendezvous(srv.pid, ref)
    name = name[:-len(str(ref))] + str(ino)
    squat = subprocess.Popen([*NOBODY, PY_ALL, "-c", SQUAT, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert readline(squat).strip() == "ready"
        assert srv("listen-now", px) == ["ok"]
        cli = procs(Ctl(CTL_CLIENT))
        c1, s1 = started(srv, cli, pf)
        assert cli("connect", "127.0.0.1", px, N) == ["ok"] * N
        assert srv("accept", px, N) == ["ok"]
        held_tcp(cli, srv.pid, px, N)
        rose(cli.pid, c1, not_owner=N)
        rose(srv.pid, s1)  # a listener without a rendezvous counts nothing
    finally:
        stop(squat)


@pytest.mark.timeout(120)
def test_count_orphaned(build, procs):
    """"fast path ended unclaimed by the server": N fast-path connects whose
    server closes its listener before accepting them: the client's reads
    say what TCP's would (reset), and the count says so."""
    srv, [(pf, _), (px, _)] = lf_server(procs, "127.0.0.1", "127.0.0.1")
    cli = procs(Ctl(CTL_CLIENT))
    c1, _ = started(srv, cli, pf)
    assert cli("connect", "127.0.0.1", px, N) == ["ok"] * N
    assert srv("close", px) == ["ok"]
    assert cli("read", px) == ["ECONNRESET"] * N
    rose(cli.pid, c1, fast_client=N, orphaned=N)
    # What TCP says in the same case.
    plain_srv, plain_cli = procs(Ctl(CTL_SERVER, lf=None)), procs(Ctl(CTL_CLIENT, lf=None))
    pp = int(plain_srv("listen", "127.0.0.1")[0])
    assert plain_cli("connect", "127.0.0.1", pp, N) == ["ok"] * N
    assert plain_srv("close", pp) == ["ok"]
    assert plain_cli("read", pp) == ["ECONNRESET"] * N


OTHER = "198.51.100.7"  # TEST-NET-2: a local address that is not loopback, in the test's own namespace


@pytest.fixture
def own_netns():
    """The test in its own network namespace (conftest.new_netns) whose
    lo also has OTHER, a local address that is not loopback (a machine
    may have none of its own)."""
    with new_netns(["ip", "addr", "add", f"{OTHER}/32", "dev", "lo"]):
        yield


def tcp_peers(pid, port):
    """The peer addresses of pid's established TCP sockets to port (ss)."""
    out = subprocess.run(["ss", "-H", "-t", "-n", "-e", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    held = socket_inodes([pid])
    return [f[3] for f in map(str.split, out.splitlines())
            if any(w.startswith("ino:") and int(w[4:]) in held for w in f)]


@pytest.mark.timeout(120)
def test_count_not_loopback(build, procs, own_netns):
    """"not loopback": N connects to a local address that is not loopback,
    served by the same wildcard listener as the fast ones. The server
    counts only its loopback clients (a remote peer is no fallback)."""
    srv, [(port, _)] = lf_server(procs, "0.0.0.0")
    cli = procs(Ctl(CTL_CLIENT))
    c1, s1 = started(srv, cli, port)
    assert cli("connect", OTHER, port, N) == ["ok"] * N
    assert srv("accept", port, N) == ["ok"]
    held_tcp(cli, srv.pid, port, N, fast=2)
    assert all(p.startswith(f"{OTHER}:") for p in tcp_peers(cli.pid, port)), tcp_peers(cli.pid, port)
    rose(cli.pid, c1, not_loopback=N)
    rose(srv.pid, s1)


# Queues hellos as another user would: for each name on a "queue NAME..."
# line, a Unix socket bound to NAME connected to the rendezvous (argv[1],
# as ss prints it); answers "ok", and holds them until its stdin closes.
FORGE = """
import resource, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for line in sys.stdin:
    for name in line.split()[1:]:
        u = socket.socket(socket.AF_UNIX)
        u.bind(b"\\0" + name[1:].encode())
        u.connect(b"\\0" + sys.argv[1][1:].encode())
        held.append(u)
    print("ok", flush=True)
"""


def forged(ref, cport, nonce):
    """A client's hello name like ref (a real one, as ss prints it) but from
    local port cport, with its own nonce."""
    f = ref.split("/")
    c = f.index("C")
    f[c + 3], f[-1] = str(cport), "f%x" % nonce
    return "/".join(f)


def client_name(cli, port):
    """The name of one of cli's fast-path sockets to port (ss)."""
    names = [unix_sockets()[c][0] for c, _ in fast_path_pairs([cli.pid], process_tree(cli.pid), port)] or \
        [n for i, (n, _) in unix_sockets().items() if i in socket_inodes([cli.pid]) and f"/{port}/" in n]
    assert names, f"pid {cli.pid} holds no fast-path socket to port {port}"
    return names[0]


@pytest.mark.timeout(120)
def test_count_unvouched(build, procs):
    """"hellos refused: unvouched": another user (nobody) queues a hello
    naming each of N connections before its client does; the server
    refuses each (the kernel says the TCP socket is root's), counts it,
    and takes the real hello after it: all N on the fast path."""
    srv, [(pf, ino)] = lf_server(procs, "127.0.0.1")
    cli = procs(Ctl(CTL_CLIENT))
    c1, s1 = started(srv, cli, pf)
    ref = client_name(cli, pf)
    ports = [free_port() for _ in range(N)]
    forge = subprocess.Popen([*NOBODY, PY_ALL, "-c", FORGE, listener_rendezvous(srv.pid, ino)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        forge.stdin.write("queue " + " ".join(forged(ref, p, i) for i, p in enumerate(ports)) + "\n")
        forge.stdin.flush()
        assert readline(forge).strip() == "ok"
        assert cli("connect-from", "127.0.0.1", pf, *ports) == ["ok"] * N
        assert srv("accept", pf, N) == ["ok"]
        assert len(wait_fast_path(cli.p, srv.pid, pf, want=2 + N)) == 2 + N
        rose(cli.pid, c1, fast_client=N)
        rose(srv.pid, s1, fast_server=N, unvouched=N)
    finally:
        stop(forge)


@pytest.mark.timeout(180)
def test_count_dropped(build, procs):
    """"hellos refused: over their uid's share": another user (nobody)
    queues junk hellos naming the port; an accept on the way to its own
    hello stashes them up to that uid's share and drops the rest. Once the
    share is full, N more junk hellos are N more drops."""
    srv, [(pf, ino)] = lf_server(procs, "127.0.0.1")
    cli = procs(Ctl(CTL_CLIENT))
    c1, s1 = started(srv, cli, pf)
    ref = client_name(cli, pf)
    forge = subprocess.Popen([*NOBODY, PY_ALL, "-c", FORGE, listener_rendezvous(srv.pid, ino)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    nonce = iter(range(1 << 30))

    def junk_then_one(k):
        forge.stdin.write("queue " + " ".join(forged(ref, 1024 + next(nonce) % 60000, next(nonce))
                                              for _ in range(k)) + "\n")
        forge.stdin.flush()
        assert readline(forge, 120).strip() == "ok"
        assert cli("connect", "127.0.0.1", pf, 1) == ["ok"]
        assert srv("accept", pf, 1) == ["ok"]

    try:
        junk_then_one(1100)  # more than a share can be (a quarter of at most 4096)
        s2 = counts(srv.pid)
        assert s2["dropped"] >= 1100 - 1024, s2
        c2 = rose(cli.pid, c1, fast_client=1)
        junk_then_one(N)
        rose(srv.pid, s2, fast_server=1, dropped=N)
        rose(cli.pid, c2, fast_client=1)
        assert len(wait_fast_path(cli.p, srv.pid, pf, want=4)) == 4
    finally:
        stop(forge)
