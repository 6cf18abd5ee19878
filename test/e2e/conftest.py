"""Shared fixtures for the end-to-end tests: where the build is, how to run
a program plainly or under `loopfast run`, how to read a child's output with
a deadline, and how to tell from kernel state that a connection is on the
fast path. The hooks at the end enforce the harness's rules (a timeout for
every test, strict expected failures naming their issue) and, when
LOOPFAST_TEST_REPORT names a file, write every test's outcome there for
scripts/test.sh (the hooks are in test/harness_plugin.py, loaded by
scripts/test.sh with -p)."""
import contextlib
import json
import os
import pathlib
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import threading
import time

import pytest

import kernel

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LOOPFAST_BUILD", ROOT / "build"))
LOOPFAST = BUILD / "loopfast"
PROBE = BUILD / "lfprobe"


def lf_cmd(args, spin=None, tier=None):
    """The command line that runs args under loopfast (tier: "shm" asks for
    the shared-memory tier, docs/shm.md)."""
    extra = ["--spin-us", str(spin)] if spin is not None else []
    extra += ["--tier", tier] if tier else []
    return [str(LOOPFAST), "run", *extra, "--", *args]


@pytest.fixture(scope="session")
def build():
    if not LOOPFAST.exists():
        pytest.fail(f"{LOOPFAST} is missing: run make first")
    return BUILD


@pytest.fixture(params=["tcp", "loopfast"])
def mode(request):
    return request.param


def wrap(mode, args, spin=None, tier=None):
    return lf_cmd(args, spin, tier) if mode == "loopfast" else list(args)


