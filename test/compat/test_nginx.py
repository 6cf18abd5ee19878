"""nginx (a master and two www-data workers) with curl and wrk; nginx
listens as most configurations have it (`listen PORT`: every IPv4
address), and also on one address (IPv4 and IPv6) and on [::]."""
import hashlib
import os
import re
import signal
import subprocess

import pytest

import kernel
from conftest import await_fast, await_tcp, finish, lf, need, start_nginx, url_host

# wrk checks every response body against the file, counts per thread, and
# prints the total at the end.
WRK_CHECK = """
local expected = "%s"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0; good = 0 end
function response(status, headers, body)
    if status == 200 and body == expected then good = good + 1 else bad = bad + 1 end
end
function done(summary, latency, requests)
    local g, b = 0, 0
    for _, t in ipairs(threads) do g = g + t:get("good"); b = b + t:get("bad") end
    io.write(string.format("checked good=%%d bad=%%d\\n", g, b))
end
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("listen,host", [("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("127.0.0.1", "127.0.0.1"),
                                         ("::1", "::1")],
                         ids=["listen-port", "listen-v6-any", "v4-loopback", "v6-loopback"])
def test_curl_downloads_a_file(procs, tmp, listen, host):
    need("curl")
    srv, port = start_nginx(procs, tmp, host=listen)
    data = os.urandom(16 << 20)
    (tmp / "www" / "blob.bin").write_bytes(data)
    # curl cannot finish, nor close its connection, before the test reads
    # its output: 16 MiB is far more than the pipe and socket buffers hold.
    cli = procs.start("curl", lf("curl", "-sS", "--fail", f"http://{url_host(host)}:{port}/blob.bin"),
                      stdout=subprocess.PIPE)
    await_fast(srv, cli, peer=f"{url_host(host)}:{port}")
    out = finish(cli)
    assert len(out) == len(data) and hashlib.sha256(out).digest() == hashlib.sha256(data).digest()


@pytest.mark.timeout(120)
def test_wrk_keepalive_connections(procs, tmp):
    need("wrk")
    srv, port = start_nginx(procs, tmp)
    body = hashlib.sha256(b"loopfast").hexdigest() * 32
    (tmp / "www" / "page.txt").write_text(body)
    (tmp / "check.lua").write_text(WRK_CHECK % body)
    # wrk keeps its 8 connections open until it is interrupted (SIGINT ends
    # the run and prints the summary); the 60 s duration is only a bound.
    cli = procs.start("wrk", lf("wrk", "-t", "2", "-c", "8", "-d", "60s", "-s", tmp / "check.lua",
                                f"http://127.0.0.1:{port}/page.txt"), stdout=subprocess.PIPE)
    await_fast(srv, cli, count=8, peer=f"127.0.0.1:{port}")
    cli.send_signal(signal.SIGINT)
    out = finish(cli).decode()
    good, bad = map(int, re.search(r"checked good=(\d+) bad=(\d+)", out).groups())
    assert good > 0 and bad == 0, out
    assert "Socket errors" not in out and "Non-2xx" not in out, out


@pytest.mark.timeout(120)
def test_reuseport_listeners_served_plain(procs, tmp):
    """`listen PORT reuseport`: one listener per worker in an SO_REUSEPORT
    group, which loopfast serves as plain TCP at both ends
    (docs/reuseport.md); every response whole."""
    need("wrk")
    srv, port = start_nginx(procs, tmp, listen_opts=" reuseport")
    body = hashlib.sha256(b"reuseport").hexdigest() * 32
    (tmp / "www" / "page.txt").write_text(body)
    (tmp / "check.lua").write_text(WRK_CHECK % body)
    group = [ln for ln in kernel._ss("-t", "-l", "-e", f"sport = :{port}")
             if int(re.search(r"\bino:(\d+)", ln).group(1)) in kernel.socket_inodes(kernel.process_tree(srv.pid))]
    assert len(group) == 2, group  # one per worker
    cli = procs.start("wrk", lf("wrk", "-t", "2", "-c", "8", "-d", "60s", "-s", tmp / "check.lua",
                                f"http://127.0.0.1:{port}/page.txt"), stdout=subprocess.PIPE)
    await_tcp(srv, cli, f"127.0.0.1:{port}", count=8)
    cli.send_signal(signal.SIGINT)
    out = finish(cli).decode()
    good, bad = map(int, re.search(r"checked good=(\d+) bad=(\d+)", out).groups())
    assert good > 0 and bad == 0, out
    assert "Socket errors" not in out and "Non-2xx" not in out, out
