"""socat on both ends: a server that runs sha256sum for each connection,
a client relaying its stdin; half-close carries the end of the data."""
import hashlib
import os
import subprocess

import pytest

from conftest import await_fast, finish, lf, need, url_host


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_socat_half_close_and_checksum(procs, host):
    need("socat", "sha256sum")
    v = "6" if ":" in host else "4"
    srv, port = procs.serve("socat-server", lambda port: lf(
        "socat", "-t", "60", f"TCP{v}-LISTEN:{port},bind={url_host(host)},fork", "EXEC:sha256sum"), host=host, port=0)
    cli = procs.start("socat-client", lf("socat", "-t", "60", "-", f"TCP{v}:{url_host(host)}:{port}"),
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # The client holds its connection until its stdin ends.
    await_fast(srv, cli, peer=f"{url_host(host)}:{port}")
    data = os.urandom(4 << 20)
    assert finish(cli, data).decode().split()[0] == hashlib.sha256(data).hexdigest()
