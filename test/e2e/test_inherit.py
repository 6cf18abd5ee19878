"""Listeners inherited through exec, with both ends under `loopfast run`:
systemd socket activation, php-fpm's reload (USR2: the master re-execs
itself with its listener inherited, workers change uid) and nginx's binary
upgrade (USR2: a new master exec'd with the listeners in the NGINX
variable; then WINCH and QUIT to the old one). Each connection must be
served (every wait bounded), and take one path at both ends: the fast path
on both, or plain TCP on both. A split (the client moved to its Unix socket
while the server accepted the TCP connection, so the client waits for an
answer that never comes) is what issue 13 reports; it is read from kernel
state (sock_diag and /proc/PID/fd: who holds the server's end of the
client's Unix socket, and the TCP sockets of both ends) and raised as
Split, the only failure an expected-failure mark here may stand for.

Clients are small Python programs: a plain one and one under `loopfast
run`, interleaved. Each connects, says which kernel object carries its
connection and its TCP port, and (held clients) waits for the test to look
at kernel state before it sends its request; every read has a 5 s timeout,
which only catches a hang (loopback answers in milliseconds)."""
import ctypes
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from conftest import (fast_path_pairs, free_port, lf_cmd, need, process_tree, readline, socket_inodes, stop,
                      tcp_connections, unix_sockets)

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = [pytest.mark.timeout(240), pytest.mark.extra]

# How long a connection may take to show at both ends, and a client to get
# its answer: bounds that only catch hangs.
SETTLE = 5
ANSWER = 5
PR_SET_CHILD_SUBREAPER = 36


class Split(AssertionError):
    """A connection's ends took different paths (issue 13)."""


# ---- clients

CLIENT_START = textwrap.dedent("""
    import os, socket, struct, sys
    def path(fd):
        ino = os.readlink(f"/proc/self/fd/{fd}")[8:-1]
        with open("/proc/net/unix") as f:
            return "unix" if any(l.split()[6:7] == [ino] for l in f) else "tcp"
    port, hold = int(sys.argv[1]), sys.argv[2] == "hold"
    c = socket.create_connection(("127.0.0.1", port), timeout=%d)
    print("connected", path(c.fileno()), c.getsockname()[1], flush=True)
    if hold:
        sys.stdin.readline()
    def answer(text):
        print(text.replace("\\n", " ").strip(), flush=True)
    try:
""" % ANSWER)

CLIENT_END = textwrap.dedent("""
    except OSError as e:
        answer("failed " + repr(e))
""")

# One line out, one line back.
LINE_CLIENT = CLIENT_START + textwrap.indent(textwrap.dedent("""
    c.sendall(b"hello %d\\n" % c.getsockname()[1])
    answer("answer " + c.makefile("rb").readline().decode())
"""), "    ") + CLIENT_END

# One HTTP/1.0 GET of /page.txt.
HTTP_CLIENT = CLIENT_START + textwrap.indent(textwrap.dedent("""
    c.sendall(b"GET /page.txt HTTP/1.0\\r\\nHost: test\\r\\n\\r\\n")
    r = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        r += d
    answer("answer " + r.split(b"\\r\\n")[0].decode() + " " + r.split(b"\\r\\n\\r\\n", 1)[-1].decode())
"""), "    ") + CLIENT_END

