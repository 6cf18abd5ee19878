"""Real servers (Redis, MariaDB, PostgreSQL) under `loopfast run` answer real
queries from their own unmodified clients exactly as over plain TCP, and the
connections are really on the fast path.

Each test starts one server under `loopfast run` with its data in a
temporary directory and free ports; the same server is then queried by a
client under `loopfast run` (fast path) and by a plain client (TCP). Every
fast client's connection is checked from kernel state, both ends (see
conftest.wait_fast_path), while the client is made to hold it: a
command-line client waits for its input on stdin until the check is done;
a benchmark's clients wait on a lock the test holds (a paused server for
redis-benchmark, a table lock for sysbench and pgbench) -- those check
every connection of the measured run, not the single connection of a
setup step (prepare, cleanup, pgbench -i). The server's Debian package is
installed when missing; a failure to install fails the test.
"""
import hashlib
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("LOOPFAST_BUILD", os.path.join(ROOT, "build"))
LOOPFAST = os.path.join(BUILD, "loopfast")
os.environ["LOOPFAST_BIN"] = LOOPFAST
sys.path.insert(0, os.path.join(ROOT, "bench", "apps"))

import apps_mariadb  # noqa: E402
import apps_nginx  # noqa: E402
import apps_postgres  # noqa: E402
import apps_redis  # noqa: E402
from apps_install import ensure_packages  # noqa: E402
from apps_proc import Reaper  # noqa: E402
from conftest import process_tree, readline, socket_inodes, stop, tcp_connections, unix_sockets, wait_fast_path, wait_status  # noqa: E402,E501

# Installing a server's packages on a fresh machine takes minutes.
# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = [pytest.mark.timeout(900), pytest.mark.extra]


def start(mod, kind="fast"):
    try:
        ensure_packages(mod.PACKAGES)
    except RuntimeError as e:
        pytest.fail(f"{mod.NAME} cannot be installed here: {e}")
    reaper = Reaper()
    app = mod.App(reaper, ["fast"])
    try:
        app.start_single(kind)
    except BaseException:
        reaper.close()
        raise
    return reaper, app


@pytest.fixture(scope="module")
def redis():
    reaper, app = start(apps_redis)
    yield app
    reaper.close()


@pytest.fixture(scope="module")
def mariadb():
    reaper, app = start(apps_mariadb)
    yield app
    reaper.close()


@pytest.fixture(scope="module")
def postgres():
    reaper, app = start(apps_postgres)
    yield app
    reaper.close()


def server(app):
    """The fast server's pid and port."""
    srv, port, _ = app.servers["fast"]
    return srv.pid, port


def finish(p, argv, stdin, timeout):
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    finally:
        stop(p)
    assert p.returncode == 0, f"{argv} exited {p.returncode}: {err.decode(errors='replace')[-800:]}"
    return out