def status_json():
    out = subprocess.run([str(LOOPFAST), "--json", "status"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_status(check, timeout=30):
    """Samples `loopfast --json status` until check(status) holds, and
    returns that status; fails with the last one after timeout seconds.
    Only for what is guaranteed to be there while sampled: a sock_diag
    dump is not atomic, and one that races other sockets' churn can miss
    an entry, so a single sample is not proof of absence."""
    deadline = time.monotonic() + timeout
    while True:
        st = status_json()
        if check(st):
            return st
        if time.monotonic() > deadline:
            pytest.fail(f"loopfast status never showed what was expected within {timeout} s: {st}")
        time.sleep(0.1)


def wait_port(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port



def echo_server(start="now", backlog=16):
    """The source of a Python echo server (`python3 -c SOURCE [ARGS]`) that
    echoes each connection in a thread of its own until its peer ends it,
    then closes it. start "now": listens with backlog on port 0 of ARGS'
    one address (127.0.0.1 when absent or "4"; an IPv6 address such as ::1
    makes an AF_INET6 listener), prints the port and accepts at once; "go":
    the same, but accepts nothing until a line "go" on stdin, and closes
    its listener on a line "close"; "fds": listens on nothing of its own,
    accepts on every inherited listener whose fd number is in ARGS, and
    prints "serving"."""
    listen = f"""
        host = sys.argv[1] if sys.argv[1:] and sys.argv[1] != "4" else "127.0.0.1"
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.bind((host, 0)); s.listen({backlog})
        print(s.getsockname()[1], flush=True)
        """
    tail = {"now": listen + "loop(s)\n",
            "go": listen + """
        for line in sys.stdin:
            if line.strip() == "go":
                threading.Thread(target=loop, args=(s,), daemon=True).start()
            elif line.strip() == "close":
                s.close()
        """,
            "fds": """
        for fd in sys.argv[1:]:
            threading.Thread(target=loop, args=(socket.socket(fileno=int(fd)),), daemon=True).start()
        print("serving", flush=True)
        threading.Event().wait()
        """}[start]
    return textwrap.dedent("""
        import socket, sys, threading
        def serve(c):
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
            c.close()
        def loop(s):
            while True:
                c, _ = s.accept()
                threading.Thread(target=serve, args=(c,), daemon=True).start()
        """) + textwrap.dedent(tail)


def need(binary):
    if not shutil.which(binary):
        pytest.fail(f"{binary} is not installed (scripts/deps.sh installs it)")


def go_binary():
    """Debian's go (golang-go), or fail: the tests that build Go programs need it."""
    for g in (shutil.which("go"), "/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
        if g and os.access(g, os.X_OK):
            return g
    pytest.fail("go is not installed (scripts/deps.sh installs golang-go)")


def readline(proc, timeout=30, stream=None):
    """The next line of proc's stdout (or of stream), waiting at most
    timeout seconds; on timeout or EOF the process is killed and the test
    fails, so a silent child cannot stall the run."""
    stream = stream or proc.stdout
    box = queue.Queue()
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    try:
        line = box.get(timeout=timeout)
    except queue.Empty:
        line = None
    if not line:
        proc.kill()
        proc.wait(timeout=30)
        why = f"nothing within {timeout} s" if line is None else f"EOF (exit status {proc.returncode})"
        pytest.fail(f"{proc.args!r}: expected a line, got {why}")
    return line


def stop(*procs, timeout=30):
    """Kills each proc given (None is passed over), if still running, and
    what it started (a supervised program is `loopfast run`'s child, and a
    SIGKILL cannot be passed on: it would outlive the test, its trapped
    calls failing with ENOSYS), and reaps it, with a deadline; fails the
    test if one had died of a signal the test did not send it. Every proc
    is stopped and reaped even when stopping an earlier one fails the test
    (kernel.each: the first failure is raised after), so that a test's
    `finally: stop(srv, cli)` leaves nothing running under init."""
    kernel.each(lambda p: _stop(p, timeout), [p for p in procs if p is not None])


def _stop(proc, timeout):
    if proc.poll() is None:
        rest = kernel.process_tree(proc.pid)[1:]
        proc.kill()
        for pid in rest:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait(timeout=timeout)
    check_ending(proc)


@pytest.fixture(autouse=True)
def endings():
    """Every test: each program it started ended as over TCP (no death by
    a signal the test did not send), and the kernel logged no fault
    (segfault, general protection, traps) while it ran (test/kernel.py)."""
    yield from kernel.watch()


def io_uring_unavailable():
    """None where io_uring works; else why not, identified precisely: absent
    (io_uring_setup says ENOSYS) or disabled (EPERM, from the sysctl
    kernel.io_uring_disabled or a seccomp filter). Any other error, or an
    EPERM with neither cause, fails the test: it is not a missing feature."""
    import ctypes
    import errno
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    fd = libc.syscall(425, 2, params)  # io_uring_setup: 425 on every architecture
    if fd >= 0:
        os.close(fd)
        return None
    e = ctypes.get_errno()
    if e == errno.ENOSYS:
        return "io_uring absent (ENOSYS)"
    if e == errno.EPERM:
        try:
            with open("/proc/sys/kernel/io_uring_disabled") as f:
                v = f.read().strip()
        except FileNotFoundError:  # kernels before 6.6
            v = "0"
        if v != "0":
            return f"io_uring disabled (EPERM): kernel.io_uring_disabled={v}"
        with open("/proc/self/status") as f:
            if any(l.split() == ["Seccomp:", "2"] for l in f):
                return "io_uring disabled (EPERM): a seccomp filter"
    pytest.fail(f"io_uring_setup failed with {errno.errorcode.get(e, e)}, and that is not a missing kernel feature")


def need_io_uring():
    """Skips the test where io_uring is absent or disabled (see
    io_uring_unavailable; test/skips.allow lists exactly these reasons)."""
    why = io_uring_unavailable()
    if why:
        pytest.skip(why)


# Fast path and plain TCP, from kernel state: test/kernel.py (shared with
# test/compat). The names here are the ones the tests import.
unix_sockets, socket_inodes, process_tree = kernel.unix_sockets, kernel.socket_inodes, kernel.process_tree
expect_signal, check_ending = kernel.expect_signal, kernel.check_ending


def fast_path_pairs(client_pids, server_pids, port):
    """The fast-path connections to port whose client end one of
    client_pids holds and whose server end one of server_pids holds, as
    [(client inode, server inode)], read from the kernel."""
    return [(p.client_ino, p.server_ino) for p in kernel.unix_pairs(client_pids, server_pids, port)]


def wait_fast_path(client, server_pid, port, want=1, timeout=30):
    """Waits until `want` fast-path connections from the client process
    (a Popen, which must hold them until told otherwise) to the server's
    process tree show in kernel state; fails if the client exits first or
    the deadline passes. Returns the pairs."""
    deadline = time.monotonic() + timeout
    pairs = []
    while time.monotonic() < deadline:
        pairs = fast_path_pairs(process_tree(client.pid), process_tree(server_pid), port)
        if len(pairs) >= want:
            return pairs
        if client.poll() is not None:
            pytest.fail(f"{client.args!r} exited ({client.returncode}) before {want} fast-path connection(s) to "
                        f"port {port} were seen (saw {len(pairs)})")
        time.sleep(0.05)
    pytest.fail(f"{client.args!r}: {len(pairs)} of {want} connection(s) to port {port} on the fast path "
                f"within {timeout} s (both ends checked in sock_diag and /proc/PID/fd)")


def tcp_connections(client_pids, port):
    """The TCP connections to port that client_pids hold, as inodes (from
    sock_diag via `ss -e`, which prints each socket's inode)."""
    out = subprocess.run(["ss", "-H", "-t", "-n", "-e", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    held = socket_inodes(client_pids)
    inodes = [int(m.group(1)) for m in re.finditer(r"\bino:(\d+)", out)]
    return [i for i in inodes if i in held]


def wait_path(client, server_pid, port, mode, want=1, timeout=30):
    """wait_fast_path for mode "loopfast"; for "tcp", wait_tcp: `want`
    TCP connections to port, both ends held by the client and the server's
    tree, none on the fast path (the control for the same test run under
    loopfast)."""
    if mode == "loopfast":
        return wait_fast_path(client, server_pid, port, want, timeout)
    wait_tcp(client, server_pid, port, want, timeout)
    return []


def wait_paths(client_pid, server_pid, port, fast, plain, timeout=20):
    """Waits until exactly `fast` fast-path and `plain` plain TCP
    connections to port show in the kernel, their client ends held by
    client_pid's process tree and their server ends by server_pid's (one
    pid for a process connected to itself); fails at the deadline saying
    what it saw."""
    deadline = time.monotonic() + timeout
    while True:
        cp, sp = process_tree(client_pid), process_tree(server_pid)
        f, t = kernel.unix_pairs(cp, sp, port), kernel.tcp_pairs(cp, sp, port)
        if (len(f), len(t)) == (fast, plain) or time.monotonic() > deadline:
            assert (len(f), len(t)) == (fast, plain), f"port {port}: fast {f}, plain TCP {t}"
            return
        time.sleep(0.05)



def answers_plain_and_under(argv, loopfast_cmd, pairs):
    """argv run plain (the control) and under loopfast_cmd (`loopfast run
    ... --`): each run's first line, `PORT ANSWER...`, as {"tcp": [...],
    "lf": [...]} of answers; under loopfast the kernel must show `pairs`
    Unix pairs for PORT inside the program's process tree (both ends on
    the fast path)."""
    answers = {}
    for mode in ("tcp", "lf"):
        p = subprocess.Popen((loopfast_cmd if mode == "lf" else []) + list(argv), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        try:
            port, *answers[mode] = readline(p, 60).split()
            if mode == "lf":
                tree = kernel.process_tree(p.pid)
                assert len(kernel.unix_pairs(tree, tree, int(port))) == pairs, "not on the fast path at both ends"
        finally:
            stop(p)
    return answers

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.fixture(scope="session")
def shared_build(build):
    """A copy of the command and its libraries (loopfast, libloopfast.so.0,
    libloopfast-rio.so.0, libloopfast-preload.so) in a fresh directory of
    mode 0755, for programs a test runs as another user: the build may be
    in a directory only root can enter (a clone in root's home, mode 0700).
    The command finds its libraries through RUNPATH's $ORIGIN and the
    preload library next to itself, so the copy needs nothing of the build;
    the fixture checks that it runs as nobody, and removes it at the end of
    the session."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="lf-shared-build-"))
    try:
        d.chmod(0o755)
        for name in ("loopfast", "libloopfast.so.0", "libloopfast-rio.so.0", "libloopfast-preload.so"):
            shutil.copyfile(build / name, d / name)  # follows libloopfast.so.0's symlink
            (d / name).chmod(0o755)
        p = subprocess.run([*NOBODY, str(d / "loopfast"), "run", "--", "true"], capture_output=True, text=True,
                           timeout=30)
        if p.returncode != 0 or p.stderr:
            pytest.fail(f"the copy of the build in {d} does not run as nobody (is {tempfile.gettempdir()} "
                        f"reachable by every user?): status {p.returncode}: {p.stderr.strip()}")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def tcp_pairs(client_pids, server_pids, port):
    """[(client inode, server inode)] of the plain TCP connections to port
    held by client_pids and server_pids (kernel.tcp_pairs)."""
    return [(p.client_ino, p.server_ino) for p in kernel.tcp_pairs(client_pids, server_pids, port)]


def wait_tcp(client, server_pid, port, want=1, timeout=30, fast=0):
    """Waits until `want` plain TCP connections from the client process (a
    Popen holding them) to the server's process tree show in kernel state,
    both ends (tcp_pairs), and checks that exactly `fast` of its
    connections to port are on the fast path (none unless told); fails if
    the client exits first or the deadline passes. Returns the pairs."""
    deadline = time.monotonic() + timeout
    while True:
        cpids, spids = process_tree(client.pid), process_tree(server_pid)
        pairs = tcp_pairs(cpids, spids, port)
        pairs_fast = fast_path_pairs(cpids, spids, port)
        # A connection keeps its path: one more on the fast path than
        # expected is the answer already.
        assert len(pairs_fast) <= fast, f"to port {port}: {len(pairs_fast)} on the fast path, not {fast}: {pairs_fast}"
        if len(pairs) >= want:
            break
        if client.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{client.args!r}: {len(pairs)} of {want} plain TCP connection(s) to port {port} seen at "
                        f"both ends within {timeout} s")
        time.sleep(0.05)
    pairs_fast = fast_path_pairs(process_tree(client.pid), process_tree(server_pid), port)
    assert len(pairs_fast) == fast, f"to port {port}: {len(pairs_fast)} on the fast path, not {fast}: {pairs_fast}"
    return pairs


CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def new_netns(*setup):
    """This thread (its tests, and every process it starts) in a new
    network namespace, lo up, then each command of setup run there; the
    thread's namespace is restored after. Its own TIME_WAIT table and
    port range (both per namespace), which other tests and runs on the
    machine do not fill."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(CLONE_NEWNET):
            pytest.fail(f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}")
        try:
            for cmd in (["ip", "link", "set", "lo", "up"], *setup):
                subprocess.run(cmd, check=True, timeout=30)
            yield
        finally:
            if libc.setns(back, CLONE_NEWNET):
                pytest.fail(f"setns back: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(back)
