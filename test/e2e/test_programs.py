"""Real, unmodified programs under `loopfast run`: redis-server with
redis-cli and redis-benchmark, python3 -m http.server with curl. Same
results as over plain TCP, and shown to be on the fast path."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import free_port, need, status_json, wait_port, wrap


def fast_server_conns(pid, deadline_s, until=None):
    """Polls `loopfast status` for server-role fast-path connections of pid."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        conns = [c for c in status_json()["connections"] if c["pid"] == pid and c["role"] == "server"]
        if conns:
            return conns
        if until is not None and until.poll() is not None:
            break
        time.sleep(0.05)
    return []


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


def redis_cli(mode, port, *args):
    p = subprocess.run(wrap(mode, ["redis-cli", "-p", str(port), *args]), capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_redis_answers_the_same(redis):
    mode, port, srv = redis
    script = [("SET", "k", "v1"), ("GET", "k"), ("INCR", "n"), ("INCRBY", "n", "41"), ("RPUSH", "l", "a", "b", "c"),
              ("LRANGE", "l", "0", "-1"), ("SET", "big", "x" * 100000), ("STRLEN", "big"), ("DEL", "k"), ("GET", "k")]
    got = [redis_cli(mode, port, *cmd) for cmd in script]
    assert got == ["OK\n", "v1\n", "1\n", "42\n", "3\n", "a\nb\nc\n", "OK\n", "100000\n", "1\n", "\n"]


def test_redis_clients_are_on_the_fast_path(redis):
    mode, port, srv = redis
    # A client that blocks for 2 s keeps its connection open while we look.
    cli = subprocess.Popen(wrap(mode, ["redis-cli", "-p", str(port), "BLPOP", "nothing", "2"]),
                           stdout=subprocess.PIPE, text=True)
    conns = fast_server_conns(srv.pid, 10, until=cli)
    cli.wait(timeout=30)
    assert (len(conns) >= 1) == (mode == "loopfast"), conns


def test_redis_benchmark_completes(redis):
    mode, port, srv = redis
    need("redis-benchmark")
    p = subprocess.run(wrap(mode, ["redis-benchmark", "-p", str(port), "-n", "20000", "-c", "10", "-t", "get,set",
                                   "-q"]), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [l for l in p.stdout.replace("\r", "\n").splitlines() if "requests per second" in l]
    assert any(r.startswith("SET") for r in rows) and any(r.startswith("GET") for r in rows), p.stdout


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
    try:
        wait_port(port)
        small = subprocess.run(wrap(mode, ["curl", "-sS", f"http://127.0.0.1:{port}/hello.txt"]),
                               capture_output=True, timeout=30)
        assert small.returncode == 0 and small.stdout == b"hello over loopback\n", small.stderr
        # A slow download keeps one connection open long enough to see it.
        out = os.path.join(d, "copy")
        big = subprocess.Popen(wrap(mode, ["curl", "-sS", "--limit-rate", "10M", "-o", out,
                                           f"http://127.0.0.1:{port}/blob"]))
        conns = fast_server_conns(srv.pid, 10, until=big)
        assert big.wait(timeout=60) == 0
        with open(out, "rb") as f:
            assert f.read() == payload
        assert (len(conns) >= 1) == (mode == "loopfast"), conns
    finally:
        srv.terminate()
        srv.wait(timeout=20)
        shutil.rmtree(d, ignore_errors=True)
