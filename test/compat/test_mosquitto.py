"""mosquitto (dropping to the mosquitto user, as Debian runs it) with
mosquitto_sub and mosquitto_pub, both clients on the fast path at once."""
import os
import subprocess

import pytest

from conftest import await_fast, finish, lf, need, wait_log

CONF = """listener {port} 127.0.0.1
allow_anonymous true
persistence false
log_dest stderr
log_type all
"""


@pytest.mark.timeout(120)
def test_mosquitto_pub_sub(procs, tmp):
    need("mosquitto", "mosquitto_sub", "mosquitto_pub")

    def argv(port):
        (tmp / "mosquitto.conf").write_text(CONF.format(port=port))
        return lf("mosquitto", "-c", tmp / "mosquitto.conf")

    srv, port = procs.serve("mosquitto", argv)
    common = ["-h", "127.0.0.1", "-p", port, "-t", "loopfast/compat", "-q", "1"]
    # The subscriber holds its connection until it has 3 messages.
    sub = procs.start("mosquitto_sub", lf("mosquitto_sub", *common, "-C", "3", "-i", "sub"), stdout=subprocess.PIPE)
    wait_log(srv, b"Sending SUBACK to sub")
    # The publisher sends a message per line of its stdin and holds its
    # connection until the stdin ends.
    pub = procs.start("mosquitto_pub", lf("mosquitto_pub", *common, "-l"), stdin=subprocess.PIPE)
    await_fast(srv, sub, peer=f"127.0.0.1:{port}")
    await_fast(srv, pub, peer=f"127.0.0.1:{port}")
    lines = [b"first message", os.urandom(50000).hex().encode(), b"last message"]
    finish(pub, b"\n".join(lines) + b"\n")
    assert finish(sub).splitlines() == lines
