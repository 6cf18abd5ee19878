"""node: an http server listening on every address (`listen(port)` with
no host: [::], dual-stack) and an http client to 127.0.0.1 (progs/http.js)."""
import hashlib
import os
import pathlib
import subprocess

import pytest

from conftest import await_fast, finish, lf, need

PROGS = pathlib.Path(__file__).resolve().parent / "progs"


@pytest.mark.timeout(120)
def test_node_http_server_and_client(procs, tmp):
    need("node")
    data = os.urandom(8 << 20)
    (tmp / "blob.bin").write_bytes(data)
    srv, port = procs.serve("node-server", lambda _: lf("node", PROGS / "http.js", "server", tmp / "blob.bin"),
                            host="::", port=0)
    cli = procs.start("node-client", lf("node", PROGS / "http.js", "client", port),
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # The client reads the body only after its stdin ends.
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    assert finish(cli, b"").decode() == f"200 {hashlib.sha256(data).hexdigest()}\n"
