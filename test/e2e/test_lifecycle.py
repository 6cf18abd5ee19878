"""Servers that start, stop and restart while their clients run, as under a
service manager, compose or a connection pool: a client that starts
before its server and retries until it listens, a pool that reconnects
across a restart (redis-py's, against redis-server), a server that goes
from plain TCP to loopfast on the same port, and a listener whose socket
outlives the process serving it (socket activation: the listener is held
by the test, as systemd holds it, and handed to each new server). Every
connection made once the new listener, or its rendezvous, exists must be
on the fast path; each path is read from the kernel at both ends
(conftest's fast_path_pairs and tcp_pairs), never from loopfast's own
report. Every program started is checked for how it ended."""
import os
import random
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import NOBODY, fast_path_pairs, free_port, lf_cmd, need, process_tree, readline, stop, tcp_pairs

pytestmark = pytest.mark.timeout(300)

# A line server: listens on HOST PORT (or serves the listening socket it
# inherited as fd N: "fd N", or the one it receives over the Unix socket it
# inherited as fd N: "recv N"), says "listening PORT", answers each line with
# it, holds every connection until the peer closes it. SIGTERM ends it (the
# default action: the test checks it died of that signal). "HOST PORT
# wait": once bound, says "bound PORT INODE" and listens on a line of stdin;
# "HOST PORT files=N": opens N files first (as a database opens its tables).
SERVER = textwrap.dedent("""
    import os, resource, socket, sys, threading, time
    for a in sys.argv[3:]:
        if a.startswith("files="):
            n = int(a[6:])
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            files = [os.open("/dev/null", os.O_RDONLY) for _ in range(min(n, hard - 100))]
    if sys.argv[1] == "fd":
        s = socket.socket(fileno=int(sys.argv[2]))
    elif sys.argv[1] == "recv":
        _, fds, _, _ = socket.recv_fds(socket.socket(fileno=int(sys.argv[2])), 1, 1)
        s = socket.socket(fileno=fds[0])
    else:
        host, port = sys.argv[1], int(sys.argv[2])
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        if "wait" in sys.argv[3:]:
            print("bound", s.getsockname()[1], os.fstat(s.fileno()).st_ino, flush=True)
            sys.stdin.readline()
        s.listen(64)
    print("listening", s.getsockname()[1], time.monotonic(), flush=True)
    def serve(c):
        f = c.makefile("rb")
        for line in f:
            c.sendall(line)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
""")

# A client that keeps connections as a pool does. Commands on stdin:
# "open HOST PORT N": N connections, each retried every 20 ms while it is
# refused (it says "refused" once, at the first refusal), then "opened T"
# (T: when the last connect that succeeded began, CLOCK_MONOTONIC); "open
# HOST PORT N watch": the same, but it waits until the kernel lists a
# listener on PORT (a sock_diag dump of the listening TCP sockets: fast
# whatever the number of connections) before each connect; "ping": a line
# over each, answered ("pinged"); "close": closes them all ("closed");
# EOF: exit 0.
CLIENT = textwrap.dedent("""
    import socket, struct, sys, time
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)  # NETLINK_SOCK_DIAG
    def listening(port):
        found = False
        for fam in (socket.AF_INET, socket.AF_INET6):
            req = struct.pack("=BBBBI", fam, socket.IPPROTO_TCP, 0, 0, 1 << 10)  # TCP_LISTEN
            req += bytes(36) + struct.pack("=III", 0, 0xffffffff, 0xffffffff)
            nl.send(struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0) + req)  # SOCK_DIAG_BY_FAMILY, dump
            done = False
            while not done:
                buf, off = nl.recv(65536), 0
                while off + 16 <= len(buf):
                    ln, typ = struct.unpack_from("=IH", buf, off)
                    if typ in (2, 3):  # NLMSG_ERROR, NLMSG_DONE
                        done = True
                        break
                    found = found or struct.unpack_from("!H", buf, off + 20)[0] == port  # read it all
                    off += (ln + 3) & ~3
        return found
    held = []
    for cmd in sys.stdin:
        w = cmd.split()
        if w[0] == "open":
            host, port, n = w[1], int(w[2]), int(w[3])
            said = False
            deadline = time.monotonic() + 60
            for _ in range(n):
                while True:
                    if "watch" in w and not listening(port):
                        if not said:
                            print("refused", flush=True)
                            said = True
                        assert time.monotonic() < deadline, "no listener for a minute"
                        time.sleep(0.001)
                        continue
                    c = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
                    try:
                        began = time.monotonic()
                        c.connect((host, port))
                        break
                    except ConnectionRefusedError:
                        c.close()
                        if not said:
                            print("refused", flush=True)
                            said = True
                        assert time.monotonic() < deadline, "refused for a minute"
                        time.sleep(0.02)
                c.settimeout(10)
                held.append(c)
            print("opened", began, flush=True)
        elif w[0] == "ping":
            for c in held:
                c.sendall(b"ping\\n")
                assert c.recv(5) == b"ping\\n"
            print("pinged", flush=True)
        elif w[0] == "close":
            for c in held:
                c.close()
            held.clear()
            print("closed", flush=True)
""")


