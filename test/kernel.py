"""What the kernel says, shared by test/e2e and test/compat (both put
test/ on sys.path): which process holds which socket (/proc/PID/fd), how
two Unix sockets are joined (sock_diag's UNIX_DIAG_PEER, as `ss -x`
prints it) and what a TCP socket's ends are (inet_diag, `ss -t -e`, which
prints each socket's inode); and how each program a test started ended,
with what the kernel log said meanwhile.

"On the fast path" is proved here and only here: a Unix stream that the
client's process tree holds, whose peer the server's process tree holds.
"Plain TCP": a TCP connection whose two ends the two trees hold. Neither
asks loopfast anything."""
import os
import re
import signal
import subprocess
from collections import namedtuple

import pytest

# A run started in the background by a shell without job control (`make
# test &` from a script) inherits SIGINT and SIGQUIT ignored, and an
# ignored signal stays ignored across exec: every program a test starts
# would ignore them (Python would install no KeyboardInterrupt handler),
# and the tests that send them would fail for the run's sake. Both test
# trees import this module first: the dispositions a user's terminal gives
# are restored here.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)

# ---- processes and their sockets


SYSCALL_NAMES = {0: "read", 7: "poll", 42: "connect", 43: "accept", 44: "sendto", 232: "epoll_wait",
                 271: "ppoll", 281: "epoll_pwait", 288: "accept4"}  # x86_64


def blocked_in(pid):
    """The system call the task pid is blocked in, by the kernel's word
    (/proc/PID/syscall: its number, named when known), or None while it
    runs or once it is gone."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            first = f.read().split(maxsplit=1)[0]
    except (OSError, IndexError):
        return None
    if not first.lstrip("-").isdigit() or int(first) < 0:
        return None
    return SYSCALL_NAMES.get(int(first), first)


def process_tree(pid):
    """pid and all its descendants, now (servers fork workers and backends)."""
    children = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p not in tree:
            tree.append(p)
            todo.extend(children.get(p, []))
    return tree


def socket_inodes(pids):
    """{inode: pid} of the sockets that pids hold."""
    held = {}
    for pid in pids:
        d = f"/proc/{pid}/fd"
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for fd in names:
            try:
                t = os.readlink(f"{d}/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                held[int(t[8:-1])] = pid
    return held


def _ss(*args):
    return subprocess.run(["ss", "-H", "-n", *args], capture_output=True, text=True, timeout=30,
                          check=True).stdout.splitlines()


def unix_sockets():
    """{inode: (name, peer inode)} of every connected Unix stream socket."""
    socks = {}
    for line in _ss("-x", "state", "connected"):
        # Netid State Recv-Q Send-Q Local-name Local-inode Peer-name Peer-inode
        # (loopfast's names have no spaces; others' may, and are not needed)
        f = line.split()
        if len(f) < 8 or f[0] != "u_str":
            continue
        try:
            socks[int(f[-3])] = (f[-4], int(f[-1]))
        except ValueError:
            continue
    return socks


def _endpoint(text):
    """("127.0.0.1", 80) from "127.0.0.1:80", "[::1]:80" or "[::ffff:127.0.0.1]:80"."""
    addr, port = text.rsplit(":", 1)
    addr = addr.strip("[]").split("%")[0]
    if addr.startswith("::ffff:") and "." in addr:  # an IPv4-mapped address (a dual-stack socket)
        addr = addr[7:]
    return addr, int(port) if port.isdigit() else 0


def tcp_sockets():
    """{inode: (state, local, remote)} of every TCP socket (inet_diag),
    each endpoint an (address, port), IPv4-mapped addresses as IPv4.
    TIME_WAIT sockets (no inode, and tens of thousands after a benchmark:
    half a second a dump) are left out by the kernel's own filter."""
    out = {}
    for line in _ss("-t", "-a", "-e", "exclude", "time-wait"):
        f = line.split()
        m = re.search(r"\bino:(\d+)", line)
        if len(f) >= 5 and m and m.group(1) != "0":
            out[int(m.group(1))] = (f[0], _endpoint(f[3]), _endpoint(f[4]))
    return out


# ---- the two ends of a connection

Pair = namedtuple("Pair", "client_pid client_ino server_pid server_ino")

# A fast-path client's socket is bound to
# "@loopfast/<v>/C/<fam>/<caddr>/<cport>/<saddr>/<sport>/<nonce>", and its
# peer, the server's end, is accepted on the rendezvous "@loopfast/<v>/L/...".
# The names only narrow which destination a pair is for; the proof is the
# kernel's pairing of the two inodes and which processes hold them.
_CLIENT = re.compile(r"@loopfast/(?:\d+/)?[CT]/[46]/[^/]+/\d+/([^/]+)/(\d+)/")
_SERVER = re.compile(r"@loopfast/(?:\d+/)?L/")


def _complete(dump, inodes, tries=4):
    """dump()'s sockets, merged over dumps until one finds no socket of
    inodes the others missed (at least two, at most `tries`): a sock_diag
    dump is read in chunks, and a socket closed between two chunks shifts
    the ones after it, so that under a flood of short-lived sockets one
    dump can skip a socket that was open all along (seen once in CI: 199
    of 200 held pairs). An inode is not reused while its socket is held,
    so merging dumps adds no false pair."""
    want, socks = set(inodes), dump()
    for _ in range(tries - 1):
        more = dump()
        new = (more.keys() - socks.keys()) & want
        socks.update(more)
        if not new:
            break
    return socks