# One FastCGI request (responder role) for the script in argv[3]; prints the
# body of the answer.
FCGI_CLIENT = CLIENT_START + textwrap.indent(textwrap.dedent("""
    def rec(t, body):
        return struct.pack(">BBHHBB", 1, t, 1, len(body), 0, 0) + body
    def nv(k, v):
        k, v = k.encode(), v.encode()
        n = lambda x: bytes([x]) if x < 128 else struct.pack(">I", x | 0x80000000)
        return n(len(k)) + n(len(v)) + k + v
    env = {"SCRIPT_FILENAME": sys.argv[3], "REQUEST_METHOD": "GET", "QUERY_STRING": "", "CONTENT_LENGTH": "0",
           "SERVER_PROTOCOL": "HTTP/1.1", "GATEWAY_INTERFACE": "CGI/1.1"}
    params = b"".join(nv(k, v) for k, v in env.items())
    c.sendall(rec(1, struct.pack(">HB5x", 1, 0)) + rec(4, params) + rec(4, b"") + rec(5, b""))
    out, buf, done = b"", b"", False
    while not done:
        d = c.recv(65536)
        if not d:
            break
        buf += d
        while len(buf) >= 8:
            _, t, _, n, p, _ = struct.unpack(">BBHHBB", buf[:8])
            if len(buf) < 8 + n + p:
                break
            if t == 6:
                out += buf[8:8 + n]
            buf = buf[8 + n + p:]
            done = done or t == 3
    answer("answer " + out.split(b"\\r\\n\\r\\n", 1)[-1].decode())
"""), "    ") + CLIENT_END


class Client:
    """One client process, plain ("tcp") or under `loopfast run`."""

    def __init__(self, mode, script, port, hold, *args):
        argv = [sys.executable, "-c", script, str(port), "hold" if hold else "now", *map(str, args)]
        env = dict(os.environ, LOOPFAST_DEBUG="1")
        self.mode = mode
        self.proc = subprocess.Popen(lf_cmd(argv) if mode == "loopfast" else argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.path = self.port = self.answer = None

    def connected(self):
        line = readline(self.proc, timeout=SETTLE + 10).split()
        assert line[0] == "connected", line
        self.path, self.port = line[1], int(line[2])
        return self

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self):
        """The client's answer ("answer ..." or "failed ..."); bounded."""
        if self.port is None:
            self.connected()
        self.answer = readline(self.proc, timeout=ANSWER + 10).strip()
        try:
            self.proc.wait(timeout=10)
        finally:
            stop(self.proc)
        self.stderr = self.proc.stderr.read()
        return self.answer


# ---- kernel state