def spawn(args, under_loopfast, **kw):
    cmd = lf_cmd(args) if under_loopfast else list(args)
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kw)


def say(proc, cmd, expect):
    proc.stdin.write(cmd + "\n")
    proc.stdin.flush()
    line = readline(proc)
    assert line.split()[0] == expect, f"{cmd!r}: {line!r}"
    return line


def paths(client, server_pid, port, want, timeout=30):
    """(fast, tcp): the client's connections to port whose both ends are
    seen in kernel state, once `want` of them are (bounded: a connection
    not seen at both ends by then fails the test). A connection keeps the
    path it took, so the first sample that shows them all is the answer."""
    deadline = time.monotonic() + timeout
    while True:
        cpids, spids = process_tree(client.pid), process_tree(server_pid)
        fast, tcp = fast_path_pairs(cpids, spids, port), tcp_pairs(cpids, spids, port)
        if len(fast) + len(tcp) >= want:
            return fast, tcp
        if time.monotonic() > deadline:
            pytest.fail(f"{len(fast) + len(tcp)} of {want} connection(s) to port {port} seen at both ends "
                        f"within {timeout} s")
        time.sleep(0.05)


def assert_fast(client, server_pid, port, want, what):
    fast, tcp = paths(client, server_pid, port, want)
    assert len(fast) == want and not tcp, f"{what}: {len(tcp)} of {want} connection(s) on plain TCP: {tcp}"


def assert_tcp(client, server_pid, port, want, what):
    fast, tcp = paths(client, server_pid, port, want)
    assert len(tcp) == want and not fast, f"{what}: {len(fast)} of {want} connection(s) on the fast path: {fast}"


def stopped(proc, sig=signal.SIGTERM, status=None):
    """Sends sig and checks how the program ended: death by sig, or the
    exit status it gives for it."""
    want = -sig if status is None else status
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == want, f"{proc.args!r}: exit status {proc.returncode}, not {want}"


def ended(client):
    """Closes the client's stdin: it must exit 0."""
    client.stdin.close()
    try:
        client.wait(timeout=30)
    finally:
        stop(client)
    assert client.returncode == 0, f"{client.args!r}: exit status {client.returncode}"


def server(host, port, under_loopfast=True, *extra, **kw):
    srv, _, port = server_at(host, port, under_loopfast, *extra, **kw)
    return srv, port


def server_at(host, port, under_loopfast=True, *extra, **kw):
    """A SERVER started with extra: (its Popen, when its listen() returned
    (CLOCK_MONOTONIC), its port)."""
    srv = spawn([sys.executable, "-c", SERVER, host, str(port), *extra], under_loopfast, **kw)
    w = readline(srv).split()
    return srv, float(w[2]), int(w[1])


