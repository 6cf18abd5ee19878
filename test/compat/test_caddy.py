"""caddy, Debian's (a Go program linked with cgo: it has a program
interpreter and Go's build-info section; `loopfast run` picks the seccomp
supervisor for it by the latter, and LOOPFAST_DEBUG says so): a static
file, a `respond` answer and a `reverse_proxy` to a Python http.server
under the preload. Clients: curl (the preload) and busybox's static wget
(supervised). Each round runs without loopfast and under it, with the
same answers, and caddy stopped with SIGTERM ends alike.

Under loopfast the proxy's hop (caddy, supervised, to the upstream) is on
the fast path at both ends, from the kernel: caddy's own descriptor (not
its supervisor's) joined to the upstream's. The clients' hop is plain TCP
at both ends, and must be: caddy sets SO_REUSEPORT on every listener
(checked here from the kernel), and loopfast serves no SO_REUSEPORT
listener (loopfast(7), "Where the fast path does not apply")."""
import ctypes
import hashlib
import os
import socket
import struct
import subprocess

import pytest

import kernel
from conftest import LOOPFAST, await_pairs, await_tcp, finish, lf, need, programs

libc = ctypes.CDLL(None, use_errno=True)
SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 434, 438  # the same on x86_64 and aarch64

CADDYFILE = """{{
	admin off
	auto_https off
	storage file_system {home}/data
}}
http://127.0.0.1:{port} {{
	bind 127.0.0.1
	respond /hello "hello from caddy" 200
	reverse_proxy /up/* 127.0.0.1:{up}
	root * {tmp}/www
	file_server
}}
"""


def reuseport(pid, port):
    """SO_REUSEPORT of pid's TCP listener on 127.0.0.1:port, read from a
    copy of its descriptor (pidfd_getfd)."""
    want = {ino for ino, (st, local, _) in kernel.tcp_sockets().items() if st == "LISTEN" and local == ("127.0.0.1", port)}
    pfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    assert pfd >= 0, os.strerror(ctypes.get_errno())
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in {f"socket:[{i}]" for i in want}:
                copy = libc.syscall(SYS_PIDFD_GETFD, pfd, int(fd), 0)
                assert copy >= 0, os.strerror(ctypes.get_errno())
                with socket.socket(fileno=copy) as s:
                    return s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
    finally:
        os.close(pfd)
    pytest.fail(f"process {pid} holds no listener on 127.0.0.1:{port}")


@pytest.mark.timeout(180)
def test_caddy_file_respond_and_reverse_proxy(procs, tmp):
    need("caddy", "curl", "busybox", "python3")
    blob = os.urandom(16 << 20)  # far more than the pipes and socket buffers hold: a client not read holds
    (tmp / "www").mkdir()
    (tmp / "www" / "blob").write_bytes(blob)
    (tmp / "up" / "up").mkdir(parents=True)
    (tmp / "up" / "up" / "blob").write_bytes(blob[::-1])
    rounds = []
    for under in (False, True):
        tag = "lf" if under else "plain"
        run = lf if under else (lambda *argv: list(map(str, argv)))
        up, up_port = procs.serve(f"upstream-{tag}", lambda port: run(
            "python3", "-m", "http.server", port, "--bind", "127.0.0.1", "--directory", tmp / "up"), port=0)
        home = tmp / f"home-{tag}"
        env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
               "LOOPFAST_DEBUG": "1"}

        def caddy(port):
            conf = tmp / f"Caddyfile-{tag}"
            conf.write_text(CADDYFILE.format(home=home, port=port, up=up_port, tmp=tmp))
            return run("caddy", "run", "--config", conf, "--adapter", "caddyfile")

        srv, port = procs.serve(f"caddy-{tag}", caddy, env=env)
        url = f"http://127.0.0.1:{port}"
        hello = [finish(procs.start(f"curl-hello-{tag}", run("curl", "-sS", f"{url}/hello"), stdout=subprocess.PIPE)),
                 finish(procs.start(f"wget-hello-{tag}", run("busybox", "wget", "-q", "-O", "-", f"{url}/hello"),
                                    stdout=subprocess.PIPE))]
        sums = []
        for name, argv in (("curl", ["curl", "-sS"]), ("wget", ["busybox", "wget", "-q", "-O", "-"])):
            for path in ("/blob", "/up/blob"):
                cli = procs.start(f"{name}-{path[1:].replace('/', '-')}-{tag}", run(*argv, url + path),
                                  stdout=subprocess.PIPE)
                if under:
                    # The client's hop: plain TCP at both ends (SO_REUSEPORT).
                    await_tcp(srv, cli, f"127.0.0.1:{port}")
                    if path.startswith("/up/"):
                        # The proxy's hop: caddy's own socket joined to the upstream's.
                        assert await_pairs("unix_pairs", srv, up, up_port), (kernel.unix_sockets(), up.log.read_text())
                        assert not kernel.tcp_pairs(programs(srv), programs(up), up_port)
                sums.append(hashlib.sha256(finish(cli)).hexdigest())
        if under:
            assert reuseport(programs(srv)[0], port) == 1
            log = srv.log.read_text(errors="replace")
            assert "/usr/bin/caddy is a Go binary: supervised" in log, log[-2000:]
        procs.stop(srv)
        procs.stop(up)
        rounds.append((hello, sums, srv.returncode))
    want = [hashlib.sha256(blob).hexdigest(), hashlib.sha256(blob[::-1]).hexdigest()] * 2
    assert rounds[0] == ([b"hello from caddy"] * 2, want, 0), rounds[0]
    assert rounds[1] == rounds[0]


