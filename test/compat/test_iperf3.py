"""iperf3 with a known byte count, in reverse mode (the server sends, the
client receives, and counts exactly to -n). The client writes what it
receives into a FIFO that the test reads: it opens the FIFO once both of
iperf3's connections (control and data) are up, and waits there until the
test opens the other end, so both connections are held while the test
looks at them.

Only the count is checked, not the bytes: iperf3 3.12 sends its own
buffer, and its -F on the sending side corrupts the data after a partial
send (plain TCP with -w 16K shows it too), so it is not used."""
import json
import os
import select
import subprocess
import time

import pytest

from conftest import await_fast, finish, lf, need, tail


def drain(fifo, timeout=60):
    """Counts the bytes written into fifo until its writer closes it."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    n, deadline = 0, time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                pytest.fail(f"the FIFO was not closed within {timeout} s ({n} bytes read)")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                return n
            n += len(chunk)
    finally:
        os.close(fd)


@pytest.mark.timeout(120)
def test_iperf3_known_byte_count(procs, tmp):
    need("iperf3")
    srv, port = procs.serve("iperf3-server", lambda port: lf("iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", port))
    fifo = tmp / "received.fifo"
    os.mkfifo(fifo)
    size = 64 << 20  # a multiple of iperf3's 128 KiB block: the sender stops exactly there
    cli = procs.start("iperf3-client", lf("iperf3", "-c", "127.0.0.1", "-p", port, "-R", "-n", size, "-F", fifo, "-J"),
                      stdout=subprocess.PIPE)
    await_fast(srv, cli, count=2, peer=f"127.0.0.1:{port}")
    assert drain(fifo) == size, tail(cli)
    end = json.loads(finish(cli))["end"]
    assert end["sum_sent"]["bytes"] == end["sum_received"]["bytes"] == size, end
