"""Java: a server and a client on java.net sockets (progs/Echo.java,
compiled by the test with the JDK's javac), Nagle on as by default; the
server listens on every address (`new ServerSocket(port)`: [::], dual-stack),
the client connects to 127.0.0.1."""
import hashlib
import os
import pathlib
import subprocess

import pytest

from conftest import await_fast, finish, lf, need

PROGS = pathlib.Path(__file__).resolve().parent / "progs"


@pytest.mark.timeout(180)
def test_java_client_and_server(procs, tmp):
    need("javac", "java")
    subprocess.run(["javac", "-d", tmp, PROGS / "Echo.java"], check=True, timeout=120)
    srv, port = procs.serve("java-server", lambda _: lf("java", "-cp", tmp, "Echo", "server"), host="::", port=0)
    cli = procs.start("java-client", lf("java", "-cp", tmp, "Echo", "client", port),
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # The client holds its connection until its stdin ends.
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    data = os.urandom(1 << 20)
    assert finish(cli, data).decode() == f"round trips: 200\nsha256: {hashlib.sha256(data).hexdigest()}\n"
