"""haproxy (TCP mode) in front of redis-server: redis-cli -> haproxy ->
redis. haproxy sets SO_REUSEPORT on its listeners (for seamless reloads),
and SO_REUSEPORT listeners are served as plain TCP (README, "Where it
differs from TCP": the kernel picks the group member per connection, and
a hello cannot be steered to it), so the first hop must be plain TCP, and
the second, haproxy's own connection to redis, on the fast path."""
import hashlib
import os
import subprocess

import pytest

from conftest import await_fast, await_tcp, finish, lf, need

HAPROXY_CFG = """global
    maxconn 100
defaults
    mode tcp
    timeout connect 10s
    timeout client 60s
    timeout server 60s
frontend redis_in
    bind 127.0.0.1:{port}
    default_backend redis
backend redis
    server r1 127.0.0.1:{redis_port}
"""


@pytest.mark.timeout(120)
def test_redis_cli_through_haproxy(procs, tmp):
    need("haproxy", "redis-server", "redis-cli")
    redis, redis_port = procs.serve("redis", lambda port: lf(
        "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp))

    def haproxy_argv(port):
        (tmp / "haproxy.cfg").write_text(HAPROXY_CFG.format(port=port, redis_port=redis_port))
        return lf("haproxy", "-db", "-f", tmp / "haproxy.cfg")

    srv, port = procs.serve("haproxy", haproxy_argv)
    data = os.urandom(4 << 20)
    assert finish(procs.start("redis-cli-set", lf("redis-cli", "-p", port, "-x", "SET", "blob"),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE), data) == b"OK\n"
    # redis-cli keeps its connection until it has printed the value, which
    # is more than the pipe holds: it waits for the test to read.
    cli = procs.start("redis-cli-get", lf("redis-cli", "-p", port, "GET", "blob"), stdout=subprocess.PIPE)
    await_fast(redis, srv, peer=f"127.0.0.1:{redis_port}")
    await_tcp(srv, cli, peer=f"127.0.0.1:{port}")  # both ends TCP sockets, held by redis-cli and haproxy
    out = finish(cli)  # the value and a newline
    assert len(out) == len(data) + 1 and hashlib.sha256(out).digest() == hashlib.sha256(data + b"\n").digest()
