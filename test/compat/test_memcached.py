"""memcached (dropping to the memcache user, as Debian runs it) with
libmemcached's clients: memccp stores a file, memccat reads it back."""
import hashlib
import os
import subprocess

import pytest

from conftest import await_fast, finish, lf, need


@pytest.mark.timeout(120)
def test_memccp_and_memccat(procs, tmp):
    need("memcached", "memccp", "memccat")
    srv, port = procs.serve("memcached", lambda port: lf(
        "memcached", "-u", "memcache", "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", "64", "-I", "8m"))
    data = os.urandom(4 << 20)
    (tmp / "blob").write_bytes(data)
    servers = f"--servers=127.0.0.1:{port}"
    finish(procs.start("memccp", lf("memccp", servers, tmp / "blob")))
    # memccat keeps its connection until it has written the value, which
    # is more than the pipe holds: it waits for the test to read.
    cli = procs.start("memccat", lf("memccat", servers, "blob"), stdout=subprocess.PIPE)
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    out = finish(cli)  # the value and a newline
    assert len(out) == len(data) + 1 and hashlib.sha256(out).digest() == hashlib.sha256(data + b"\n").digest()
