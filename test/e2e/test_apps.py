"""Real servers (Redis, MariaDB, PostgreSQL) under `loopfast run` answer real
queries from their own unmodified clients exactly as over plain TCP, and the
connections are really on the fast path (`loopfast status` lists them).

Each test starts one server under `loopfast run` with its data in a
temporary directory and free ports; the same server is then queried by a
client under `loopfast run` (fast path) and by a plain client (TCP). Skipped
only when the server's Debian package cannot be installed.
"""
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("LOOPFAST_BUILD", os.path.join(ROOT, "build"))
LOOPFAST = os.path.join(BUILD, "loopfast")
os.environ["LOOPFAST_BIN"] = LOOPFAST
sys.path.insert(0, os.path.join(ROOT, "bench", "apps"))

import apps_mariadb  # noqa: E402
import apps_postgres  # noqa: E402
import apps_redis  # noqa: E402
from apps_install import ensure_packages  # noqa: E402
from apps_proc import Reaper  # noqa: E402


def start(mod):
    try:
        ensure_packages(mod.PACKAGES)
    except RuntimeError as e:
        pytest.skip(f"{mod.NAME} cannot be installed here: {e}")
    reaper = Reaper()
    app = mod.App(reaper, ["fast"])
    try:
        app.start_single("fast")
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


def run(argv, fast, stdin=None, timeout=60):
    """Runs a client (under `loopfast run` when fast); returns its stdout."""
    if fast:
        argv = [LOOPFAST, "run", "--", *argv]
    p = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
    assert p.returncode == 0, f"{argv} exited {p.returncode}: {p.stderr.decode(errors='replace')[-800:]}"
    return p.stdout


def assert_on_fast_path(argv, port, seconds=3):
    """Runs a client that holds its connection for a while under `loopfast
    run`, and checks `loopfast status` lists both ends on the fast path."""
    p = subprocess.Popen([LOOPFAST, "run", "--", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    addr = f"127.0.0.1:{port}"
    seen = None
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and p.poll() is None:
            st = json.loads(subprocess.run([LOOPFAST, "--json", "status"], capture_output=True, text=True,
                                           timeout=10, check=True).stdout)
            srv = [c for c in st["connections"] if c["role"] == "server" and c["local"] == addr]
            cli = [c for c in st["connections"] if c["role"] == "client" and c["peer"] == addr and c["pid"] == p.pid]
            listening = any(lst["address"] == addr for lst in st["listeners"])
            seen = (listening, len(srv), len(cli))
            if listening and srv and cli:
                break
            time.sleep(0.1)
    finally:
        p.kill()
        p.wait()
    assert seen and seen[0], f"no fast-path listener on {addr}: {seen}"
    assert seen[1] >= 1 and seen[2] >= 1, f"client connection to {addr} not on the fast path (listening, server, client) = {seen}"


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
    return run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], fast, stdin)


def test_redis_same_answers_as_tcp(redis):
    plain = redis_cli(redis, False, stdin=REDIS_SCRIPT)
    fast = redis_cli(redis, True, stdin=REDIS_SCRIPT)
    assert b"hello" in plain and b"42" in plain
    assert fast == plain


def test_redis_large_value_round_trip(redis):
    big = os.urandom(700_000).hex().encode()  # 1.4 MB
    assert redis_cli(redis, True, "-x", "SET", "big", stdin=big).strip() == b"OK"
    got_fast = redis_cli(redis, True, "--no-raw", "STRLEN", "big")
    got_plain = redis_cli(redis, False, "--raw", "GET", "big").rstrip(b"\n")
    got_fast_val = redis_cli(redis, True, "--raw", "GET", "big").rstrip(b"\n")
    assert b"1400000" in got_fast
    assert hashlib.sha256(got_plain).hexdigest() == hashlib.sha256(big).hexdigest()
    assert got_fast_val == got_plain


def test_redis_benchmark_completes_on_fast_path(redis):
    _, port, _ = redis.servers["fast"]
    out = run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get", "-n", "5000", "-c", "8",
               "--csv"], True)
    assert b'"SET"' in out and b'"GET"' in out


def test_redis_connection_is_on_fast_path(redis):
    _, port, _ = redis.servers["fast"]
    assert_on_fast_path(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "BLPOP", "nosuchlist", "3"], port)


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


def mariadb_cli(app, fast, sql, *extra):
    _, port, _ = app.servers["fast"]
    return run(["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{port}", "-usbtest", "-psbtest", "sbtest",
                "-N", "-B", *extra], fast, sql.encode())


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
    run(common + ["prepare"], True, timeout=120)
    out = run(common + ["--threads=4", "--time=2", "run"], True, timeout=120)
    assert b"transactions:" in out
    count = mariadb_cli(mariadb, False, "SELECT COUNT(*) FROM sbtest1;")
    assert count.strip() == b"2000"
    run(common + ["cleanup"], True, timeout=120)


def test_mariadb_connection_is_on_fast_path(mariadb):
    _, port, _ = mariadb.servers["fast"]
    assert_on_fast_path(["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{port}", "-usbtest", "-psbtest",
                         "-e", "SELECT SLEEP(3)"], port)


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


def psql(app, fast, sql):
    _, port, _ = app.servers["fast"]
    return run([f"{app.bin}/psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
                "-U", "postgres", "-d", "postgres", "-f", "-"], fast, sql.encode())


def test_postgres_same_answers_as_tcp(postgres):
    plain = psql(postgres, False, PGSQL)
    fast = psql(postgres, True, PGSQL)
    assert b"1|one|1.5" in plain and b"127.0.0.1" in plain
    assert fast == plain


def test_postgres_pgbench_on_fast_path(postgres):
    _, port, _ = postgres.servers["fast"]
    conn = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "postgres"]
    run([f"{postgres.bin}/pgbench", "-i", "-q", "-s", "1", *conn], True, timeout=120)  # COPY FROM STDIN
    out = run([f"{postgres.bin}/pgbench", "-n", "-c", "4", "-j", "2", "-T", "2", *conn], True, timeout=120)
    assert b"tps = " in out
    assert psql(postgres, False, "SELECT count(*) FROM pgbench_accounts;").strip() == b"100000"


def test_postgres_connection_is_on_fast_path(postgres):
    _, port, _ = postgres.servers["fast"]
    assert_on_fast_path([f"{postgres.bin}/psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                         "-d", "postgres", "-c", "SELECT pg_sleep(3)"], port)
