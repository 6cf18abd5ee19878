"""SO_REUSEPORT groups: N worker processes (one uid), each with its own
listener on one port, as Caddy, nginx's `listen ... reuseport`, envoy and
many Go servers run. loopfast serves no such group (src/fastpath/listener.c;
docs/reuseport.md says why: the member that gets the SYN need not be the one
the client's hello went to, and then the client waits for ever); these
tests pin what a user sees instead: every connection served with the right
bytes, spread over the workers by the kernel, and on one path at both ends,
plain TCP (read from the kernel: sock_diag's TCP pairs, no Unix pair),
as without loopfast in the same test. Also while workers join and leave the
group during a stream of connects, and with a cBPF program that sends every
SYN to one member: the two cases where a look-up made before the SYN names
another member than the SYN reaches (docs/reuseport.md, "Evidence": with the
group served, clients hung there). Every read has a 5 s timeout, which only
catches a hang."""
import collections
import subprocess
import sys
import textwrap

import pytest

from conftest import fast_path_pairs, free_port, lf_cmd, process_tree, readline, stop, tcp_pairs

pytestmark = pytest.mark.timeout(240)

# A worker: its own SO_REUSEPORT listener on the port; optionally a cBPF
# program ("return 0": every SYN to the group's first member) attached once
# it listens; "churn" joins and leaves the group every 10 ms, serving what
# it took. Each connection: read a line, answer "<worker>:<line>", then hold
# the connection until the client closes it.
WORKER = textwrap.dedent(r"""
    import ctypes, select, socket, struct, sys, threading, time
    port, wid, how = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    def serve(c):
        with c:
            c.settimeout(30)
            line = c.makefile("rb").readline()
            c.sendall(wid.encode() + b":" + line)
            try:
                c.recv(1)
            except OSError:
                pass
    def listener():
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", port))
        s.listen(128)
        return s
    if how == "churn":
        print("ready", flush=True)
        while True:
            s = listener()
            end = time.monotonic() + 0.01
            while time.monotonic() < end:
                if select.select([s], [], [], 0.002)[0]:
                    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
            s.setblocking(False)
            while True:  # what is queued is served before the member leaves
                try:
                    c = s.accept()[0]
                except BlockingIOError:
                    break
                c.setblocking(True)
                threading.Thread(target=serve, args=(c,), daemon=True).start()
            s.close()
    s = listener()
    if how == "bpf":
        ins = (ctypes.c_uint64 * 1)(struct.unpack("<Q", struct.pack("<HBBI", 0x06, 0, 0, 0))[0])  # BPF_RET|BPF_K 0
        s.setsockopt(socket.SOL_SOCKET, 51, struct.pack("<HxxxxxxQ", 1, ctypes.addressof(ins)))  # SO_ATTACH_REUSEPORT_CBPF
    print("ready", flush=True)
    while True:
        threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
""")

# A client: n connections, each a request and its answer checked; "hold"
# keeps them open until stdin closes. Prints the workers that answered and
# the connections that failed.
CLIENT = textwrap.dedent(r"""
    import collections, socket, sys
    port, n, hold = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "hold"
    by, bad, held = collections.Counter(), [], []
    for i in range(n):
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            c.sendall(b"req%d\n" % i)
            data = b""
            while not data.endswith(b"\n"):
                b = c.recv(100)
                if not b:
                    break
                data += b
            w, _, rest = data.partition(b":")
            if rest == b"req%d\n" % i:
                by[w.decode()] += 1
            else:
                bad.append((i, data))
        except OSError as e:
            bad.append((i, repr(e)))
            continue
        (held.append if hold else lambda c: c.close())(c)
    print(repr((dict(by), bad)), flush=True)
    if hold:
        sys.stdin.read()
""")


def start(argv, mode):
    return subprocess.Popen(lf_cmd(argv) if mode == "loopfast" else argv, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def workers(mode, port, hows):
    procs = []
    for i, how in enumerate(hows):
        procs.append(start([sys.executable, "-c", WORKER, str(port), f"w{i}", how], mode))
        assert readline(procs[-1]).strip() == "ready"
    return procs


def result(client, timeout=150, resets=False):
    """The client's connections by worker. resets: a connection reset
    counts as answered (the kernel resets what waits in the accept queue of
    a member that closes its listener, over TCP too); any other failure (a
    timeout: a hang; wrong bytes) fails."""
    by, bad = eval(readline(client, timeout=timeout))
    if resets:
        bad = [b for b in bad if "ConnectionResetError" not in str(b[1])]
    assert bad == [], f"connections not served: {bad[:5]} ({len(bad)} in all)"
    return by


def held_paths(client, procs, port):
    """(plain TCP pairs, fast-path pairs) of client's connections to the
    workers, read from the kernel."""
    cp = process_tree(client.pid)
    wp = sum((process_tree(p.pid) for p in procs), [])
    return len(tcp_pairs(cp, wp, port)), len(fast_path_pairs(cp, wp, port))


@pytest.mark.parametrize("mode", ["tcp", "loopfast"])
def test_workers_each_with_their_own_listener(build, mode):
    """Three workers, 12 connections held open: each served with its own
    bytes, by more than one worker, plain TCP at both ends (the kernel)."""
    port = free_port()
    procs = workers(mode, port, ["plain"] * 3)
    client = start([sys.executable, "-c", CLIENT, str(port), "12", "hold"], mode)
    try:
        by = result(client)
        assert sum(by.values()) == 12 and len(by) >= 2, by
        assert held_paths(client, procs, port) == (12, 0)
    finally:
        stop(client, *procs)


@pytest.mark.parametrize("mode", ["tcp", "loopfast"])
def test_a_group_with_a_cbpf_program(build, mode):
    """A cBPF program sends every SYN to the group's first member, whoever
    a look-up before the SYN names: every connection served, by that one
    member, plain TCP at both ends."""
    port = free_port()
    procs = workers(mode, port, ["bpf"] * 3)
    client = start([sys.executable, "-c", CLIENT, str(port), "12", "hold"], mode)
    try:
        by = result(client)
        assert sum(by.values()) == 12 and len(by) == 1, by
        assert held_paths(client, procs, port) == (12, 0)
    finally:
        stop(client, *procs)


@pytest.mark.parametrize("mode", ["tcp", "loopfast"])
def test_workers_joining_and_leaving_during_connects(build, mode):
    """Two steady workers and one that joins and leaves the group every
    10 ms, three clients making 300 connections each: none hangs, none gets
    wrong bytes, the churning worker served some; a connection queued on
    the leaving worker's listener is reset, as over TCP (1 of 900 in some
    runs, either mode), and the rest are served."""
    port = free_port()
    procs = workers(mode, port, ["plain", "plain", "churn"])
    clients = [start([sys.executable, "-c", CLIENT, str(port), "300", "once"], mode) for _ in range(3)]
    try:
        total = collections.Counter()
        for c in clients:
            total.update(result(c, resets=True))
        assert sum(total.values()) >= 880 and total["w2"] > 0, total
    finally:
        stop(*clients, *procs)