def unix_pairs(client_pids, server_pids, port=None, addr=None):
    """[Pair] of the fast-path connections whose client end (a loopfast
    client's Unix stream, to port and addr if given) one of client_pids
    holds and whose peer, by sock_diag, one of server_pids holds."""
    clients, servers = socket_inodes(client_pids), socket_inodes(server_pids)
    socks = _complete(unix_sockets, list(clients) + list(servers))
    pairs = []
    for ino, cpid in clients.items():
        name, peer = socks.get(ino, ("", 0))
        m = _CLIENT.match(name)
        if not m or peer not in servers or not _SERVER.match(socks.get(peer, ("", 0))[0]):
            continue
        if (port is None or int(m.group(2)) == port) and (addr is None or m.group(1) == addr):
            pairs.append(Pair(cpid, ino, servers[peer], peer))
    return pairs


def tcp_pairs(client_pids, server_pids, port, addr=None):
    """[Pair] of the established TCP connections to port (and addr, if
    given) whose client end one of client_pids holds and whose server end
    (the socket with the mirrored endpoints) one of server_pids holds."""
    clients, servers = socket_inodes(client_pids), socket_inodes(server_pids)
    socks = _complete(tcp_sockets, list(clients) + list(servers))
    ends = {(s[1], s[2]): ino for ino, s in socks.items() if ino in servers and s[0] == "ESTAB"}
    pairs = []
    for ino, cpid in clients.items():
        st = socks.get(ino)
        if not st or st[0] != "ESTAB" or st[2][1] != port or (addr is not None and st[2][0] != addr):
            continue
        sino = ends.get((st[2], st[1]))
        if sino is not None:
            pairs.append(Pair(cpid, ino, servers[sino], sino))
    return pairs


# ---- how programs ended


class Endings:
    """Every program a test starts (subprocess.Popen, which subprocess.run
    uses too) and every signal the test sends (os.kill, os.killpg, which
    Popen.send_signal/kill/terminate use): a program that died of a signal
    nobody in the test sent it died of loopfast, since over TCP it would
    not have. A test that makes a program die of a signal some other way
    (a script that kills its own parent) says so with expect_signal."""

    def __init__(self):
        self.active = False
        self.procs, self.sent = [], {}

    def start(self):
        self.active, self.procs, self.sent = True, [], {}

    def record(self, pid, sig):
        if self.active:
            self.sent.setdefault(pid, set()).add(int(sig))

    def wrong(self, proc):
        """Why proc's ending is wrong, or None (also None while it runs)."""
        rc = proc.poll()
        if rc is None or rc >= 0 or -rc in self.sent.get(proc.pid, ()):
            return None
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"{proc.args!r} (pid {proc.pid}) died of {name}, which the test did not send it"

    def finish(self):
        self.active = False
        return [w for w in map(self.wrong, self.procs) if w]


ENDINGS = Endings()
_real_init, _real_kill, _real_killpg = subprocess.Popen.__init__, os.kill, os.killpg


def _init(self, *args, **kwargs):
    _real_init(self, *args, **kwargs)
    if ENDINGS.active:
        ENDINGS.procs.append(self)


def _kill(pid, sig):
    ENDINGS.record(pid, sig)
    return _real_kill(pid, sig)


def _killpg(pgid, sig):
    ENDINGS.record(pgid, sig)  # a group started with start_new_session: its leader's pid
    return _real_killpg(pgid, sig)


subprocess.Popen.__init__, os.kill, os.killpg = _init, _kill, _killpg


def expect_signal(proc, sig):
    """proc may die of sig: the test caused it other than by sending it."""
    ENDINGS.record(proc.pid, sig)


def check_ending(proc):
    """Fails the test now if proc died of a signal the test did not send."""
    why = ENDINGS.wrong(proc)
    if why:
        pytest.fail(why)


def each(fn, items):
    """Calls fn(item) for every item, even after one of them raised (a
    test's failure included: pytest.fail raises a BaseException), then
    raises the first failure: for cleanups, which must all run (a process
    not stopped because stopping another failed is left running under
    init)."""
    first = None
    for item in items:
        try:
            fn(item)
        except BaseException as e:
            if first is None:
                first = e
    if first is not None:
        raise first


class KernelLog:
    """The kernel log's records from now on (/dev/kmsg, opened at its end)."""
    FAULT = re.compile(r"segfault|general protection|traps:")

    def __init__(self):
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            if os.geteuid() == 0:
                pytest.fail(f"cannot read the kernel log (/dev/kmsg): {e}")
            self.fd = None  # not root: no kernel-log check
            return
        os.lseek(self.fd, 0, os.SEEK_END)

    def faults(self):
        """The lines about a fault (segfault, general protection, traps)
        logged since this was made."""
        if self.fd is None:
            return []
        out = []
        while True:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten before we read them: go on with the next
                continue
            line = rec.decode(errors="replace").split(";", 1)[-1].split("\n", 1)[0]
            if self.FAULT.search(line):
                out.append(line)
        os.close(self.fd)
        self.fd = None
        return out


def watch():
    """The body of both suites' autouse fixture: each test fails if a
    program it started died of a signal it did not send (Endings), or if
    the kernel logged a fault while it ran (any process: the tests run
    alone on their machine)."""
    log = KernelLog()
    ENDINGS.start()
    yield
    problems = ENDINGS.finish() + [f"the kernel logged: {line}" for line in log.faults()]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
