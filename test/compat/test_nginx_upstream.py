"""nginx as a reverse proxy: curl -> nginx -> an aiohttp upstream
(progs/upstream.py), both hops on the fast path at once."""
import hashlib
import os
import pathlib
import subprocess

import pytest

from conftest import await_fast, finish, lf, need, start_nginx

PROGS = pathlib.Path(__file__).resolve().parent / "progs"
PYTHON = "/usr/bin/python3"  # Debian's, with python3-aiohttp


@pytest.mark.timeout(120)
def test_nginx_proxies_to_aiohttp(procs, tmp):
    need("curl", PYTHON)
    data = os.urandom(4 << 20)
    (tmp / "blob.bin").write_bytes(data)
    up, up_port = procs.serve("aiohttp", lambda _: lf(PYTHON, PROGS / "upstream.py", tmp), port=0)
    srv, port = start_nginx(procs, tmp, server=f"        location / {{ proxy_pass http://127.0.0.1:{up_port}; }}")
    cli = procs.start("curl", lf("curl", "-sS", "--fail", f"http://127.0.0.1:{port}/blob.bin"), stdout=subprocess.PIPE)
    # The upstream holds the request until tmp/release exists: both hops are open.
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    await_fast(up, srv, peer=f"127.0.0.1:{up_port}")
    (tmp / "release").touch()
    out = finish(cli)
    assert len(out) == len(data) and hashlib.sha256(out).digest() == hashlib.sha256(data).digest()