def server_tcp(server_pids, port, cport):
    """The TCP sockets (any state but listening) with local port `port` and
    peer port `cport` that server_pids hold: the server's end of a plain
    connection, or of a fast-path client's doorbell."""
    out = subprocess.run(["ss", "-H", "-t", "-n", "-e", "-a", f"( sport = :{port} and dport = :{cport} )"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    held = socket_inodes(server_pids)
    return [int(i) for i in re.findall(r"\bino:(\d+)", out) if int(i) in held]


def client_fast_sockets(client_pids, port, cport):
    """The fast-path client Unix sockets for (cport -> port) that
    client_pids hold: {inode: peer inode}."""
    name = re.compile(r"@loopfast/(\d+/)?C/4/127\.0\.0\.1/%d/127\.0\.0\.1/%d/" % (cport, port))
    socks, held = unix_sockets(), socket_inodes(client_pids)
    return {ino: peer for ino, (n, peer) in socks.items() if ino in held and name.match(n)}


def ends(client, server_pids, port, server_says=None):
    """Which path the connection of a held client took at both ends, read
    from the kernel: "fast" (the client's Unix socket's peer is held by the
    server's processes), "tcp" (both hold TCP sockets of this connection),
    or a Split describing what each end holds. server_pids() gives the
    server's processes now; server_says(cport), where the server reports
    it, the path its accept returned."""
    cpids = process_tree(client.proc.pid)
    deadline = time.monotonic() + SETTLE
    while True:
        spids = server_pids()
        fast = client_fast_sockets(cpids, port, client.port)
        said = server_says(client.port) if server_says else None
        if fast and any(p in socket_inodes(spids) for p in fast.values()) and said in (None, "unix"):
            assert fast_path_pairs(cpids, spids, port), "fast_path_pairs disagrees"
            return "fast", None
        if not fast and tcp_connections(cpids, port) and server_tcp(spids, port, client.port) and \
                said in (None, "tcp"):
            return "tcp", None
        if (fast and said == "tcp") or (not fast and said == "unix") or time.monotonic() > deadline:
            holders = {p: [pid for pid, inos in ((q, socket_inodes([q])) for q in spids) if p in inos]
                       for p in fast.values()}
            return "split", (f"client {client.mode} port {client.port}: client end "
                             f"{'unix ' + str(fast) if fast else 'tcp'}; server end of its unix socket "
                             f"held by {holders or '-'} (server pids {sorted(spids)}); server TCP sockets "
                             f"for it: {server_tcp(spids, port, client.port)}; server says: {said}")
        time.sleep(0.05)


def loopfast_in(pid):
    """What a server process has of loopfast, from /proc and sock_diag:
    whether the interposer is loaded in it, and which rendezvous (listening
    "@loopfast/.../L/..." Unix sockets) it holds."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            loaded = "libloopfast" in f.read()
    except OSError:
        return f"pid {pid}: gone"
    out = subprocess.run(["ss", "-H", "-x", "-l", "-n"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    held = socket_inodes([pid])
    names = [f[4] for f in (l.split() for l in out.splitlines())
             if len(f) >= 6 and f[5].isdigit() and int(f[5]) in held and re.match(r"@loopfast/(\d+/)?L/", f[4])]
    return f"pid {pid}: interposer loaded {loaded}, rendezvous held {names or 'none'}"


class Log:
    """What happened to each connection, printed as a table on failure."""

    def __init__(self):
        self.rows, self.splits, self.unserved, self.notes = [], [], [], []

    def add(self, phase, client, path, split=None):
        self.rows.append(f"{phase:<28} {client.mode:<8} port {client.port:<5} client {client.path:<4} "
                         f"ends {path:<5} -> {client.answer}")
        if split:
            self.splits.append(f"{phase}: {split}; the client then: {client.answer}; its stderr: "
                               f"{client.stderr.strip()!r}")
        if not (client.answer or "").startswith("answer "):
            self.unserved.append(f"{phase}: {client.mode} port {client.port}: {client.answer}")

    def check(self, served=lambda answer: True):
        table = "\n".join(self.rows + self.notes)
        print(table)
        if self.splits:
            raise Split("ends on different paths:\n" + "\n".join(self.splits) + "\n" + table)
        assert not self.unserved, "not served:\n" + "\n".join(self.unserved) + "\n" + table
        bad = [r for r in self.rows if not served(r.split("-> ", 1)[1])]
        assert not bad, "wrong answers:\n" + "\n".join(bad)


def held(log, phase, mode, script, port, server_pids, *args, server_says=None):
    """One held client: connect, read both ends' paths from the kernel,
    then let it send its request and get the answer."""
    c = Client(mode, script, port, True, *args).connected()
    path, split = ends(c, server_pids, port, server_says)
    c.go()
    c.finish()
    log.add(phase, c, path, split)
    return path


def batch(log, phase, modes, script, port, *args, server_says=None):
    """Clients started together that do not wait: each must be served; its
    path at the server's end is checked where the server reports it."""
    clients = [Client(m, script, port, False, *args) for m in modes]
    for c in clients:
        c.finish()
    for c in clients:
        said = server_says(c.port, wait=True) if server_says else None
        split = None
        if said and said != c.path:
            split = f"client {c.mode} port {c.port}: client end {c.path}, server's accept says {said}"
        log.add(phase, c, "split" if split else said or "?", split)


class Background:
    """Clients, alternately plain and under loopfast, one after another
    from start() to stop(): requests served throughout a reload."""

    def __init__(self, log, phase, script, port, *args):
        self.log, self.phase, self.args = log, phase, (script, port, *args)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.clients = []

    def run(self):
        i = 0
        while not self.done.is_set():
            c = Client("loopfast" if i % 2 == 0 else "tcp", self.args[0], self.args[1], False, *self.args[2:])
            self.clients.append(c)
            try:
                c.finish()
            except BaseException as e:  # noqa: B902 (reported in stop())
                c.answer = f"failed in the test: {e!r}"
                c.stderr = ""
            i += 1

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.done.set()
        self.thread.join(timeout=ANSWER + 40)
        assert not self.thread.is_alive(), "a background client never finished"
        for c in self.clients:
            self.log.add(self.phase, c, "?")
        return len(self.clients)


def wait_for(what, check, timeout=30):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _sid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return 0


def kill_session(sid):
    """SIGKILL to every process of session sid (a daemon the test started,
    its workers and what it exec'd), again until none is left (a master
    killed after a worker may have forked a replacement); reaps those that
    became this process's children (see reaper)."""
    for _ in range(200):
        members = [int(p) for p in os.listdir("/proc") if p.isdigit() and _sid(int(p)) == sid]
        live = [p for p in members if alive(p)]
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in members:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not live:
            return
        time.sleep(0.05)
    raise AssertionError(f"processes of session {sid} survive SIGKILL")


@pytest.fixture
def reaper():
    """Makes this process the subreaper of what it starts for the length of
    a test, so that a daemon (reparented when the process that started it
    exits) can be reaped instead of left a zombie of pid 1."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0):
        pytest.fail(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def terminate(proc):
    """Stops a server that forks workers: SIGTERM (the master stops its
    workers), then SIGKILL to whatever of its tree is left; reaps it."""
    family = set(process_tree(proc.pid))
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    for pid in family | set(process_tree(proc.pid)):
        if pid != os.getpid() and alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    stop(proc)


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="lf-inherit-")
    os.chmod(d, 0o755)  # www-data workers read scripts and pages here
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---- systemd socket activation

# Takes the listener from systemd (fd 3), accepts one connection at a time,
# reports the path each accept returned ("accepted <unix|tcp> <client port>"),
# and answers one line per connection.
ACTIVATED = textwrap.dedent("""
    import os, socket
    def path(fd):
        ino = os.readlink(f"/proc/self/fd/{fd}")[8:-1]
        with open("/proc/net/unix") as f:
            return "unix" if any(l.split()[6:7] == [ino] for l in f) else "tcp"
    assert os.environ["LISTEN_FDS"] == "1" and os.environ["LISTEN_PID"] == str(os.getpid())
    l = socket.socket(fileno=3)
    print("server", os.getpid(), "LD_PRELOAD" in os.environ, flush=True)
    while True:
        c, peer = l.accept()
        print("accepted", path(c.fileno()), peer[1], flush=True)
        c.settimeout(%d)
        try:
            c.sendall(b"served " + c.makefile("rb").readline())
        except OSError:
            pass
        c.close()
""" % ANSWER)


class Accepts:
    """The server's "accepted <path> <port>" lines, read as they come."""

    def __init__(self, proc):
        self.lines, self.cv = [], threading.Condition()
        threading.Thread(target=self.read, args=(proc.stdout,), daemon=True).start()

    def read(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line.split())
                self.cv.notify_all()

    def __call__(self, cport, wait=False):
        deadline = time.monotonic() + (SETTLE if wait else 0)
        with self.cv:
            while True:
                for f in self.lines:
                    if f[0] == "accepted" and int(f[2]) == cport:
                        return f[1]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)


@pytest.mark.parametrize("env", ["as-is", "kept"])
def test_systemd_socket_activation(build, env):
    """`loopfast run -- systemd-socket-activate -l 127.0.0.1:P python3
    server.py`, the server taking fd 3; "kept" passes loopfast's variables
    on (-E), as a unit file's Environment= would."""
    need("systemd-socket-activate")
    port = free_port()
    keep = ["-E", "LD_PRELOAD", "-E", "LOOPFAST_ENABLE", "-E", "LOOPFAST_DEBUG"] if env == "kept" else []
    srv = subprocess.Popen(lf_cmd(["systemd-socket-activate", "-l", f"127.0.0.1:{port}", *keep,
                                   sys.executable, "-c", ACTIVATED]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, LOOPFAST_DEBUG="1"))
    try:
        line = readline(srv, stream=srv.stderr)
        assert line.startswith("Listening on"), line
        errors = []
        threading.Thread(target=lambda: errors.extend(srv.stderr), daemon=True).start()
        accepts = Accepts(srv)
        log = Log()
        pids = lambda: process_tree(srv.pid)  # noqa: E731 (systemd-socket-activate execs the server)
        # The first client's connection starts the server.
        modes = ["loopfast", "tcp", "loopfast", "loopfast", "tcp", "loopfast"]
        paths = [held(log, f"one at a time #{i}", mode, LINE_CLIENT, port, pids, server_says=accepts)
                 for i, mode in enumerate(modes)]
        batch(log, "together", ["loopfast", "tcp"] * 4, LINE_CLIENT, port, server_says=accepts)
        log.notes.append("server: " + loopfast_in(srv.pid))
        log.check(lambda a: a.startswith("answer served hello "))
        # The activated server keeps loopfast (its listener came from a
        # process under it): each held loopfast client on the fast path,
        # both ends read from the kernel (ends()), each plain one on TCP.
        assert paths == [{"loopfast": "fast", "tcp": "tcp"}[m] for m in modes], list(zip(modes, paths))
        assert srv.poll() is None, "the server exited"
        print("server's stderr:", "".join(errors)[-3000:])
    finally:
        stop(srv)


# ---- php-fpm reload

FPM_CONF = """[global]
pid = {tmp}/php-fpm.pid
error_log = {tmp}/php-fpm.log
daemonize = no
process_control_timeout = 30s
[www]
user = www-data
group = www-data
listen = 127.0.0.1:{port}
pm = static
pm.max_children = 2
"""

# Answers once the test creates the file "release" (at most 60 s).
SLOW_PHP = """<?php
for ($i = 0; $i < 3000 && !file_exists('{tmp}/release'); $i++) {{ usleep(20000); clearstatcache(); }}
echo "slow ok from ", getmypid(), "\\n";
"""


def php_fpm():
    found = sorted(glob.glob("/usr/sbin/php-fpm*"))
    if not found:
        need("php-fpm")
    return found[-1]


def log_has(path, text, n=1):
    try:
        with open(path) as f:
            return f.read().count(text) >= n
    except FileNotFoundError:
        return False


def test_php_fpm_reload(build, tmp):
    """php-fpm (root master, www-data workers) under `loopfast run`, a
    FastCGI client; `kill -USR2` makes the master stop its workers
    (gracefully: they finish their requests), re-exec itself with the
    listener inherited (FPM_SOCKETS) and fork new workers. Connections made
    while no worker accepts (both busy, then none) wait in the accept queue
    and, on the fast path, their hellos in the rendezvous, across the exec."""
    port = free_port()
    conf, log_file = f"{tmp}/php-fpm.conf", f"{tmp}/php-fpm.log"
    with open(conf, "w") as f:
        f.write(FPM_CONF.format(tmp=tmp, port=port))
    os.makedirs(f"{tmp}/www")
    os.chmod(f"{tmp}/www", 0o755)
    ok, slow = f"{tmp}/www/ok.php", f"{tmp}/www/slow.php"
    with open(ok, "w") as f:
        f.write('<?php echo "ok from ", getmypid(), "\\n";')
    with open(slow, "w") as f:
        f.write(SLOW_PHP.format(tmp=tmp))
    out = open(f"{tmp}/php-fpm.out", "w")
    master = subprocess.Popen(lf_cmd([php_fpm(), "--nodaemonize", "--fpm-config", conf]), stdout=out,
                              stderr=subprocess.STDOUT, env=dict(os.environ, LOOPFAST_DEBUG="1"))
    try:
        wait_for("php-fpm ready", lambda: log_has(log_file, "ready to handle connections") or
                 master.poll() is not None)
        assert master.poll() is None, open(log_file).read()
        pids = lambda: process_tree(master.pid)  # noqa: E731
        wait_for("two php-fpm workers", lambda: len(set(pids()) - {master.pid}) == 2)
        workers = set(pids()) - {master.pid}
        log = Log()
        for i, mode in enumerate(["loopfast", "tcp", "loopfast"]):
            held(log, f"before reload #{i}", mode, FCGI_CLIENT, port, pids, ok)
        # Both workers busy with a request that waits for "release".
        busy = []
        for mode in ("loopfast", "tcp"):
            c = Client(mode, FCGI_CLIENT, port, True, slow).connected()
            path, split = ends(c, pids, port)
            c.go()
            busy.append((c, path, split))
        master.send_signal(signal.SIGUSR2)
        wait_for("php-fpm reloading", lambda: log_has(log_file, "Reloading in progress"))
        # Nobody accepts now: these wait in the queue across the exec.
        queued = [Client(m, FCGI_CLIENT, port, False, ok).connected() for m in ("loopfast", "tcp", "loopfast")]
        open(f"{tmp}/release", "w").close()
        for c, path, split in busy:
            c.finish()
            log.add("busy across USR2", c, path, split)
        for c in queued:
            c.finish()
            log.add("queued across the exec", c, "?")
        wait_for("php-fpm reloaded", lambda: log_has(log_file, "ready to handle connections", 2) and
                 len(set(pids()) - {master.pid} - workers) == 2, timeout=60)
        for i, mode in enumerate(["loopfast", "tcp", "loopfast", "loopfast"]):
            held(log, f"after reload #{i}", mode, FCGI_CLIENT, port, pids, ok)
        log.notes += [f"after reload, php-fpm {loopfast_in(p)}" for p in sorted(pids())]
        assert log_has(log_file, "using inherited socket"), "php-fpm did not re-exec"
        assert master.poll() is None
        log.check(lambda a: a.startswith("answer ok from ") or a.startswith("answer slow ok from "))
        after = [r for r in log.rows if r.startswith("after reload") and " loopfast " in r]
        assert after and all(" ends fast " in r for r in after), "\n".join(log.rows)
    finally:
        terminate(master)
        out.close()


# ---- nginx binary upgrade

NGINX_CONF = """daemon on;
worker_processes 2;
user www-data;
pid {tmp}/nginx.pid;
{env}
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {tmp}/www;
    }}
}}
"""


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def children(pid):
    return {p for p in process_tree(pid) if p != pid and alive(p) and _ppid(p) == pid}


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@pytest.mark.parametrize("env", ["as-is", "kept"])
def test_nginx_binary_upgrade(build, tmp, reaper, env):
    """nginx (daemon: a binary upgrade needs its master's parent gone) under
    `loopfast run`, HTTP clients; USR2 starts a new master with the
    listeners inherited, WINCH stops the old workers, QUIT the old master.
    "kept" passes loopfast's variables to the new binary (`env` directives)."""
    need("nginx")
    port = free_port()
    keep = "env LD_PRELOAD; env LOOPFAST_ENABLE; env LOOPFAST_DEBUG;" if env == "kept" else ""
    conf = f"{tmp}/nginx.conf"
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(tmp=tmp, port=port, env=keep))
    os.makedirs(f"{tmp}/www")
    with open(f"{tmp}/www/page.txt", "w") as f:
        f.write("the page\n")
    os.chmod(f"{tmp}/www", 0o755)
    masters = []
    try:
        # An absolute path: the new binary is exec'd from argv[0].
        p = subprocess.run(lf_cmd([shutil.which("nginx"), "-p", tmp, "-c", conf, "-e", f"{tmp}/error.log"]),
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, LOOPFAST_DEBUG="1"))
        assert p.returncode == 0, p.stdout + p.stderr
        wait_for("nginx pid file", lambda: read_pid(f"{tmp}/nginx.pid"))
        old = read_pid(f"{tmp}/nginx.pid")
        assert _sid(old) == old, "nginx's master is not a session leader: did it daemonize?"
        masters.append(old)
        wait_for("two nginx workers", lambda: len(children(old)) == 2)
        old_workers = children(old)
        pids = lambda: {q for m in masters for q in process_tree(m)}  # noqa: E731
        log = Log()
        for i, mode in enumerate(["loopfast", "tcp", "loopfast"]):
            held(log, f"before upgrade #{i}", mode, HTTP_CLIENT, port, pids)
        bg = Background(log, "throughout the upgrade", HTTP_CLIENT, port).start()
        try:
            os.kill(old, signal.SIGUSR2)
            wait_for("the new master", lambda: read_pid(f"{tmp}/nginx.pid") not in (0, old) and
                     os.path.exists(f"{tmp}/nginx.pid.oldbin"))
            new = read_pid(f"{tmp}/nginx.pid")
            masters.append(new)
            wait_for("the new master's workers", lambda: len(children(new)) == 2)
            for i, mode in enumerate(["loopfast", "tcp", "loopfast", "loopfast"]):
                held(log, f"old and new workers #{i}", mode, HTTP_CLIENT, port, pids)
            os.kill(old, signal.SIGWINCH)
            wait_for("the old workers gone", lambda: not any(alive(w) for w in old_workers))
            for i, mode in enumerate(["loopfast", "tcp", "loopfast"]):
                held(log, f"after WINCH #{i}", mode, HTTP_CLIENT, port, pids)
            os.kill(old, signal.SIGQUIT)
            wait_for("the old master gone", lambda: not alive(old))
        finally:
            n = bg.stop()
        for i, mode in enumerate(["loopfast", "tcp", "loopfast", "loopfast"]):
            held(log, f"after QUIT #{i}", mode, HTTP_CLIENT, port, pids)
        log.notes += [f"after QUIT, nginx {loopfast_in(p)}" for p in sorted(pids()) if alive(p)]
        print(f"{n} requests throughout the upgrade")
        with open(f"{tmp}/error.log") as f:
            assert "using inherited sockets" in f.read(), "the new nginx did not inherit the listener"
        log.check(lambda a: a == "answer HTTP/1.1 200 OK the page")
        after = [r for r in log.rows if r.startswith("after QUIT") and " loopfast " in r]
        assert after and all(" ends fast " in r for r in after), "\n".join(log.rows)
    finally:
        # The daemon is a session of its own (setsid), its leader the first
        # master; the new binary and every worker are in it.
        first = masters[0] if masters else read_pid(f"{tmp}/nginx.pid")
        if first and (masters or _sid(first) == first):
            kill_session(first)