def run(argv, fast, stdin=None, timeout=60, app=None, held=True):
    """Runs a client; returns its stdout. Under `loopfast run` (fast, with
    held) it must connect before it reads stdin: it gets its input only
    once the kernel shows its connection to app's server on the fast path,
    both ends. held=False: a setup step that cannot wait (not checked)."""
    if not fast:
        p = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
        assert p.returncode == 0, f"{argv} exited {p.returncode}: {p.stderr.decode(errors='replace')[-800:]}"
        return p.stdout
    p = subprocess.Popen([LOOPFAST, "run", "--", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    if held:
        try:
            wait_fast_path(p, *server(app))
        except BaseException:
            stop(p)
            raise
    return finish(p, argv, stdin or b"", timeout)


def run_locked(app, argv, clients, lock):
    """Runs a benchmark under `loopfast run` while `lock` (a Popen of a
    plain client that holds a lock until its stdin closes) keeps every
    client waiting; checks that all `clients` connections are on the fast
    path, releases the lock, and returns the benchmark's output."""
    p = subprocess.Popen([LOOPFAST, "run", "--", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        try:
            wait_fast_path(p, *server(app), want=clients)
        finally:
            lock.stdin.close()
            assert lock.wait(timeout=60) == 0, "the lock holder failed"
        return finish(p, argv, None, 120)
    finally:
        stop(p, lock)


def assert_on_fast_path(app, argv, stdin, expect):
    """Runs a client under `loopfast run` that waits for its input on stdin;
    while it does, the kernel must show its connection on the fast path,
    both ends, and `loopfast status` must list both; then it gets its input
    and must answer."""
    pid, port = server(app)
    addr = f"127.0.0.1:{port}"
    p = subprocess.Popen([LOOPFAST, "run", "--", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        wait_fast_path(p, pid, port)
        tree = process_tree(pid)

        def both_listed(st):
            conns = st["connections"]
            return (any(lst["address"] == addr for lst in st["listeners"])
                    and any(c["role"] == "server" and c["local"] == addr and c["pid"] in tree for c in conns)
                    and any(c["role"] == "client" and c["peer"] == addr and c["pid"] == p.pid for c in conns))
        wait_status(both_listed)
    except BaseException:
        stop(p)
        raise
    assert expect in finish(p, argv, stdin, 60)


# Redis

REDIS_SCRIPT = b"""FLUSHALL
SET greeting hello
GET greeting
INCR counter
INCRBY counter 41
RPUSH list a b c
LRANGE list 0 -1
HSET h f1 v1 f2 v2
HGETALL h
GET missing
EXISTS greeting missing
"""


def redis_cli(app, fast, *args, stdin=None):
    _, port, _ = app.servers["fast"]
    return run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], fast, stdin, app=app)


def test_redis_same_answers_as_tcp(redis):
    plain = redis_cli(redis, False, stdin=REDIS_SCRIPT)
    fast = redis_cli(redis, True, stdin=REDIS_SCRIPT)
    assert b"hello" in plain and b"42" in plain
    assert fast == plain


def test_redis_large_value_round_trip(redis):
    big = os.urandom(700_000).hex().encode()  # 1.4 MB
    assert redis_cli(redis, True, "-x", "SET", "big", stdin=big).strip() == b"OK"
    # The fast clients take their command on stdin (so that they hold their
    # connection until it is checked); the plain one as arguments.
    got_fast = redis_cli(redis, True, "--no-raw", stdin=b"STRLEN big\n")
    got_plain = redis_cli(redis, False, "--raw", "GET", "big").rstrip(b"\n")
    got_fast_val = redis_cli(redis, True, "--raw", stdin=b"GET big\n").rstrip(b"\n")
    assert b"1400000" in got_fast
    assert hashlib.sha256(got_plain).hexdigest() == hashlib.sha256(big).hexdigest()
    assert got_fast_val == got_plain


def test_redis_benchmark_completes_on_fast_path(redis):
    """Writes are paused while the 8 SET clients connect (the GET phase's 8
    are not checked)."""
    _, port, _ = redis.servers["fast"]
    pause = subprocess.Popen(["redis-cli", "-h", "127.0.0.1", "-p", str(port)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    pause.stdin.write("CLIENT PAUSE 120000 WRITE\n")
    pause.stdin.flush()
    assert readline(pause).strip() == "OK"
    pause.stdin.write("CLIENT UNPAUSE\n")  # sent when run_locked closes stdin
    out = run_locked(redis, ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get", "-n", "5000",
                             "-c", "8", "--csv"], 8, pause)
    assert b'"SET"' in out and b'"GET"' in out


def test_redis_connection_is_on_fast_path(redis):
    _, port, _ = redis.servers["fast"]
    assert_on_fast_path(redis, ["redis-cli", "-h", "127.0.0.1", "-p", str(port)], b"PING\n", b"PONG")


# MariaDB

SQL = """CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, name VARCHAR(64), v DOUBLE);
DELETE FROM t;
INSERT INTO t VALUES (1, 'one', 1.5), (2, 'two', 2.25), (3, 'three', NULL);
SELECT * FROM t ORDER BY id;
SELECT COUNT(*), SUM(v) FROM t;
UPDATE t SET v = v * 2 WHERE id = 2;
SELECT name, v FROM t WHERE id = 2;
SELECT LENGTH(REPEAT('x', 1000000)), MD5(REPEAT('ab', 300000));
SELECT REPEAT('y', 200000);
SELECT USER();
"""


def mariadb_argv(app, *extra):
    _, port, _ = app.servers["fast"]
    return ["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{port}", "-usbtest", "-psbtest", "sbtest", "-N", "-B",
            *extra]


def mariadb_cli(app, fast, sql, *extra):
    return run(mariadb_argv(app, *extra), fast, sql.encode(), app=app)


def mariadb_lock(app, sql):
    """A plain client that runs sql (which takes a lock) and holds its
    session until its stdin closes."""
    p = subprocess.Popen(mariadb_argv(app, "--unbuffered"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    p.stdin.write(f"{sql}; SELECT 'locked';\n")
    p.stdin.flush()
    assert readline(p).strip() == "locked"
    return p


def test_mariadb_same_answers_as_tcp(mariadb):
    plain = mariadb_cli(mariadb, False, SQL)
    fast = mariadb_cli(mariadb, True, SQL)
    assert b"sbtest@127.0.0.1" in plain and b"1\tone\t1.5" in plain
    assert fast == plain  # USER() too: the server sees the client's TCP address


def test_mariadb_sysbench_on_fast_path(mariadb):
    _, port, _ = mariadb.servers["fast"]
    common = ["sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={port}",
              "--mysql-user=sbtest", "--mysql-password=sbtest", "--mysql-db=sbtest", "--tables=1",
              "--table-size=2000"]
    run(common + ["prepare"], True, timeout=120, app=mariadb, held=False)
    # The run's 4 connections wait on the table lock until they are checked.
    lock = mariadb_lock(mariadb, "LOCK TABLES sbtest1 WRITE")
    out = run_locked(mariadb, common + ["--threads=4", "--time=2", "run"], 4, lock)
    assert b"transactions:" in out
    count = mariadb_cli(mariadb, False, "SELECT COUNT(*) FROM sbtest1;")
    assert count.strip() == b"2000"
    run(common + ["cleanup"], True, timeout=120, app=mariadb, held=False)


def test_mariadb_connection_is_on_fast_path(mariadb):
    assert_on_fast_path(mariadb, mariadb_argv(mariadb), b"SELECT 1;\n", b"1")


# PostgreSQL

PGSQL = """DROP TABLE IF EXISTS t;
CREATE TABLE t (id int PRIMARY KEY, name text, v float8);
INSERT INTO t VALUES (1, 'one', 1.5), (2, 'two', 2.25), (3, 'three', NULL);
SELECT * FROM t ORDER BY id;
SELECT count(*), sum(v) FROM t;
SELECT md5(repeat('ab', 300000)), length(repeat('x', 1000000));
SELECT repeat('y', 200000);
SELECT inet_client_addr();
COPY (SELECT g, md5(g::text) FROM generate_series(1, 20000) g) TO STDOUT;
"""


def psql_argv(app):
    _, port, _ = app.servers["fast"]
    return [f"{app.bin}/psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
            "-U", "postgres", "-d", "postgres", "-f", "-"]


def psql(app, fast, sql):
    return run(psql_argv(app), fast, sql.encode(), app=app)


def postgres_lock(app, sql):
    """A plain psql that runs sql in a transaction (taking a lock) and holds
    it until its stdin closes (then commits)."""
    p = subprocess.Popen([*psql_argv(app), "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(f"BEGIN; {sql}; SELECT 'locked';\n")
    p.stdin.flush()
    assert readline(p).strip() == "locked"
    p.stdin.write("COMMIT;\n")
    return p


def test_postgres_same_answers_as_tcp(postgres):
    plain = psql(postgres, False, PGSQL)
    fast = psql(postgres, True, PGSQL)
    assert b"1|one|1.5" in plain and b"127.0.0.1" in plain
    assert fast == plain


def test_postgres_pgbench_on_fast_path(postgres):
    _, port, _ = postgres.servers["fast"]
    conn = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "postgres"]
    run([f"{postgres.bin}/pgbench", "-i", "-q", "-s", "1", *conn], True, timeout=120, app=postgres,
        held=False)  # COPY FROM STDIN
    # The run's 4 connections wait on the table lock until they are checked.
    lock = postgres_lock(postgres, "LOCK TABLE pgbench_accounts IN ACCESS EXCLUSIVE MODE")
    out = run_locked(postgres, [f"{postgres.bin}/pgbench", "-n", "-c", "4", "-j", "2", "-T", "2", *conn], 4, lock)
    assert b"tps = " in out
    assert psql(postgres, False, "SELECT count(*) FROM pgbench_accounts;").strip() == b"100000"


def test_postgres_connection_is_on_fast_path(postgres):
    assert_on_fast_path(postgres, psql_argv(postgres), b"SELECT 1;\n", b"1")


# nginx

@pytest.fixture(scope="module")
def nginx():
    reaper, app = start(apps_nginx)
    yield app
    reaper.close()


@pytest.fixture(scope="module")
def nginx_plain():
    """The bench's plain server: 127.0.0.1 and its Unix socket."""
    reaper, app = start(apps_nginx, "plain")
    yield app
    reaper.close()


# Reads a request line from stdin (so that it holds its connection until
# told), then GETs the path and prints the body's length and SHA-256.
HTTP_GET = """
import hashlib, socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sys.stdin.readline()
c.sendall(b"GET /" + sys.argv[2].encode() + b" HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
data = b""
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    data += b
head, _, body = data.partition(b"\\r\\n\\r\\n")
print(head.split(b"\\r\\n")[0].decode(), len(body), hashlib.sha256(body).hexdigest())
"""


@pytest.mark.parametrize("body", ["small", "1m"])
def test_nginx_same_bytes_over_fast_path(nginx, body):
    _, port, _ = nginx.servers["fast"]
    name, size = apps_nginx.BODIES[body]
    with open(os.path.join(nginx.www, name), "rb") as f:
        want = f"HTTP/1.1 200 OK {size} {hashlib.sha256(f.read()).hexdigest()}".encode()
    argv = [sys.executable, "-c", HTTP_GET, str(port), name]
    assert run(argv, False, b"go\n", app=nginx).strip() == want
    assert run(argv, True, b"go\n", app=nginx).strip() == want  # held on the fast path until checked


def test_nginx_unix_path_reaches_the_unix_socket(nginx_plain):
    """The bench's unix path: an unmodified wrk, whose connect() to the
    plain server's port libloopfast-unixconnect.so turns into a connect to
    nginx's Unix socket. While it holds its connections, every one is a
    Unix stream whose peer is nginx's socket, and none is TCP; its answers
    are right."""
    _, port, sock = nginx_plain.servers["plain"]
    nginx_plain.key = ("unix", "keepalive-small", 4)
    argv = nginx_plain._wrap(["wrk", "-t", "2", "-c", "4", "-d", "60s", "-s",
                              os.path.join(nginx_plain.dir, "report.lua"),
                              nginx_plain.url("unix", "keepalive-small")], "unix")
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import time
        deadline = time.monotonic() + 30
        while True:
            socks = unix_sockets()
            mine = [i for i in socket_inodes([p.pid]) if i in socks]
            to_nginx = [i for i in mine if socks.get(socks[i][1], ("", 0))[0] == sock]
            if len(to_nginx) >= 4:
                break
            assert p.poll() is None and time.monotonic() < deadline, (p.poll(), mine, socks)
            time.sleep(0.05)
        assert tcp_connections([p.pid], port) == []
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        stop(p)
    nginx_plain.key = ("unix", "keepalive-small", 4)
    r = nginx_plain.parse(out)
    assert r["requests"] > 0 and r["errors"] == 0, out + err
