"""The shared-memory tier (docs/shm.md) the way services run: a client
that starts before its server and retries, a server on a wildcard address
(0.0.0.0, ::), one that drops its privileges after it listens (as a
daemon started as root), stopped with SIGTERM while its clients hold their
connections, and started again on the same port, the clients reconnecting
as a pool does. Each step runs over plain TCP too, the control, and must
give the same answers; the tier is read from the kernel (the memfd mapped
in both processes), and after the client's close nothing of it is left
mapped."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import free_port, lf_cmd, readline, stop
from test_shm import maps_memfd as rings

pytestmark = pytest.mark.timeout(300)

# An echo server on HOST PORT: says "listening", then answers every byte
# of each connection (a thread each) until the peer closes. "drop": once
# it listens, it becomes nobody (as a daemon started as root does). SIGTERM
# ends it by its default action.
SERVER = textwrap.dedent("""
    import os, pwd, socket, sys, threading
    host, port = sys.argv[1], int(sys.argv[2])
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(64)
    if "drop" in sys.argv[3:]:
        nobody = pwd.getpwnam("nobody")
        os.setgroups([]); os.setgid(nobody.pw_gid); os.setuid(nobody.pw_uid)
    print("listening", flush=True)
    def serve(c):
        while True:
            d = c.recv(65536)
            if not d:
                return c.close()
            c.sendall(d)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
""")

# A pool of two connections. "open HOST PORT": connects, retrying every
# 10 ms while refused (it says "refused" at the first refusal), then opens
# the second, and says "opened"; "echo": 200,000 random bytes over each,
# every byte checked; "end": what a read of each gets once its server is
# gone (its bytes, EOF, or the error's name); "close": closes both. EOF on
# stdin: exit 0.
CLIENT = textwrap.dedent("""
    import os, socket, sys, time
    held = []
    for cmd in sys.stdin:
        w = cmd.split()
        if w[0] == "open":
            host, port, said = w[1], int(w[2]), False
            deadline = time.monotonic() + 60
            while len(held) < 2:
                c = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
                try:
                    c.connect((host, port))
                except ConnectionRefusedError:
                    c.close()
                    if not said:
                        print("refused", flush=True)
                        said = True
                    assert time.monotonic() < deadline, "refused for a minute"
                    time.sleep(0.01)
                    continue
                c.settimeout(30)
                held.append(c)
            print("opened", flush=True)
        elif w[0] == "echo":
            for c in held:
                data = os.urandom(200_000)
                c.sendall(data)
                got = b""
                while len(got) < len(data):
                    d = c.recv(65536)
                    assert d, "EOF in the middle of the echo"
                    got += d
                assert got == data
            print("echoed", flush=True)
        elif w[0] == "end":
            out = []
            for c in held:
                try:
                    out.append(repr(c.recv(100)))
                except OSError as e:
                    out.append(type(e).__name__)
            print("end", *out, flush=True)
        elif w[0] == "close":
            for c in held:
                c.close()
            held.clear()
            print("closed", flush=True)
""")


def run(listen, connect, drop, tier):
    """The whole story on one port, over TCP (tier None) or the tier: the
    lines the client said, and the tier's mappings (client, server) at
    each point where the connections are open."""
    wrap = (lambda a: lf_cmd(a, tier=tier)) if tier else (lambda a: a)
    port, said, maps = free_port(), [], []
    client = subprocess.Popen(wrap([sys.executable, "-c", CLIENT]), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def ask(cmd):
        client.stdin.write(cmd + "\n")
        client.stdin.flush()
        said.append(readline(client, timeout=60).strip())

    try:
        for start in range(2):  # the first server, then the one started again on its port
            client.stdin.write(f"open {connect} {port}\n")
            client.stdin.flush()
            said.append(readline(client).strip())  # before its server: refused until it listens
            srv = subprocess.Popen(wrap([sys.executable, "-c", SERVER, listen, str(port)] + (["drop"] if drop else [])),
                                   stdout=subprocess.PIPE, text=True)
            try:
                assert readline(srv).strip() == "listening"
                said.append(readline(client, timeout=60).strip())
                ask("echo")
                maps.append((rings(client.pid), rings(srv.pid)))
                srv.send_signal(signal.SIGTERM)
                srv.wait(timeout=30)
                said.append(f"server status {srv.returncode}")
            finally:
                stop(srv)
            ask("end")
            ask("close")
            maps.append((rings(client.pid), 0))
        client.stdin.close()
        client.wait(timeout=30)
        said.append(f"client status {client.returncode}")
    finally:
        stop(client)
    return said, maps


@pytest.mark.parametrize("drop", [False, True], ids=["root", "drops-to-nobody"])
@pytest.mark.parametrize("listen,connect", [("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "::1")],
                         ids=["127.0.0.1", "0.0.0.0", "[::]"])
def test_a_service_on_the_tier_as_over_tcp(build, listen, connect, drop):
    """A client first (refused until its server listens), a server on
    listen (dropping to nobody after its listen, or not), 200,000 bytes
    echoed over each of two connections, the server stopped with SIGTERM
    (its death by the signal), the client's reads then the end (EOF: the
    server had read every byte), closed; the same again with the server
    started anew on the port. Over the tier the client says exactly what
    it says over TCP. The second connection of each start began after the
    server listened, so it is on the tier at both ends (the first may have
    looked for the server before it listened: plain TCP then is TCP's
    answer); after each close the client maps nothing of the tier."""
    if os.geteuid() != 0 and drop:
        pytest.skip("needs root to drop to nobody")
    tcp, tcp_maps = run(listen, connect, drop, None)
    assert tcp == ["refused", "opened", "echoed", "server status -15", "end b'' b''", "closed",
                   "refused", "opened", "echoed", "server status -15", "end b'' b''", "closed", "client status 0"], "; ".join(tcp)
    assert all(m == (0, 0) for m in tcp_maps), tcp_maps
    shm, shm_maps = run(listen, connect, drop, "shm")
    assert shm == tcp
    open_maps, closed_maps = shm_maps[0::2], shm_maps[1::2]
    assert all(c >= 1 and c == s for c, s in open_maps), f"not on the tier at both ends: {shm_maps}"
    assert all(c == 0 for c, _ in closed_maps), f"the tier still mapped after the close: {shm_maps}"
