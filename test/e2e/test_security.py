"""A process of another uid can neither receive a fast-path client's bytes
nor take over a plain TCP client's connection. The attacker runs as a
second user that the test creates."""
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import textwrap

import pytest

from conftest import PROBE, readline, stop, wrap

USER = "lfattacker"

# A server under loopfast that says its port and listener inode, then waits
# for "go" on stdin before it listens (so that a squatter can get in first),
# then echoes N connections.
SERVER = textwrap.dedent("""
    import os, socket, sys
    fam = socket.AF_INET6 if sys.argv[2] == "6" else socket.AF_INET
    s = socket.socket(fam)
    s.bind(("::1" if fam == socket.AF_INET6 else "127.0.0.1", 0))
    print(s.getsockname()[1], os.fstat(s.fileno()).st_ino, flush=True)
    sys.stdin.readline()
    s.listen(64)
    print("listening", flush=True)
    for _ in range(int(sys.argv[1])):
        c, _ = s.accept()
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.close()
""")

# Holds the rendezvous and stash names of a listener inode from "ready"
# until its stdin closes, then takes what is still queued and reports every
# connection: its peer's pid (SO_PEERCRED), and the bytes and fds it got.
SQUATTER = textwrap.dedent("""
    import json, socket, struct, sys, select
    fam, ino = sys.argv[1], int(sys.argv[2])
    socks = []
    for kind in ("L", "S"):
        t = socket.SOCK_STREAM if kind == "L" else socket.SOCK_DGRAM
        r = socket.socket(socket.AF_UNIX, t)
        r.bind(b"\\0loopfast/2/%s/%s/%d" % (kind.encode(), fam.encode(), ino))
        if kind == "L":
            r.listen(16)
        socks.append(r)
    r = socks[0]
    print("ready", flush=True)
    pids, data, fds = [], b"", 0
    def take(c):
        global data, fds
        pids.append(struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0])
        c.settimeout(0.5)
        try:
            msg, anc, flags, addr = c.recvmsg(65536, socket.CMSG_SPACE(64))
            data += msg
            fds += sum(len(a[2]) // 4 for a in anc if a[1] == socket.SCM_RIGHTS)
        except OSError:
            pass
    while sys.stdin not in select.select([r, sys.stdin], [], [])[0]:
        take(r.accept()[0])
    r.setblocking(False)
    while True:
        try:
            c = r.accept()[0]
        except BlockingIOError:
            break
        c.setblocking(True)
        take(c)
    print(json.dumps({"peer_pids": pids, "bytes": len(data), "fds": fds}), flush=True)
""")

# Queues a forged hello on the server's rendezvous naming the victim's
# client endpoint, then reads whatever reaches it.
HIJACKER = textwrap.dedent("""
    import json, socket, sys
    server_port, ino, victim_port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.bind(b"\\0loopfast/2/C/4/127.0.0.1/%d/127.0.0.1/%d/1" % (victim_port, server_port))
    u.connect(b"\\0loopfast/2/L/4/%d" % ino)
    print("sent", flush=True)
    u.settimeout(float(sys.argv[4]))
    got = b""
    try:
        while True:
            d = u.recv(65536)
            if not d:
                break
            got += d
    except OSError:
        pass
    print(json.dumps({"bytes": len(got)}), flush=True)
""")


@pytest.fixture(scope="module")
def attacker():
    if os.geteuid() != 0:
        pytest.fail("the security tests create a user: run them as root")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")
    d = tempfile.mkdtemp(prefix="lf-sec-")
    os.chmod(d, 0o755)
    scripts = {}
    for name, src in (("squat", SQUATTER), ("hijack", HIJACKER), ("server", SERVER)):
        path = os.path.join(d, name + ".py")
        with open(path, "w") as f:
            f.write(src)
        os.chmod(path, 0o644)
        scripts[name] = path

    def run_as(name, *args):
        return subprocess.Popen(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", py,
                                 scripts[name], *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
    run_as.py = py
    run_as.scripts = scripts
    yield run_as
    shutil.rmtree(d)


def start_server(attacker, n):
    """A loopfast server (root) that has bound its socket and waits for go()
    before it listens; returns it with its port and listener inode."""
    srv = subprocess.Popen(wrap("loopfast", [attacker.py, attacker.scripts["server"], str(n), "4"]),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port, ino = map(int, readline(srv).split())
    return srv, port, ino


def go(srv):
    srv.stdin.write("go\n")
    srv.stdin.flush()
    assert readline(srv).strip() == "listening"


def test_squatted_rendezvous_gets_nothing(build, attacker):
    # The root server has bound its socket; before it listens, a process
    # of another uid takes the rendezvous and stash names of that socket.
    srv, port, ino = start_server(attacker, 1)
    squat = attacker("squat", "4", ino)
    try:
        assert readline(squat).strip() == "ready"
        go(srv)
        cli = subprocess.Popen(wrap("loopfast", [str(PROBE), "client-echo", str(port)]), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dict(os.environ, LOOPFAST_DEBUG="1"))
        out, err = cli.communicate(timeout=30)
        assert "echo ok" in out, out + err
        assert "#path client tcp" in out
        # The attack was in place: the squatter held the names throughout,
        # and the client did try its rendezvous (its pid is a peer) and
        # refused it.
        assert squat.poll() is None, "the squatter was gone before the client was done"
        assert "not the listener owner's" in err, err
        squat.stdin.close()
        result = json.loads(readline(squat))
        assert cli.pid in result["peer_pids"], (cli.pid, result)
        assert result["bytes"] == 0 and result["fds"] == 0, result
    finally:
        stop(srv)
        stop(squat)


def test_forged_hello_cannot_take_a_plain_connection(build, attacker):
    srv, port, ino = start_server(attacker, 1)
    try:
        go(srv)
        victim = socket.socket()
        victim.bind(("127.0.0.1", 0))
        vport = victim.getsockname()[1]
        hijack = attacker("hijack", port, ino, vport, 3)
        assert readline(hijack).strip() == "sent"
        # The forged hello is queued; now the victim, a plain TCP client,
        # connects from the port the forged hello names.
        victim.connect(("127.0.0.1", port))
        victim.sendall(b"secret")
        victim.settimeout(10)
        assert victim.recv(100) == b"secret"
        victim.close()
        result = json.loads(readline(hijack))
        hijack.wait(timeout=10)
        assert result["bytes"] == 0, result
    finally:
        stop(srv)
