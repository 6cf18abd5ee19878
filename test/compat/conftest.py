"""Fixtures for the compatibility suite: real programs from Debian 12's
packages (scripts/compat-deps.sh installs them), both ends under
`loopfast run`, servers started by hand in a temporary directory on free
ports and stopped by PID; and the proof, from kernel state, that a
connection between two process trees is on the fast path.

The proof (`await_fast`, test/kernel.py): a Unix stream socket held by the
client's process tree (/proc/PID/fd) whose peer, by sock_diag
(UNIX_DIAG_PEER, what `ss -x` prints), is held by the server's tree: the
two ends of one connection, each in the process that uses it. Plain TCP
(`await_tcp`): a TCP connection whose two ends (inet_diag, `ss -t -e`)
the two trees hold. loopfast's own report (`loopfast status`) is never
asked. Tests look while the client is made to hold its connection (it
waits for its stdin, for a message or for a FIFO, or is blocked writing
output the test has not read yet), never by timing.

Every test also fails if a program it started died of a signal the test
did not send it, or if the kernel logged a fault (a segfault) while it
ran (the autouse fixture `endings`)."""
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import kernel
from kernel import check_ending, expect_signal  # noqa: F401 (for the tests)

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LOOPFAST_BUILD", ROOT / "build"))
LOOPFAST = BUILD / "loopfast"


def pytest_configure(config):
    # pytest-timeout gives every test its own bound; without the plugin the
    # subprocess timeouts in each test still bound every wait.
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): per-test time limit (pytest-timeout)")


def lf(*argv):
    """The command line that runs argv under loopfast."""
    return [str(LOOPFAST), "run", "--", *map(str, argv)]


def need(*binaries):
    for b in binaries:
        if not shutil.which(b) and not os.access(b, os.X_OK):
            pytest.fail(f"{b} is not installed (scripts/compat-deps.sh installs it)")


@pytest.fixture(scope="session", autouse=True)
def build():
    if not LOOPFAST.exists():
        pytest.fail(f"{LOOPFAST} is missing: run make first")
    return BUILD


@pytest.fixture(autouse=True)
def endings():
    """Every test: each program it started ended as over TCP (no death by
    a signal the test did not send), and the kernel logged no fault while
    it ran (test/kernel.py)."""
    yield from kernel.watch()