def notify_socket(tmp, abstract):
    """A fake systemd notification socket (a datagram socket that gets
    each sender's credentials) and the NOTIFY_SOCKET that names it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    if abstract:
        name = f"@lf-notify-{os.getpid()}-{tmp.name}"
        s.bind("\0" + name[1:])
    else:
        name = str(tmp / "notify")
        s.bind(name)
    return s, name


def notices(s, until, timeout=60):
    """[(sender pid, message)] received on s, up to the one equal to until."""
    got = []
    s.settimeout(timeout)
    while not got or got[-1][1] != until:
        try:
            msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            pytest.fail(f"no {until!r} within {timeout} s: {got}")
        pid = next(struct.unpack("iII", d)[0] for lvl, typ, d in anc
                   if lvl == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS)
        got.append((pid, msg.decode()))
    return got


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["plain", "seccomp", "seccomp-mainpid", "preload-mainpid"])
def test_caddy_notify_socket(procs, tmp, how):
    """Under systemd (Type=notify): caddy says READY=1 on NOTIFY_SOCKET
    itself (it inherits the variable), from its own pid, under loopfast
    as without. Supervised, caddy is the supervisor's child: with
    --notify-mainpid the supervisor first says MAINPID=<caddy's pid>
    (which a unit with NotifyAccess=main needs to accept caddy's READY=1),
    before caddy can say anything; without it, nothing (the unit needs
    NotifyAccess=all). Under the preload (--mode preload), caddy is exec'd
    by `loopfast run`: its pid is already the one systemd started, and
    nothing is said for it. Abstract names (@...) and paths both."""
    need("caddy")
    s, name = notify_socket(tmp, abstract=how != "seccomp")
    with s:
        opts = {"plain": None, "seccomp": [], "seccomp-mainpid": ["--notify-mainpid"],
                "preload-mainpid": ["--notify-mainpid", "--mode", "preload"]}[how]
        home = tmp / "home"
        env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
               "NOTIFY_SOCKET": name}

        def caddy(port):
            conf = tmp / "Caddyfile"
            conf.write_text(CADDYFILE.format(home=home, port=port, up=1, tmp=tmp))
            argv = ["caddy", "run", "--config", conf, "--adapter", "caddyfile"]
            return argv if opts is None else [str(LOOPFAST), "run", *opts, "--", *argv]

        srv, port = procs.serve(f"caddy-{how}", caddy, env=env)
        got = notices(s, "READY=1")
        pid = programs(srv)[0] if how.startswith("seccomp") else srv.pid
        assert pid == srv.pid or kernel.process_tree(srv.pid) == [srv.pid, pid]
        want = [(srv.pid, f"MAINPID={pid}")] if how == "seccomp-mainpid" else []
        assert got == want + [(pid, "RELOADING=1"), (pid, "READY=1")], (got, srv.pid, pid)  # caddy says both
        procs.stop(srv)
        assert srv.returncode == 0
        assert notices(s, "STOPPING=1") == [(pid, "STOPPING=1")]
