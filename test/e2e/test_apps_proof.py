"""`loopfast bench app`'s proof of the path (bench/apps/apps_fastpath.py)
against the kernel, with no real server: a client under `loopfast run`
holds one connection to a small Python server, and the Sampler must count
it as a fast-path connection exactly when the kernel shows a Unix pair
between the two processes (the server under `loopfast run` too), and a run
over it must then be valid; with the server not opted in, the connection is
plain TCP at both ends, the Sampler counts none and the run is invalid,
whatever loopfast itself reports."""
import os
import subprocess
import sys
import time

import pytest

from bench_kernel import tcp_inodes, unix_pairs
from conftest import LOOPFAST, ROOT, lf_cmd, readline, stop

sys.path.insert(0, str(ROOT / "bench" / "apps"))
os.environ["LOOPFAST_BIN"] = str(LOOPFAST)

import apps_fastpath  # noqa: E402

SERVER = """
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(8)
print(l.getsockname()[1], flush=True)
c, _ = l.accept(); c.recv(1); c.sendall(b"y")
sys.stdin.read()
"""
CLIENT = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); c.sendall(b"x"); assert c.recv(1) == b"y"
print("ok", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("server_opted_in", [True, False])
def test_sampler_counts_what_the_kernel_shows(server_opted_in):
    srv_argv = [sys.executable, "-c", SERVER]
    srv = subprocess.Popen(lf_cmd(srv_argv) if server_opted_in else srv_argv, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    cli = None
    try:
        port = int(readline(srv))
        with apps_fastpath.Sampler(port, first=0.1, every=0.2) as s:
            cli = subprocess.Popen(lf_cmd([sys.executable, "-c", CLIENT, str(port)]), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
            s.pid = cli.pid
            assert readline(cli).strip() == "ok"
            pairs, tcp = unix_pairs([cli.pid, srv.pid]), tcp_inodes([cli.pid, srv.pid])
            time.sleep(0.8)
        proof = s.record()
        valid, reason = apps_fastpath.verdict("fast", proof, 1)
        if server_opted_in:
            assert len(pairs) == 1, pairs
            assert proof["kernel_fast"] == 1 and valid, (proof, reason)
        else:
            assert not pairs and len(tcp) == 2, (pairs, tcp)  # plain TCP, both ends
            assert proof["kernel_fast"] == 0 and not valid, (proof, reason)
            assert "0 of 1 connections" in reason, reason
            # Had loopfast's report said "fast", the verdict would not change.
            lie = dict(proof, server_conns=1, client_conns=1, client_fast=1, client_tcp=0)
            assert not apps_fastpath.verdict("fast", lie, 1)[0], lie
            assert not apps_fastpath.verdict("fast", lie, None)[0], lie
    finally:
        stop(cli, srv)


@pytest.mark.parametrize("server_tier", ["shm", None], ids=["both-shm", "server-uds"])
def test_sampler_counts_the_rings_the_kernel_shows(server_tier):
    """The `shm` path of bench app (both ends under `--tier shm`) is valid
    only when the client maps the connection's ring (the memfd in its
    /proc/PID/maps, read here independently): a client that asked for the
    tier of a server that did not is on the fast path without rings, and
    its run is invalid."""
    srv = subprocess.Popen(lf_cmd([sys.executable, "-c", SERVER], tier=server_tier), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    cli = None
    try:
        port = int(readline(srv))
        with apps_fastpath.Sampler(port, first=0.1, every=0.2) as s:
            cli = subprocess.Popen(lf_cmd([sys.executable, "-c", CLIENT, str(port)], tier="shm"),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            s.pid = cli.pid
            assert readline(cli).strip() == "ok"
            pairs = unix_pairs([cli.pid, srv.pid])
            with open(f"/proc/{cli.pid}/maps") as f:
                rings = sum("memfd:loopfast-shm" in line for line in f)
            time.sleep(0.8)
        proof = s.record()
        valid, reason = apps_fastpath.verdict("shm", proof, 1)
        assert len(pairs) == 1 and proof["kernel_fast"] == 1, (pairs, proof)
        if server_tier == "shm":
            assert rings == 1 and proof["kernel_shm"] == 1 and valid, (rings, proof, reason)
        else:
            assert rings == 0 and proof["kernel_shm"] == 0 and not valid, (rings, proof, reason)
            assert "rings" in reason, reason
    finally:
        stop(cli, srv)