@pytest.fixture
def tmp():
    """A temporary directory that servers dropping privileges (nginx's
    www-data workers, sshd's privilege separation) can read."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="lf-compat-"))
    d.chmod(0o755)
    yield d
    if os.environ.get("LF_COMPAT_KEEP"):  # keep the configs and every program's log
        print(f"kept {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)


# --- kernel state: processes, listeners, fast-path connections ----------

def tree(pid):
    """pid and all its descendants, now."""
    return set(kernel.process_tree(pid))


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _proc_addr(hexaddr):
    raw = bytes.fromhex(hexaddr)
    # /proc/net/tcp{,6} prints the address as host-order 32-bit words.
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if raw[:12] == bytes(10) + b"\xff\xff":  # an IPv4-mapped address (Java's dual-stack sockets)
        raw = raw[12:]
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def tcp_sockets(pids, state):
    """[(local, remote)] of the TCP sockets in state ("0A" LISTEN, "01"
    ESTABLISHED) held by pids, each endpoint an (address, port)."""
    inodes = kernel.socket_inodes(pids)
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == state and int(cols[9]) in inodes:
                    ends = [c.split(":") for c in cols[1:3]]
                    out.append(tuple((_proc_addr(a), int(p, 16)) for a, p in ends))
    return out


def listening(pids):
    """{(address, port)} of the TCP listeners held by pids (inet_diag's
    listeners only, `ss -t -l -e`: reading /proc/net/tcp takes half a
    second where many connections are in TIME_WAIT)."""
    inodes = kernel.socket_inodes(pids)
    out = set()
    for line in kernel._ss("-t", "-l", "-e"):
        f, m = line.split(), re.search(r"\bino:(\d+)", line)
        if len(f) >= 4 and m and int(m.group(1)) in inodes:
            addr, port = kernel._endpoint(f[3])
            out.add(("::" if addr == "*" else addr, port))  # ss prints a dual-stack [::] as *
    return out


def _dest(peer):
    """(address, port) of "127.0.0.1:P" or "[::1]:P"."""
    addr, port = peer.rsplit(":", 1)
    return addr.strip("[]"), int(port)


def _await(kind, pairs_of, server, client, count, peer, timeout):
    deadline = time.monotonic() + timeout
    addr, port = _dest(peer) if peer else (None, None)
    while True:
        pairs = pairs_of(kernel.process_tree(client.pid), kernel.process_tree(server.pid), port, addr)
        if len(pairs) >= count:
            return pairs
        gone = client.poll() is not None or server.poll() is not None
        if gone or time.monotonic() > deadline:
            why = "a process exited" if gone else f"not within {timeout} s"
            plain = [f"{a}:{p} -> {ra}:{rp}" for (a, p), (ra, rp) in tcp_sockets(tree(client.pid), "01")]
            pytest.fail(f"{len(pairs)} of {count} {kind} connections between server {server.pid} and client "
                        f"{client.pid} ({why}); the client's plain TCP connections: {plain}\n"
                        f"{tail(server)}\n{tail(client)}")
        time.sleep(0.05)


def await_fast(server, client, count=1, peer=None, timeout=60):
    """Waits until at least count fast-path connections join the process
    trees of server and client (Popen objects) — to peer ("127.0.0.1:P" or
    "[::1]:P", which the client end's name carries) if given — and returns
    them ([kernel.Pair]). Fails if a process exits first or after timeout
    seconds."""
    return _await("fast-path", kernel.unix_pairs, server, client, count, peer, timeout)


def await_tcp(server, client, peer, count=1, timeout=60):
    """The same for plain TCP connections to peer, both ends TCP sockets
    held by the two trees; and none of the client's to peer is fast."""
    pairs = _await("plain TCP", lambda c, s, port, addr: kernel.tcp_pairs(c, s, port, addr), server, client, count,
                   peer, timeout)
    addr, port = _dest(peer)
    fast = kernel.unix_pairs(kernel.process_tree(client.pid), kernel.process_tree(server.pid), port, addr)
    assert not fast, f"plain TCP expected to {peer}, yet on the fast path: {fast}"
    return pairs


def tail(proc, n=2000):
    log = getattr(proc, "log", None)
    if log is None or not log.exists():
        return ""
    return f"--- {log.name}:\n" + log.read_text(errors="replace")[-n:]


# --- processes -----------------------------------------------------------

def free_port(host="127.0.0.1"):
    """A port nothing is bound to, below the ephemeral range, so that no
    client's connection takes it before the server binds it (and a machine
    whose ephemeral ports are all in TIME_WAIT still has some)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(200):
        port = random.randrange(10000, max(low, 10001))
        with socket.socket(family) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
            try:
                s.bind((host, port))
                return port
            except OSError:
                continue
    pytest.fail(f"no free port on {host}")


def url_host(host):
    return f"[{host}]" if ":" in host else host


class Procs:
    """Starts processes with their output in tmp/NAME.log and stops every
    one, and whatever it started, by PID at teardown (last started first)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.started = []

    def start(self, name, argv, stdin=subprocess.DEVNULL, stdout=None, env=None, cwd=None):
        log = self.tmp / f"{name}.log"
        with open(log, "ab") as f:
            p = subprocess.Popen([str(a) for a in argv], stdin=stdin, stdout=stdout or f,
                                 stderr=subprocess.STDOUT if stdout is None else f,
                                 env=None if env is None else {**os.environ, **env}, cwd=cwd)
        p.name, p.log = name, log
        self.started.append(p)
        return p

    def serve(self, name, argv_for, host="127.0.0.1", port=None, attempts=5, timeout=60, **kw):
        """Starts a server and waits until its process tree listens on host.
        argv_for(port) gives its command line: with port=0 the program binds
        a kernel-chosen port, which is read back from /proc; otherwise each
        attempt picks a free port and retries if the program cannot bind it
        (another process took it meanwhile). Returns (Popen, port)."""
        for _ in range(attempts):
            want = free_port(host) if port is None else port
            p = self.start(name, argv_for(want), **kw)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and p.poll() is None:
                ports = {pt for a, pt in listening(tree(p.pid)) if a == host and (want == 0 or pt == want)}
                if ports:
                    return p, min(ports)
                time.sleep(0.05)
            if p.poll() is None:
                pytest.fail(f"{name} does not listen on {host} after {timeout} s\n{tail(p)}")
            if port is not None:
                break
        pytest.fail(f"{name} exited with {p.returncode} before listening on {host}\n{tail(p)}")

    def stop(self, p, sig=signal.SIGTERM, timeout=20):
        """Stops p with sig (SIGKILL after timeout seconds) and whatever it
        left behind; fails if it had died of a signal the test did not send."""
        self._halt(p, sig, timeout)
        check_ending(p)

    def _halt(self, p, sig=signal.SIGTERM, timeout=20):
        family = {(pid, _start_time(pid)) for pid in tree(p.pid) - {p.pid}}
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=timeout)
        for pid, started in family:  # workers the server left behind, if still the same processes
            if started is not None and _start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def stop_all(self):
        # How each ended is checked after (the fixture `endings`), for all;
        # each is halted even if halting another raised (kernel.each).
        kernel.each(self._halt_and_close, reversed(self.started))

    def _halt_and_close(self, p):
        self._halt(p)
        for f in (p.stdin, p.stdout):
            if f:
                f.close()


@pytest.fixture
def procs(tmp):
    ps = Procs(tmp)
    yield ps
    ps.stop_all()


def wait_log(p, marker, timeout=60):
    """Waits until marker (bytes) appears in what p wrote to its log."""
    deadline = time.monotonic() + timeout
    while marker not in p.log.read_bytes():
        if p.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{p.name} logged no {marker!r}\n{tail(p)}")
        time.sleep(0.05)


