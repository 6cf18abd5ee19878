"""What the benchmark tests use to check a bench's verdict on its path
against the kernel, never against the bench or loopfast.

`liar(tmp)`: a preload that makes the C API lie: lf_enable_fast_path does
nothing and says yes, lf_fast_path_active always says 1, lf_set_spin says
yes. A bench run under it has every connection on plain TCP while
loopfast's own report says "fast path": a bench that trusted the report
would report fast-path figures for plain TCP.

`unix_pairs(pids)`: the connected Unix stream pairs between two different
processes of pids, from sock_diag (`ss -x -p`: each socket's inode, its
peer's, and the processes that hold it, in one snapshot)."""
import os
import re
import subprocess

LIAR_C = r"""
int lf_enable_fast_path(int fd) { (void)fd; return 0; }
int lf_fast_path_active(int fd) { (void)fd; return 1; }
int lf_set_spin(int fd, unsigned usec) { (void)fd; (void)usec; return 0; }
"""


def liar(tmp):
    src, so = tmp / "liar.c", tmp / "liar.so"
    src.write_text(LIAR_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True, timeout=60)
    return str(so)


def liar_env(so):
    return dict(os.environ, LD_PRELOAD=so)


def ss(*args):
    """[(fields, pids)] of `ss -H -n -p ARGS`: each socket's fields and the
    pids that hold it, from one snapshot (a bench's connections live for
    less than a millisecond: /proc/PID/fd read apart from the socket list
    would miss them)."""
    out = subprocess.run(["ss", "-H", "-n", "-p", *args], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        at = next((i for i, w in enumerate(f) if w.startswith("users:")), len(f))
        rows.append((f[:at], {int(m) for m in re.findall(r"pid=(\d+)", " ".join(f[at:]))}))
    return rows


def unix_pairs(pids):
    """[(inode, peer inode)] of connected Unix streams whose two ends two
    different processes of pids hold, each pair once."""
    pids, socks = set(pids), {}
    for f, held in ss("-x", "state", "connected"):
        if len(f) >= 8 and f[0] == "u_str" and f[-3].isdigit() and f[-1].isdigit():
            socks[int(f[-3])] = (int(f[-1]), held & pids)
    return [(ino, peer) for ino, (peer, held) in socks.items()
            if held and peer in socks and socks[peer][1] and socks[peer][1] != held and ino < peer]


def tcp_inodes(pids):
    """The established TCP sockets pids hold (their local address:port)."""
    return [f[-2] for f, held in ss("-t", "state", "established") if held & set(pids)]


def listening_port(pids):
    """The port of a TCP listener that one of pids holds, or None."""
    for f, held in ss("-t", "-l"):
        if held & set(pids):
            return int(f[-2].rsplit(":", 1)[1])
    return None


def to_port(port):
    """(fast, tcp): how many fast-path connections to 127.0.0.1:port the
    kernel shows now (connected Unix pairs, the client's end bound to
    loopfast's name for that port) and how many established TCP ones, each
    from one snapshot of sock_diag, for connections too short-lived to be
    matched with the processes holding them."""
    out = subprocess.run(["ss", "-H", "-x", "-n", "state", "connected"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    socks = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] == "u_str" and f[-3].isdigit() and f[-1].isdigit():
            socks[int(f[-3])] = (f[-4], int(f[-1]))
    name = re.compile(r"@loopfast/(\d+/)?C/4/127\.0\.0\.1/\d+/127\.0\.0\.1/%d/" % port)
    fast = sum(1 for ino, (n, peer) in socks.items() if name.match(n) and socks.get(peer, ("", 0))[1] == ino)
    tcp = subprocess.run(["ss", "-H", "-t", "-n", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return fast, len(tcp.splitlines())

