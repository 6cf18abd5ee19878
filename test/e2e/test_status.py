"""`loopfast status`: whose rows it shows (the invoking user's by default,
root: everyone's; --all, --user, --pid), that every row names its process
or says why it cannot, and each process's counts of fast-path and plain
TCP connections with the reasons."""
import json
import os
import subprocess
import sys

import pytest

from conftest import LOOPFAST, NOBODY, readline, stop, wait_fast_path, wait_path
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
        wait_path(cli, srv.pid, pe, "tcp")

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
        for p in (cli, srv, psrv):
            if p:
                stop(p)


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
        stop(cli)
        stop(srv)


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
        stop(cli)
        stop(srv)


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
        for p in (cli1, cli2, srv1, srv2):
            stop(p)


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
    print("child", os.getpid(), flush=True)
    sys.stdin.read()
    os._exit(0)
print("parent", os.getpid(), flush=True)
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
        for p in (fk, cli, srv):
            stop(p)
