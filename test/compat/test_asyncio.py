"""Python asyncio: one server, one client process with 200 concurrent
connections (progs/aio.py), every one of them on the fast path."""
import pathlib
import subprocess

import pytest

from conftest import await_fast, finish, lf, need

PROGS = pathlib.Path(__file__).resolve().parent / "progs"
PYTHON = "/usr/bin/python3"
CLIENTS = 200


@pytest.mark.timeout(180)
def test_asyncio_200_concurrent_clients(procs):
    need(PYTHON)
    srv, port = procs.serve("aio-server", lambda _: lf(PYTHON, PROGS / "aio.py", "server"), port=0)
    cli = procs.start("aio-client", lf(PYTHON, PROGS / "aio.py", "client", port, CLIENTS),
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # The client holds all its connections until its stdin ends.
    await_fast(srv, cli, count=CLIENTS, peer=f"127.0.0.1:{port}")
    assert finish(cli, b"").decode() == f"connected {CLIENTS}\nanswers right: {CLIENTS}\n"
