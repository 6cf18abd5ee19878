"""What the benchmark tests use to check a bench's verdict on its path
against the kernel, never against the bench or loopfast.

`liar(tmp)`: a preload that makes the C API lie: lf_enable_fast_path does
nothing and says yes, lf_fast_path_active always says 1, lf_set_spin says
yes. A bench run under it has every connection on plain TCP while
loopfast's own report says "fast path": a bench that trusted the report
would report fast-path figures for plain TCP.

`unix_pairs(pids)`: the connected Unix stream pairs between two different
processes of pids, from sock_diag (`ss -x`) and /proc/PID/fd."""
import os
import subprocess

from conftest import socket_inodes, unix_sockets

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


def unix_pairs(pids):
    """[(inode, peer inode)] of connected Unix streams whose two ends two
    different processes of pids hold, each pair once."""
    held, socks = socket_inodes(pids), unix_sockets()
    return [(ino, peer) for ino, (_, peer) in socks.items()
            if ino in held and peer in held and held[ino] != held[peer] and ino < peer]


def tcp_inodes(pids):
    """The established TCP sockets pids hold, as inodes (`ss -t -e`)."""
    out = subprocess.run(["ss", "-H", "-t", "-n", "-e", "state", "established"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    held = socket_inodes(pids)
    return [int(w[4:]) for w in out.split() if w.startswith("ino:") and int(w[4:]) in held]
