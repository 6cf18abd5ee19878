"""Opt one socket in to loopfast's TCP loopback fast path.

loopfast (a C library preloaded by ``loopfast run``) answers a private socket
option, ``SOL_LOOPFAST``; the kernel answers it with ENOPROTOOPT. So this
package is pure Python: each call is one ``setsockopt``/``getsockopt`` on the
socket, and without loopfast loaded it raises an ``OSError`` saying so, after
which the program carries on over TCP.

Run the program under ``loopfast run --per-socket -- python3 prog.py`` so that
only the sockets it opts in take the fast path (plain ``loopfast run`` opts in
every TCP socket). A client opts in before ``connect``; a server opts in its
listening socket, and the sockets it accepts inherit it.
"""
from __future__ import annotations

import errno
import os
import socket as _socket
from typing import Protocol

__all__ = ["loaded", "SOL_LOOPFAST", "FAST_PATH", "SPIN", "enable_fast_path", "disable_fast_path", "fast_path_active",
           "set_spin", "get_spin"]

SOL_LOOPFAST = 0x4C46
"""The option level (include/loopfast.h)."""
FAST_PATH = 1
"""Set 1: opt in; set 0: opt out; get: whether the socket is (or will be) on the fast path."""
SPIN = 2
"""The busy-poll budget in microseconds (0 = off)."""


class _Sock(Protocol):
    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...
    def getsockopt(self, level: int, option: int, /) -> int: ...


_WHY = {
    errno.ENOPROTOOPT: "loopfast is not loaded in this process (run it under `loopfast run --per-socket`)",
    errno.EOPNOTSUPP: "not a TCP socket over IPv4 or IPv6, or loopfast cannot serve it",
    errno.EISCONN: "already connected (a client opts in before connect)",
    errno.EBADF: "not an open descriptor",
    errno.ENOTSOCK: "not a socket",
    errno.EINVAL: "value out of range",
}


def loaded() -> bool:
    """Whether loopfast answers SOL_LOOPFAST in this process (asked of a new TCP socket)."""
    with _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM) as s:
        try:
            s.getsockopt(SOL_LOOPFAST, FAST_PATH)
            return True
        except OSError:
            return False


def _call(what: str, fn, *args):
    try:
        return fn(SOL_LOOPFAST, *args)
    except OSError as e:
        # Without loopfast the kernel refuses the level: ENOPROTOOPT, but
        # EOPNOTSUPP for an IPv4 getsockopt, which loopfast also answers
        # for a socket that is not TCP; a new TCP socket tells them apart.
        code = e.errno or 0
        if code in (errno.ENOPROTOOPT, errno.EOPNOTSUPP) and not loaded():
            code = errno.ENOPROTOOPT
        raise OSError(code, f"loopfast: {what}: {_WHY.get(code, os.strerror(code))}") from None


def enable_fast_path(sock: _Sock) -> None:
    """Opts sock in: a client socket before connect, or a listening socket.

    Raises OSError (ENOPROTOOPT: loopfast not loaded; EOPNOTSUPP: not TCP,
    or an option the fast path cannot keep, such as SO_ZEROCOPY, was set on
    it; EISCONN: already connected). A connection that cannot take the fast path
    (a remote peer, a peer that did not opt in) is plain TCP, with no error."""
    _call("enable_fast_path", sock.setsockopt, FAST_PATH, 1)


def disable_fast_path(sock: _Sock) -> None:
    """Keeps sock on plain TCP, also under whole-process ``loopfast run``.

    Before connect or listen only; raises OSError (EISCONN) after."""
    _call("disable_fast_path", sock.setsockopt, FAST_PATH, 0)


def fast_path_active(sock: _Sock) -> bool:
    """A connected socket: whether it is on the fast path (False: plain TCP).
    A listening socket: whether it serves the fast path. Any other: whether
    it is opted in. Raises OSError when loopfast is not loaded."""
    return bool(_call("fast_path_active", sock.getsockopt, FAST_PATH))


def set_spin(sock: _Sock, usec: int) -> None:
    """Sets sock's busy-poll budget: a blocking read spins up to usec
    microseconds (0 to 1000000; 0 = off) before it sleeps."""
    if not 0 <= usec <= 1000000:
        raise ValueError(f"loopfast: set_spin: usec must be 0..1000000, not {usec}")
    _call("set_spin", sock.setsockopt, SPIN, usec)


def get_spin(sock: _Sock) -> int:
    """The busy-poll budget of sock in microseconds."""
    return int(_call("get_spin", sock.getsockopt, SPIN))
