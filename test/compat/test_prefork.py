"""A prefork server: gunicorn's master binds the listener and forks four
sync workers, each accepting on it and serving one request at a time.
Four clients held at once can only be served by four different workers,
so every worker must find its own client's connection on the fast path."""
import hashlib
import os
import pathlib
import subprocess

import pytest

from conftest import await_fast, finish, lf, need

PROGS = pathlib.Path(__file__).resolve().parent / "progs"
WORKERS = 4


@pytest.mark.timeout(120)
def test_gunicorn_prefork_workers(procs, tmp):
    need("gunicorn", "curl")
    data = os.urandom(8 << 20)
    (tmp / "blob.bin").write_bytes(data)
    srv, port = procs.serve("gunicorn", lambda _: lf(
        "gunicorn", "--workers", WORKERS, "--worker-class", "sync", "--bind", "127.0.0.1:0",
        "--chdir", PROGS, "wsgi:app"), port=0, env={"LF_BLOB": str(tmp / "blob.bin")})
    # Each curl cannot finish before the test reads its output, so each
    # holds a worker busy sending.
    clients = [procs.start(f"curl-{i}", lf("curl", "-sS", "--fail", f"http://127.0.0.1:{port}/"),
                           stdout=subprocess.PIPE) for i in range(WORKERS)]
    workers = set()
    for cli in clients:
        (pair,) = await_fast(srv, cli, peer=f"127.0.0.1:{port}")
        workers.add(pair.server_pid)
    assert len(workers) == WORKERS and srv.pid not in workers, workers
    for cli in clients:
        out = finish(cli)
        assert len(out) == len(data) and hashlib.sha256(out).digest() == hashlib.sha256(data).digest()