LISTENERS = [("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "::1")]


def unclaimed_port():
    """A port below the kernel's ephemeral range (32768 and up) that is
    free on every address, v4 and v6: a server started later binds it
    there. free_port's comes from that range, where any connect made
    meanwhile (other tests', loopfast's own) may take it: the server's
    bind of [::] then failed with EADDRINUSE (once, in a make test)."""
    while True:
        port = random.randrange(10000, 32000)
        try:
            for fam, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                with socket.socket(fam) as s:
                    if fam == socket.AF_INET6:
                        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    s.bind((host, port))
            return port
        except OSError:
            continue


def client_first(listen, connect, *extra, watch=False):
    """Five rounds: a client under loopfast starts first and retries its
    connect every 20 ms while it is refused (or, with watch, while the
    kernel lists no listener on the port); its server (under loopfast,
    started with extra) then starts on that port. The first connection that
    succeeds must be on the fast path at both ends.

    A connect that began before the server's listen() returned may have
    been looked up before the listener existed, and gone on as the plain
    TCP connect it then was (the listener appearing between the look-up
    and the SYN): such a round proves nothing either way (its path is
    only checked to be one at both ends) and another is run in its place,
    up to 15 rounds in all."""
    client = spawn([sys.executable, "-c", CLIENT], True)
    try:
        proved = []
        for rnd in range(15):
            if len(proved) == 5:
                break
            port = unclaimed_port()
            client.stdin.write(f"open {connect} {port} 1{' watch' if watch else ''}\n")
            client.stdin.flush()
            assert readline(client).split()[0] == "refused"
            srv, listened, port = server_at(listen, port, True, *extra)
            try:
                w = readline(client).split()
                assert w[0] == "opened", w
                what = f"round {rnd}: the first connection to {listen}:{port}"
                if watch or float(w[1]) >= listened:
                    assert_fast(client, srv.pid, port, 1, what)
                    proved.append(rnd)
                else:
                    paths(client, srv.pid, port, 1)
                say(client, "ping", "pinged")
                say(client, "close", "closed")
            finally:
                stopped(srv)
        assert len(proved) == 5, f"only rounds {proved} of 15 had a connect that began after listen() returned"
        ended(client)
    finally:
        stop(client)


@pytest.mark.parametrize("listen,connect", LISTENERS, ids=["127.0.0.1", "0.0.0.0", "[::]"])
def test_client_started_before_its_server(build, listen, connect):
    """A client that retries until its server listens gets the fast path on
    the first connection that succeeds (before the fix, its refused
    attempts were remembered and it took plain TCP nearly every time)."""
    client_first(listen, connect)


def test_client_started_before_a_server_with_many_files(build):
    """A client that connects as soon as the kernel lists its server's
    listener, against a server that opens 20000 files before it listens
    (a database opening its tables: the more descriptors, the longer
    loopfast takes to set a listener up). Had the rendezvous come after
    the kernel's listen, the client would find the listener without it;
    it comes first: the first connection is fast."""
    client_first("127.0.0.1", "127.0.0.1", "files=20000", watch=True)


def test_server_from_plain_to_loopfast_on_the_same_port(build):
    """A server runs plainly; a client under loopfast holds three
    connections to it: plain TCP at both ends (and the client now knows
    this listener has no rendezvous). The server is stopped and started
    again under loopfast on the same port, at once: the client's next
    three connections are on the fast path at both ends."""
    client = spawn([sys.executable, "-c", CLIENT], True)
    srv, port = server("127.0.0.1", 0, under_loopfast=False)
    try:
        say(client, f"open 127.0.0.1 {port} 3", "opened")
        assert_tcp(client, srv.pid, port, 3, "to the plain server")
        say(client, "ping", "pinged")
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 1", "opened")  # fresh: what it knows is under a second old
        stopped(srv)
        srv, _ = server("127.0.0.1", port)
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 3", "opened")
        assert_fast(client, srv.pid, port, 3, "to the server restarted under loopfast")
        say(client, "ping", "pinged")
        stopped(srv)
        ended(client)
    finally:
        stop(srv, client)


def test_listener_handed_to_a_new_server(build):
    """Socket activation: the listening socket outlives the processes that
    serve it (the test holds it, as systemd does, and hands it to each
    server). A plain server, which inherited it, serves it first; the
    client under loopfast connects, plain TCP at both ends. The plain
    server stops; the client connects while none serves (its connection
    waits in the accept queue, plain TCP); a server under loopfast, already
    running, receives the same listener (same inode: SCM_RIGHTS, so that
    the hand-over happens when the test says) and makes its rendezvous as
    it accepts. The client's next connections are on the fast path at both
    ends, although the listener is the one it met without a rendezvous a
    moment before."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(64)
    port = lst.getsockname()[1]
    hand, took = socket.socketpair()
    client = spawn([sys.executable, "-c", CLIENT], True)
    srv = spawn([sys.executable, "-c", SERVER, "fd", str(lst.fileno())], False, pass_fds=[lst.fileno()])
    nxt = spawn([sys.executable, "-c", SERVER, "recv", str(took.fileno())], True, pass_fds=[took.fileno()])
    try:
        readline(srv)
        say(client, f"open 127.0.0.1 {port} 2", "opened")
        assert_tcp(client, srv.pid, port, 2, "to the plain server")
        say(client, "close", "closed")
        stopped(srv)
        say(client, f"open 127.0.0.1 {port} 1", "opened")  # queued: no server, no rendezvous
        socket.send_fds(hand, [b"l"], [lst.fileno()])
        srv, nxt = nxt, None
        readline(srv)
        assert_tcp(client, srv.pid, port, 1, "queued while no server ran")
        say(client, "ping", "pinged")
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 3", "opened")
        assert_fast(client, srv.pid, port, 3, "once the new server made the listener's rendezvous")
        say(client, "ping", "pinged")
        stopped(srv)
        ended(client)
    finally:
        stop(srv, nxt, client)
        for s in (lst, hand, took):
            s.close()


# Binds and listens on a Unix abstract name (argv[1], as ss prints it),
# says "ready", holds it until its stdin closes.
SQUAT = textwrap.dedent("""
    import socket, sys
    r = socket.socket(socket.AF_UNIX)
    r.bind(b"\\0" + sys.argv[1][1:].encode())
    r.listen(64)
    print("ready", flush=True)
    sys.stdin.read()
""")


def rendezvous_name(port, ino):
    """The abstract name the rendezvous of TCP listener inode ino would
    have, read off the rendezvous of the loopfast listener on port (`ss`:
    its inode, and the Unix listener named after it)."""
    tcp = subprocess.run(["ss", "-H", "-t", "-l", "-n", "-e", f"( sport = :{port} )"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    ref = re.search(r"\bino:(\d+)", tcp).group(1)
    unix = subprocess.run(["ss", "-H", "-x", "-l", "-n"], capture_output=True, text=True, timeout=30,
                          check=True).stdout
    names = [f[4] for f in map(str.split, unix.splitlines()) if len(f) > 4 and f[4].startswith("@loopfast/")
             and "/L/" in f[4] and f[4].endswith("/" + ref)]
    assert names, f"no rendezvous for listener inode {ref} (port {port}):\n{unix}"
    return names[0][:-len(ref)] + str(ino)


def test_server_restarted_after_its_rendezvous_was_taken(build):
    """Another user (nobody) took the rendezvous name of a server's
    listener before it listened: the client under loopfast gets plain TCP
    (both ends) and remembers that listener. The server restarts under
    loopfast on the same port, with a new listening socket and a
    rendezvous of its own: the client's next connections are on the fast
    path at both ends at once (what is remembered is the listener, not the
    port)."""
    need("setpriv")
    ref, ref_port = server("127.0.0.1", 0)
    client = spawn([sys.executable, "-c", CLIENT], True)
    srv = spawn([sys.executable, "-c", SERVER, "127.0.0.1", "0", "wait"], True)
    squat = None
    try:
        _, port, ino = readline(srv).split()
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # nobody's
        squat = subprocess.Popen([*NOBODY, py, "-c", SQUAT, rendezvous_name(ref_port, ino)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert readline(squat).strip() == "ready"
        srv.stdin.write("listen\n")
        srv.stdin.flush()
        assert readline(srv).split()[0] == "listening"
        say(client, f"open 127.0.0.1 {port} 2", "opened")
        assert_tcp(client, srv.pid, int(port), 2, "to the listener whose rendezvous nobody took")
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 1", "opened")  # fresh: what it knows is under a second old
        stopped(srv)
        srv, _ = server("127.0.0.1", port)
        say(client, "close", "closed")
        say(client, f"open 127.0.0.1 {port} 3", "opened")
        assert_fast(client, srv.pid, int(port), 3, "to the server restarted with a rendezvous of its own")
        say(client, "ping", "pinged")
        stopped(srv)
        stopped(ref)
        ended(client)
        squat.stdin.close()
        assert squat.wait(timeout=30) == 0, f"the squatter: exit status {squat.returncode}"
    finally:
        stop(srv, ref, client, squat)


# redis-py's ConnectionPool, as an application uses it: get_connection()
# reconnects a pooled connection whose server has gone. Commands on stdin:
# "take N": N connections from the pool, each answering PING (while the
# server is down, the whole attempt is retried every 20 ms: it says
# "retrying" once), held: "took N T" (T: when the attempt that succeeded
# began, CLOCK_MONOTONIC); "give": back to the pool; EOF: exit 0.
REDIS_CLIENT = textwrap.dedent("""
    import sys, time
    import redis
    pool = redis.ConnectionPool(host="127.0.0.1", port=int(sys.argv[1]))
    held = []
    for cmd in sys.stdin:
        w = cmd.split()
        if w[0] == "take":
            said = False
            pause = 0.02   # doubling, to half a second, as applications back off
            deadline = time.monotonic() + 60
            while True:
                began = time.monotonic()
                try:
                    for _ in range(int(w[1])):
                        c = pool.get_connection("PING")
                        held.append(c)
                        c.send_command("PING")
                        assert c.read_response() in (b"PONG", "PONG", True)
                    break
                except redis.ConnectionError:
                    for c in held:
                        pool.release(c)
                    held.clear()
                    if not said:
                        print("retrying", flush=True)
                        said = True
                    assert time.monotonic() < deadline, "no redis for a minute"
                    time.sleep(pause)
                    pause = min(2 * pause, 0.5)
            print("took", len(held), began, flush=True)
        elif w[0] == "give":
            for c in held:
                pool.release(c)
            held.clear()
            print("gave", flush=True)
""")


def redis_python():
    """A python that has redis-py (Debian's python3-redis is for the system
    python; the tests may run under another)."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import redis"], capture_output=True).returncode == 0:
            return py
    pytest.fail("redis-py is not installed (scripts/deps.sh installs python3-redis)")