def finish(p, stdin=None, timeout=60):
    """Feeds stdin (bytes) to a client started with pipes, waits for it and
    returns its stdout; asserts it exited 0."""
    try:
        out, _ = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"{p.name} did not finish within {timeout} s\n{tail(p)}")
    assert p.returncode == 0, f"{p.name} exited {p.returncode}\n{tail(p)}"
    return out


# --- nginx, shared by several files ---------------------------------------

NGINX_CONF = """daemon off;
worker_processes 2;
user www-data;
pid {tmp}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    server {{
        listen {listen}{listen_opts};
        root {tmp}/www;
{server}
    }}
}}
"""


def start_nginx(procs, tmp, server="", listen_opts="", host="0.0.0.0"):
    """nginx (a master and two www-data workers) under `loopfast run`,
    serving tmp/www; server is extra text for the server block. It listens
    as most configurations do, `listen PORT` (every IPv4 address), unless
    host says otherwise ("::" is `listen [::]:PORT`, IPv6 only as nginx
    sets it). Returns (Popen of the master, port)."""
    need("nginx")
    (tmp / "www").mkdir(exist_ok=True)

    def argv(port):
        conf = tmp / "nginx.conf"
        listen = port if host == "0.0.0.0" else f"{url_host(host)}:{port}"
        conf.write_text(NGINX_CONF.format(tmp=tmp, listen=listen, listen_opts=listen_opts,
                                          server=server))
        return lf("nginx", "-p", tmp, "-c", conf, "-e", tmp / "nginx-error.log")

    return procs.serve("nginx", argv, host=host)


# --- appended for test_signals.py ------------------------------------------

def wait_line(p, line, timeout=60):
    """Reads p's stdout (a pipe) until the line (bytes, with its newline)
    has come; fails if p exits or the timeout passes first."""
    import select
    got, deadline = b"", time.monotonic() + timeout
    while line not in got:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            pytest.fail(f"{p.name} did not print {line!r} within {timeout} s (got {got!r})\n{tail(p)}")
        chunk = os.read(p.stdout.fileno(), 4096)
        if not chunk:
            p.wait(timeout=timeout)
            pytest.fail(f"{p.name} exited {p.returncode} before printing {line!r} (got {got!r})\n{tail(p)}")
        got += chunk
    return got


def await_rendezvous(server, port, timeout=30):
    """Waits until server's process tree holds, beside its TCP listener on
    port, that listener's rendezvous: the abstract Unix listener
    "@loopfast/<v>/L/.../<the TCP listener's inode>" (kernel state: /proc
    fds, inet_diag and sock_diag)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = kernel.process_tree(server.pid)
        held = kernel.socket_inodes(pids)
        found = (re.search(r":(\d+) .*\bino:(\d+)", line) for line in kernel._ss("-t", "-l", "-e"))
        tcp = {int(m.group(2)) for m in found if m and int(m.group(1)) == port and int(m.group(2)) in held}
        names = {f[4] for f in map(str.split, kernel._ss("-x", "-l")) if len(f) > 5 and int(f[5]) in held}
        if any(n.startswith("@loopfast/") and "/L/" in n and int(n.rsplit("/", 1)[1]) in tcp for n in names):
            return
        if server.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no rendezvous held by {server.pid} for its listener on port {port}: {sorted(names)}\n"
                        f"{tail(server)}")
        time.sleep(0.02)


def await_established(client, port, timeout=60):
    """Waits until client's process tree holds an established TCP
    connection to port (inet_diag, established sockets only: fast however
    many are in TIME_WAIT). For a plain-TCP client whose readiness nothing
    else shows (wrk)."""
    deadline = time.monotonic() + timeout
    while True:
        held = kernel.socket_inodes(kernel.process_tree(client.pid))
        for line in kernel._ss("-t", "-e", "state", "established"):
            f, m = line.split(), re.search(r"\bino:(\d+)", line)  # Recv-Q Send-Q Local Peer ino:...
            if m and len(f) > 3 and kernel._endpoint(f[3])[1] == port and int(m.group(1)) in held:
                return
        if client.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{client.name} holds no connection to port {port}\n{tail(client)}")
        time.sleep(0.02)


# --- supervised programs (test_caddy.py, test_etcd.py) ------------------------

def programs(p):
    """The processes a `loopfast run` started (its supervisor left out:
    the proof is the program's own descriptors), or p's tree."""
    tree = kernel.process_tree(p.pid)
    return [q for q in tree if q != p.pid] if os.readlink(f"/proc/{p.pid}/exe").endswith("/loopfast") else tree


def await_pairs(kind, client, server, port, timeout=60):
    """The pairs (kernel.unix_pairs or tcp_pairs) from the programs of
    client to those of server on port, once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        pairs = getattr(kernel, kind)(programs(client), programs(server), port)
        if pairs or time.monotonic() > deadline or client.poll() is not None:
            return pairs
        time.sleep(0.05)