# ---- the exec'd program's environment

EXEC_CLEAN = textwrap.dedent("""
    import os, socket, sys
    if sys.argv[1] in ("listener", "closed"):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        s.set_inheritable(True)  # left open across exec, with its rendezvous
        if sys.argv[1] == "closed":
            s.close()  # ... until it is closed: nothing left to inherit
    how = sys.argv[2]
    argv, env = ["env"], {"ONLY": "this"}
    if how == "execve":
        os.execve("/usr/bin/env", argv, env)
    elif how == "execvpe":
        os.execvpe("env", argv, env)
    else:
        pid = os.posix_spawn("/usr/bin/env", argv, env)
        os._exit(os.waitpid(pid, 0)[1] >> 8)
""")


@pytest.mark.parametrize("how", ["execve", "execvpe", "posix_spawn"])
@pytest.mark.parametrize("held", ["listener", "closed", "nothing"])
def test_exec_keeps_loopfast_only_for_an_inherited_listener(build, held, how):
    """A program under `loopfast run` execs another with a cleaned
    environment. With an opted-in listener left open across the exec, the
    new program gets loopfast back (LD_PRELOAD led by the library,
    LOOPFAST_ENABLE), so that it claims the hellos its rendezvous receives;
    with nothing inherited (no listener, or one closed before the exec), its
    environment is what it was given."""
    out = subprocess.run(lf_cmd([sys.executable, "-c", EXEC_CLEAN, held, how]), capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    env = dict(line.split("=", 1) for line in out.stdout.splitlines())
    if held != "listener":
        assert env == {"ONLY": "this"}, env
    else:
        assert env["ONLY"] == "this", env
        assert env["LD_PRELOAD"].split()[0] == str(build / "libloopfast-preload.so"), env
        assert env["LOOPFAST_ENABLE"] == "1", env