def redis_server(port, tmp):
    """redis-server under loopfast, once it says it is ready (it listens
    before): (its Popen, when the test read that, CLOCK_MONOTONIC)."""
    srv = subprocess.Popen(lf_cmd(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", tmp]),
                           stdout=subprocess.PIPE, text=True)
    while "Ready to accept connections" not in readline(srv):
        pass
    return srv, time.monotonic()


def test_redis_pool_across_server_restarts(build, tmp_path):
    """redis-server under loopfast, and a redis-py pool in a client under
    loopfast holding four connections: all on the fast path at both ends.
    redis-server is stopped; the client asks its pool for connections
    while it is down (refused, retried after 20 ms, then twice as long
    each time up to half a second, as applications back off; every 20 ms
    left too few attempts that began after the test saw redis ready on a
    slow host: 1 of 10 restarts, 2026-11-29); redis-server starts again
    on the same port. Every connection
    the pool makes after that is on the fast path at both ends, after each
    of three restarts. (An attempt that began before the test saw the
    server ready may have overlapped its listen(), as client_first says:
    such a restart proves nothing either way, and another is made in its
    place, up to ten in all.)"""
    need("redis-server")
    port = free_port()
    srv, _ = redis_server(port, str(tmp_path))
    client = spawn([redis_python(), "-c", REDIS_CLIENT, str(port)], True)
    try:
        say(client, "take 4", "took")
        assert_fast(client, srv.pid, port, 4, "the pool's first connections")
        say(client, "give", "gave")
        proved = []
        for rnd in range(10):
            if len(proved) == 3:
                break
            stopped(srv, status=0)  # redis-server shuts down cleanly on SIGTERM
            srv = None
            client.stdin.write("take 4\n")
            client.stdin.flush()
            assert readline(client).split()[0] == "retrying"
            srv, ready = redis_server(port, str(tmp_path))
            w = readline(client).split()
            assert w[0] == "took", w
            if float(w[2]) >= ready:
                assert_fast(client, srv.pid, port, 4, f"after restart {rnd + 1}")
                proved.append(rnd)
            else:
                paths(client, srv.pid, port, 4)
            say(client, "give", "gave")
        assert len(proved) == 3, f"only restarts {proved} of 10 had an attempt that began once redis was ready"
        stopped(srv, status=0)
        ended(client)
    finally:
        stop(srv, client)
