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

from conftest import PROBE, free_port, readline, stop, wrap

USER = "lfattacker"

# Holds the rendezvous name from "bound" until its stdin closes, then takes
# what is still queued and reports every connection: its peer's pid
# (SO_PEERCRED), and the bytes and fds it got.
SQUATTER = textwrap.dedent("""
    import json, socket, struct, sys, select
    port = int(sys.argv[1])
    r = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    r.bind(b"\\0loopfast/L/4/127.0.0.1/%d" % port)
    r.listen(16)
    print("bound", flush=True)
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

HIJACKER = textwrap.dedent("""
    import json, socket, sys, array
    server_port, victim_port = int(sys.argv[1]), int(sys.argv[2])
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.bind(b"\\0loopfast/C/4/127.0.0.1/%d/127.0.0.1/%d/1" % (victim_port, server_port))
    u.connect(b"\\0loopfast/L/4/127.0.0.1/%d" % server_port)
    # A TCP socket of our own as the "doorbell" (connected to a listener of
    # ours): anything but the victim's, which we cannot have.
    own = socket.socket()
    own.bind(("127.0.0.1", 0))
    own.listen(1)
    t = socket.create_connection(own.getsockname())
    hello = (0x3148464c).to_bytes(4, "little") + bytes(4)
    sent = u.sendmsg([hello], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [t.fileno()]))])
    print("sent", sent, len(hello), flush=True)
    u.settimeout(float(sys.argv[3]))
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
    for name, src in (("squat", SQUATTER), ("hijack", HIJACKER)):
        path = os.path.join(d, name + ".py")
        with open(path, "w") as f:
            f.write(src)
        os.chmod(path, 0o644)
        scripts[name] = path

    def run_as(name, *args):
        return subprocess.Popen(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", py,
                                 scripts[name], *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
    yield run_as
    shutil.rmtree(d)


def test_squatted_rendezvous_gets_nothing(build, attacker):
    port = free_port()
    squat = attacker("squat", port)
    try:
        assert readline(squat).strip() == "bound"
        # The real server (root) listens on the port after the attacker took
        # the rendezvous name; a fast-path client connects and talks.
        srv = subprocess.Popen(wrap("loopfast", [str(PROBE), "serve-echo", "1"]), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dict(os.environ, LFPROBE_PORT=str(port)))
        try:
            sport = readline(srv).strip()
            assert sport == str(port)
            cli = subprocess.Popen(wrap("loopfast", [str(PROBE), "client-echo", sport]), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            out, err = cli.communicate(timeout=30)
            assert "echo ok" in out, out + err
            assert "#path client tcp" in out
        finally:
            stop(srv)
        # The attack was in place: the squatter held the name throughout,
        # and the client did try it (it connected: its pid is a peer).
        assert squat.poll() is None, "the squatter was gone before the client was done"
        squat.stdin.close()
        result = json.loads(readline(squat))
        assert cli.pid in result["peer_pids"], (cli.pid, result)
        assert result["bytes"] == 0 and result["fds"] == 0, result
    finally:
        stop(squat)


def test_forged_hello_cannot_take_a_plain_connection(build, attacker):
    srv = subprocess.Popen(wrap("loopfast", [str(PROBE), "serve-echo", "1"]), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        port = int(readline(srv))
        victim = socket.socket()
        victim.bind(("127.0.0.1", 0))
        vport = victim.getsockname()[1]
        hijack = attacker("hijack", port, vport, 3)
        _, sent, size = readline(hijack).split()
        assert sent == size, "the forged hello was not sent whole"
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
