"""Real, unmodified programs under `loopfast run`: redis-server with
redis-cli and redis-benchmark, python3 -m http.server with curl. Same
results as over plain TCP, and shown to be on the fast path from kernel
state, both ends, while the client is made to hold its connection: a
redis-cli waits for its command on stdin; redis-benchmark's clients wait
for a server paused for writes (CLIENT PAUSE WRITE); curl's download waits
for the test to read curl's output (30 MB: more than every buffer on the
way). The plain runs are the control: on TCP, never on the fast path."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import free_port, need, stop, wait_path, wait_port, wrap

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = pytest.mark.extra


@pytest.fixture(params=["tcp", "loopfast"])
def redis(request, build):
    need("redis-server")
    port = free_port()
    d = tempfile.mkdtemp(prefix="lf-redis-")
    srv = subprocess.Popen(wrap(request.param, ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                                "--save", "", "--appendonly", "no", "--dir", d]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield request.param, port, srv
    finally:
        srv.terminate()
        srv.wait(timeout=20)
        shutil.rmtree(d, ignore_errors=True)


def redis_cli(mode, port, srv, command):
    """One redis-cli session: it connects, and waits for its command on
    stdin until its connection's path is checked; returns its output."""
    cli = subprocess.Popen(wrap(mode, ["redis-cli", "-p", str(port)]), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_path(cli, srv.pid, port, mode)
        out, err = cli.communicate(" ".join(command) + "\n", timeout=30)
    finally:
        stop(cli)
    assert cli.returncode == 0, err
    return out


def test_redis_answers_the_same(redis):
    mode, port, srv = redis
    script = [("SET", "k", "v1"), ("GET", "k"), ("INCR", "n"), ("INCRBY", "n", "41"), ("RPUSH", "l", "a", "b", "c"),
              ("LRANGE", "l", "0", "-1"), ("SET", "big", "x" * 100000), ("STRLEN", "big"), ("DEL", "k"), ("GET", "k")]
    got = [redis_cli(mode, port, srv, cmd) for cmd in script]
    assert got == ["OK\n", "v1\n", "1\n", "42\n", "3\n", "a\nb\nc\n", "OK\n", "100000\n", "1\n", "\n"]


def test_redis_clients_are_on_the_fast_path(redis):
    """A client blocked in BLPOP holds its connection: on the fast path
    under loopfast (both ends), on TCP otherwise; then a push releases it."""
    mode, port, srv = redis
    cli = subprocess.Popen(wrap(mode, ["redis-cli", "-p", str(port), "BLPOP", "nothing", "0"]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_path(cli, srv.pid, port, mode)
        assert redis_cli(mode, port, srv, ["RPUSH", "nothing", "released"]) == "1\n"
        out, err = cli.communicate(timeout=30)
    finally:
        stop(cli)
    assert cli.returncode == 0 and out == "nothing\nreleased\n", (out, err)


def test_redis_benchmark_completes(redis):
    """Writes are paused while redis-benchmark's 10 SET clients connect;
    all 10 are checked (a sample of its connections: the GET phase's are
    not), then the server resumes and the benchmark completes."""
    mode, port, srv = redis
    need("redis-benchmark")
    assert redis_cli(mode, port, srv, ["CLIENT", "PAUSE", "60000", "WRITE"]) == "OK\n"
    bench = subprocess.Popen(wrap(mode, ["redis-benchmark", "-p", str(port), "-n", "20000", "-c", "10",
                                         "-t", "set,get", "-q"]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        try:
            wait_path(bench, srv.pid, port, mode, want=10)
        finally:
            assert redis_cli(mode, port, srv, ["CLIENT", "UNPAUSE"]) == "OK\n"
        out, err = bench.communicate(timeout=120)
    finally:
        stop(bench)
    assert bench.returncode == 0, err
    rows = [l for l in out.replace("\r", "\n").splitlines() if "requests per second" in l]
    assert any(r.startswith("SET") for r in rows) and any(r.startswith("GET") for r in rows), out


@pytest.mark.parametrize("mode", ["tcp", "loopfast"])
def test_http_server_and_curl(build, mode):
    need("curl")
    d = tempfile.mkdtemp(prefix="lf-http-")
    payload = os.urandom(30 << 20)
    with open(os.path.join(d, "blob"), "wb") as f:
        f.write(payload)
    with open(os.path.join(d, "hello.txt"), "w") as f:
        f.write("hello over loopback\n")
    port = free_port()
    srv = subprocess.Popen(wrap(mode, [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
                                       "--directory", d]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    big = None
    try:
        wait_port(port)
        small = subprocess.run(wrap(mode, ["curl", "-sS", f"http://127.0.0.1:{port}/hello.txt"]),
                               capture_output=True, timeout=30)
        assert small.returncode == 0 and small.stdout == b"hello over loopback\n", small.stderr
        # The download to curl's stdout cannot end before the test reads it.
        big = subprocess.Popen(wrap(mode, ["curl", "-sS", f"http://127.0.0.1:{port}/blob"]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_path(big, srv.pid, port, mode)
        out, err = big.communicate(timeout=60)
        assert big.returncode == 0, err
        assert out == payload
    finally:
        try:
            stop(big)
        finally:  # the server too, even if stopping curl failed the test
            srv.terminate()
            srv.wait(timeout=20)
            shutil.rmtree(d, ignore_errors=True)
