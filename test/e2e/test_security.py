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
import time

import pytest

from conftest import PROBE, free_port, wrap

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

SQUATTER = textwrap.dedent("""
    import json, socket, sys, select, time
    fam, ino = sys.argv[1], int(sys.argv[2])
    socks = []
    for kind in ("L", "S"):
        t = socket.SOCK_STREAM if kind == "L" else socket.SOCK_DGRAM
        r = socket.socket(socket.AF_UNIX, t)
        r.bind(b"\\0loopfast/2/%s/%s/%d" % (kind.encode(), fam.encode(), ino))
        if kind == "L":
            r.listen(16)
        socks.append(r)
    print("ready", flush=True)
    accepted, data, fds = 0, b"", 0
    end = time.time() + float(sys.argv[3])
    while time.time() < end:
        if not select.select([socks[0]], [], [], 0.1)[0]:
            continue
        c, _ = socks[0].accept()
        accepted += 1
        c.settimeout(0.5)
        try:
            msg, anc, flags, addr = c.recvmsg(65536, socket.CMSG_SPACE(64))
            data += msg
            fds += sum(len(a[2]) // 4 for a in anc if a[1] == socket.SCM_RIGHTS)
        except OSError:
            pass
    print(json.dumps({"accepted": accepted, "bytes": len(data), "fds": fds}), flush=True)
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
                                 scripts[name], *map(str, args)], stdout=subprocess.PIPE, text=True)
    run_as.py = py
    run_as.scripts = scripts
    yield run_as
    shutil.rmtree(d)


def listener_inode(port):
    """The inode of the TCP socket listening on 127.0.0.1:port (what names
    its rendezvous), from /proc/net/tcp."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            p = line.split()
            if p[3] == "0A" and int(p[1].split(":")[1], 16) == port:
                return int(p[9])
    raise AssertionError(f"no listener on port {port}")


def start_server(attacker, n):
    srv = subprocess.Popen(wrap("loopfast", [attacker.py, attacker.scripts["server"], str(n), "4"]),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port, ino = map(int, srv.stdout.readline().split())
    return srv, port, ino


def test_squatted_rendezvous_gets_nothing(build, attacker):
    # The root server has bound its socket; before it listens, a process
    # of another uid takes the rendezvous and stash names of that socket.
    srv, port, ino = start_server(attacker, 1)
    squat = attacker("squat", "4", ino, 8)
    try:
        assert squat.stdout.readline().strip() == "ready"
        srv.stdin.write("go\n")
        srv.stdin.flush()
        assert srv.stdout.readline().strip() == "listening"
        cli = subprocess.run(wrap("loopfast", [str(PROBE), "client-echo", str(port)]), capture_output=True,
                             text=True, timeout=30, env=dict(os.environ, LOOPFAST_DEBUG="1"))
        assert "echo ok" in cli.stdout, cli.stdout + cli.stderr
        assert "#path client tcp" in cli.stdout
        # The attack was in place: the squatter was still running, and the
        # client did reach its rendezvous and refused it.
        assert squat.poll() is None
        assert "not the listener owner's" in cli.stderr, cli.stderr
    finally:
        srv.kill()
        srv.wait()
    result = json.loads(squat.stdout.readline())
    squat.wait(timeout=20)
    assert result["accepted"] >= 1, result
    assert result["bytes"] == 0 and result["fds"] == 0, result


def test_forged_hello_cannot_take_a_plain_connection(build, attacker):
    srv, port, ino = start_server(attacker, 1)
    try:
        srv.stdin.write("go\n")
        srv.stdin.flush()
        assert srv.stdout.readline().strip() == "listening"
        victim = socket.socket()
        victim.bind(("127.0.0.1", 0))
        vport = victim.getsockname()[1]
        hijack = attacker("hijack", port, ino, vport, 3)
        assert hijack.stdout.readline().strip() == "sent"
        # The forged hello is queued; now the victim, a plain TCP client,
        # connects from the port the forged hello names.
        victim.connect(("127.0.0.1", port))
        victim.sendall(b"secret")
        victim.settimeout(10)
        assert victim.recv(100) == b"secret"
        victim.close()
        result = json.loads(hijack.stdout.readline())
        hijack.wait(timeout=10)
        assert result["bytes"] == 0, result
    finally:
        srv.kill()
        srv.wait()
