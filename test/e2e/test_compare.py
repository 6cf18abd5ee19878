"""Every socket behaviour the fast path touches, run by the same unmodified
program over plain TCP and under `loopfast run`: the observable transcript
must be identical, and under loopfast the connections must really be Unix
streams. Lines that start with "#" are notes, not compared: "#path WHO PATH
INODE peer INODE" lines name each connection's path as the kernel shows it
(the probe proves "unix" with sock_diag: a connected Unix stream whose peer
a process of the probe's own process group holds; "tcp": a connected TCP
socket whose reversed 4-tuple is a TCP socket too), and where a scenario
prints both ends of one connection the two must be each other's peers;
others carry counts that depend on timing.

The core scenarios run again with listeners on 0.0.0.0, [::] (dual-stack,
with IPv4 and IPv6 clients, and IPV6_V6ONLY) and 127.0.0.2, as servers
really listen.

Where the fast path answers differently from TCP by design, the difference
is written down here, in README's "Where it differs from TCP" and in
docs/sockopts.md, and the fast path's line must be exactly the documented
one; every other line must equal TCP's, from a TCP run of the same probe."""
import os
import re
import subprocess

import pytest

from conftest import PROBE, ROOT, readline, stop, wrap

# Each run of the probe takes seconds; a hang fails within a minute.
pytestmark = pytest.mark.timeout(150)


def scenarios():
    p = subprocess.run([str(PROBE)], capture_output=True, text=True, timeout=30)
    names = p.stdout.split()
    if p.returncode != 0 or not names:
        raise RuntimeError(f"{PROBE} listed no scenarios (exit status {p.returncode}): {p.stderr}")
    return names


SCENARIOS = scenarios()

# Scenarios that do not depend on the address family given on the command
# line, so they run once:
#   dualstack: it fixes both families itself (an IPv4 client and a dual-stack
#              [::] listener, v4-mapped addresses); the argument is unused.
# Every other scenario makes its connections with the family it is given
# (listener(), connect_to()), and negotiation, the rendezvous name, names,
# options and SO_DOMAIN all differ between IPv4 and IPv6: they run on both.
FAMILY_AGNOSTIC = {"dualstack"}

# Where the fast path deliberately does not apply (documented in README):
# a scenario's connections, or per "#path WHO" line of the probe.
EXPECTED_LOOPFAST_PATH = {
    "reuseport": "tcp",
    "sockopt-pin": {"md5-client": "tcp", "md5-server": "tcp", "ts-client": "tcp", "ts-server": "tcp",
                    "tfo-client": "tcp", "tfo-server": "tcp"},
}

# The documented differences: (pattern of TCP's line, the fast path's line
# as a pattern, with \1... from TCP's). Each must occur in every run of its
# scenario, so that no entry outlives what it documents.
WHO = r"(client|server)"
DOCUMENTED = {
    "sockopt-table": [
        # Receive timestamps and zero-copy sends: a Unix stream has neither,
        # so enabling them fails (a program's own fallback), off is TCP's 0.
        (WHO + r" SOL_SOCKET (SO_TIMESTAMP\w*|SO_ZEROCOPY) set: 0", r"\1 SOL_SOCKET \2 set: -1 EOPNOTSUPP"),
        (WHO + r" SOL_SOCKET (SO_TIMESTAMP\w*|SO_ZEROCOPY) get after set: 0 len (\d+) = .*",
         r"\1 SOL_SOCKET \2 get after set: 0 len \3 = 0+"),
        # TCP's last receive CPU; a Unix socket has none: -1, "not known".
        (WHO + r" SOL_SOCKET SO_INCOMING_CPU get: 0 len 4 = \d+", r"\1 SOL_SOCKET SO_INCOMING_CPU get: 0 len 4 = -1"),
        # Signatures on segments that do not exist: as a kernel without
        # CONFIG_TCP_MD5SIG.
        (WHO + r" IPPROTO_TCP (TCP_MD5SIG\w*) set: .*", r"\1 IPPROTO_TCP \2 set: -1 ENOPROTOOPT"),
        # Repair mode (checkpoint/restore of TCP state): as without
        # CAP_NET_ADMIN. TCP (run as root here) says yes.
        (WHO + r" IPPROTO_TCP TCP_REPAIR set: .*", r"\1 IPPROTO_TCP TCP_REPAIR set: -1 EPERM"),
        (WHO + r" IPPROTO_TCP TCP_REPAIR get after set: .*", r"\1 IPPROTO_TCP TCP_REPAIR get after set: 0 len 4 = 0"),
        # Kernel TLS: as a kernel without the tls module (this one, too).
        (WHO + r" IPPROTO_TCP TCP_ULP set: .*", r"\1 IPPROTO_TCP TCP_ULP set: -1 ENOENT"),
        # The congestion control's state: TCP's size, nothing known.
        (WHO + r" IPPROTO_TCP TCP_CC_INFO (get|get after set): 0 len (\d+) all zero \d",
         r"\1 IPPROTO_TCP TCP_CC_INFO \2: 0 len \3 all zero 1"),
        # Zero-copy receive maps TCP's receive queue; a Unix socket cannot be
        # mapped.
        (WHO + r" IPPROTO_TCP TCP_ZEROCOPY_RECEIVE (get|get after set): .*",
         r"\1 IPPROTO_TCP TCP_ZEROCOPY_RECEIVE \2: -1 EOPNOTSUPP"),
        # TCP_INQ's cmsg on every read would need the data path intercepted.
        (WHO + r" IPPROTO_TCP TCP_INQ set: 0", r"\1 IPPROTO_TCP TCP_INQ set: -1 EOPNOTSUPP"),
        (WHO + r" IPPROTO_TCP TCP_INQ get after set: 0 len 4 = 1", r"\1 IPPROTO_TCP TCP_INQ get after set: 0 len 4 = 0"),
    ],
    # TCP_INFO: the connection's own counters are not seen (the data path is
    # not intercepted): zero.
    "tcp-info": [
        (WHO + r" counters after 5 bytes up, 3 down: bytes_acked \d+ bytes_received \d+",
         r"\1 counters after 5 bytes up, 3 down: bytes_acked 0 bytes_received 0"),
    ],
    # A second urgent byte sent before the first was read: TCP moves the mark
    # and the first byte is lost to a normal read; a Unix socket keeps it in
    # the stream (the kernel's own msg_oob selftest lists this).
    "oob": [("two marks: recv: -1 EAGAIN", "two marks: recv: 1 x")],
    # A write after the peer's close: TCP's first write succeeds and only
    # the peer's reset brings POLLERR|POLLHUP and EPIPE; a Unix socket
    # knows at once (loopfast(7), "A write after the peer's close").
    "peer-closed": [("after the peer's close: poll IN OUT RDHUP", "after the peer's close: poll IN OUT RDHUP HUP"),
                    ("first write 1 0", "first write -1 EPIPE"),
                    ("after it: poll IN OUT RDHUP ERR HUP", "after it: poll IN OUT RDHUP HUP")],
    # After SHUT_RD, TCP is always readable; poll and select on the fast path
    # are told so by loopfast, epoll is the kernel's and sees the Unix
    # socket, which is readable only when bytes are queued.
    "shut-rd": [("epoll with nothing queued: 1", "epoll with nothing queued: 0"),
                ("epoll once bytes came: 1", "epoll once bytes came: 0")],
    # A value loopfast records (an option the Unix socket cannot hold) is
    # kept per descriptor in the process: a dup or a forked child keeps the
    # value of the moment it was made; TCP's option belongs to the socket.
    "sockopt-shared": [("a set through the dup, read through the first fd: 44",
                        "a set through the dup, read through the first fd: 33"),
                       ("a child reads what was set before fork: 44", "a child reads what was set before fork: 33"),
                       ("a set in the child, read by the parent: 55", "a set in the child, read by the parent: 33")],
    # SO_RCVLOWAT: reads honour it on both; readiness is the Unix socket's,
    # which does not look at the mark.
    "rcvlowat": [(r"(poll|select|epoll) below the mark: 0", r"\1 below the mark: 1")],
}

# Lines plain TCP's transcript must hold, for scenarios whose point would
# be lost silently if the machine did not behave as they assume (the
# connect scenarios fill an accept queue so that the handshake waits).
MUST_SHOW = {
    "connect-eintr": ["blocking connect to a full queue, SIGALRM after 100 ms: -1 EINTR",
                      "connect again, still full, SIGALRM after 100 ms: -1 EINTR", "connect again: -1 EISCONN"],
    "connect-eintr-reconnect": ["SIGALRM after 100 ms: -1 EINTR", "while the server makes room: 0 0",
                                "connect again: -1 EISCONN"],
    "connect-full-poll": ["full queue: -1 EINPROGRESS", "watchdog: 1", "poll(0) while full: 0",
                          "again while full: -1 EALREADY", "poll: 1 POLLOUT 1 POLLERR 0"],
    "connect-full-epoll": ["full queue: -1 EINPROGRESS", "watchdog: 1", "epoll_wait(0) while full: 0",
                           "epoll_wait: 1 EPOLLOUT 1 EPOLLERR 0 data 42", "closed: 1 EPOLLIN 1 data 42"],
    "connect-full-select": ["full queue: -1 EINPROGRESS", "watchdog: 1", "select(0) while full: 0",
                            "select: 1 writable 1 except 0"],
    "connect-sndtimeo": ["SO_SNDTIMEO 200 ms to a full queue: -1 EINPROGRESS", "watchdog: 1",
                         "connect again, still full: -1 EALREADY"],
    "connect-restart": ["SA_RESTART SIGALRM after 100 ms: 0 0", "alarm handler ran: 1", "connect again: -1 EISCONN"],
    "connect-again": ["full queue: -1 EINPROGRESS", "connect again: -1 EALREADY", "and again: -1 EALREADY",
                      "other than EALREADY: 0 0", "connect again: -1 EISCONN"],
}


class FastPathDiffers(AssertionError):
    """The fast-path run's transcript differs from plain TCP's (the only
    failure an expected-failure mark below may stand for)."""


class ProbeFailed(AssertionError):
    """The probe stopped on an answer it does not accept (exit status 1: a
    check failed), rather than printing a transcript."""


class ProbeHung(AssertionError):
    """The probe's watchdog ended it: a call was still blocked (exit 3)."""


# Known faults: the fast-path transcript differs from TCP's until they are
# fixed; each entry a strict xfail (FastPathDiffers), which fails the run
# the day it passes. (A worker killed between accept and claim used to
# leave its client hanging: the bell, src/fastpath/bell.c, fixed it.)
KNOWN = {}


def run(mode, scenario, family, spin=None, listen="lo", tier=None, probe=PROBE):
    """The probe's transcript (lines not starting with "#"), its "#path"
    lines as (who, path, inode, peer inode) (the inodes None where the
    probe gives none) and its whole output. Each run has a process group
    of its own: the probe's proof of "unix" looks for the peer there.
    probe: the lfprobe binary (test_supervisor_compare.py runs one linked
    -static)."""
    env = dict(os.environ, LFPROBE_BULK_MB=os.environ.get("LFPROBE_BULK_MB", "1024"), LFPROBE_LISTEN=listen)
    p = subprocess.run(wrap(mode, [str(probe), scenario, family], spin, tier), capture_output=True, text=True,
                       timeout=60, env=env, process_group=0)
    if p.returncode != 0:
        raise (ProbeHung if p.returncode == 3 else ProbeFailed)(
            f"{mode} {scenario}: rc {p.returncode}\n{p.stdout}\n{p.stderr}")
    lines = p.stdout.splitlines()
    paths = []
    for f in (l.split() for l in lines if l.startswith("#path ")):
        inodes = (int(f[3]), int(f[5])) if len(f) == 6 and f[4] == "peer" else (None, None)
        paths.append((f[1], f[2], *inodes))
    return [l for l in lines if not l.startswith("#")], paths, p.stdout


def check_pairs(paths, out):
    """A client end printed just before its server end ("client" then
    "server", or "X-client" then "X-server") is that end's peer and the
    other way round, by the kernel's inodes."""
    for (cw, _, cino, cpeer), (sw, _, sino, speer) in zip(paths, paths[1:]):
        if cw.endswith("client") and sw == cw[:-6] + "server" and cino is not None:
            assert (cpeer, speer) == (sino, cino), f"{cw} and {sw} are not each other's peers\n{out}"


# Each scenario's IPv6 run is make test-extra's, so that make test stays
# within its ten minutes; the IPv4 runs stay in make test, and so do the
# IPv6 listeners of test_listener_kinds.
def cases(known=KNOWN):
    for sc in SCENARIOS:
        yield pytest.param(sc, "4", id=f"{sc}-v4", marks=known.get((sc, "4"), ()))
        if sc not in FAMILY_AGNOSTIC:
            marks = [known[sc, "6"]] if (sc, "6") in known else []
            yield pytest.param(sc, "6", id=f"{sc}-v6", marks=marks + [pytest.mark.extra])


def compare(scenario, tcp, lf, lf_out, documented=DOCUMENTED):
    """Every line as TCP's, except the documented ones, which must be as
    documented; returns the documented entries that occurred."""
    def differs(why):
        raise FastPathDiffers(f"{why}\n--- tcp\n{chr(10).join(tcp)}\n--- loopfast\n{lf_out}")
    if len(lf) != len(tcp):
        differs("transcripts differ in length")
    used = set()
    for t, f in zip(tcp, lf):
        for i, (pattern, fast) in enumerate(documented.get(scenario, [])):
            m = re.fullmatch(pattern, t)
            if m:
                used.add(i)
                if not re.fullmatch(m.expand(fast), f):
                    differs(f"documented answer: {m.expand(fast)}\n  fast path: {f}\n  tcp: {t}")
                break
        else:
            if f != t:
                differs(f"fast path: {f}\n  tcp: {t}")
    return used


def same_as_tcp(scenario, family, listen="lo", tier=None, probe=PROBE, documented=DOCUMENTED,
                expected_path=EXPECTED_LOOPFAST_PATH):
    """The transcript under loopfast is TCP's but for the documented lines,
    and its connections are on the expected path (test_supervisor_compare.py
    gives its own tables)."""
    spin = os.environ.get("LOOPFAST_TEST_SPIN_US")
    tcp, tcp_paths, tcp_out = run("tcp", scenario, family, listen=listen, probe=probe)
    for line in MUST_SHOW.get(scenario, []):
        assert any(line in l for l in tcp), f"plain TCP did not show {line!r}: the scenario's setup failed\n" + \
            "\n".join(tcp)
    lf, lf_paths, lf_out = run("loopfast", scenario, family, spin, listen, tier, probe)
    used = compare(scenario, tcp, lf, lf_out, documented)
    assert used == set(range(len(documented.get(scenario, [])))), \
        f"documented differences that did not occur: {set(range(len(documented[scenario]))) - used}"
    assert all(p == "tcp" for _, p, _, _ in tcp_paths), tcp_out
    want = expected_path.get(scenario, "unix")
    for who, p, _, _ in lf_paths:
        assert p == (want.get(who, "unix") if isinstance(want, dict) else want), lf_out
    check_pairs(tcp_paths, tcp_out)
    check_pairs(lf_paths, lf_out)
    if scenario != "connect-refused":
        assert lf_paths, "the scenario reported no connection"


@pytest.mark.parametrize("scenario,family", list(cases()))
def test_same_as_tcp(build, scenario, family):
    same_as_tcp(scenario, family)


# The shared-memory tier (docs/shm.md) under the same matrix, both ends
# asking for it (loopfast run --tier shm); test_shm.py proves from the
# kernel that such connections hold the rings. SHM_KNOWN: the scenarios
# its first cut does not pass yet, each a strict xfail (docs/shm.md lists
# them), so that the list cannot outlive a fix.
def _shm_known(why, *scenarios, raises=FastPathDiffers):
    """Strict xfails for the shm tier's first cut. raises=AssertionError:
    the probe itself fails on the tier (its connection is reset: the reader
    found bytes that no ring write explains, or EOPNOTSUPP), rather than
    printing a different transcript."""
    return {(sc, fam): pytest.mark.xfail(raises=raises, strict=True,
                                         reason=f"shm tier first cut, docs/shm.md: {why} (issue 23)")
            for sc in scenarios for fam in ("4", "6")}


SHM_KNOWN = {
    **_shm_known("a raw close_range system call (not seen), then a file on the number", "close-range-fork"),
}


# The whole matrix again with the tier (99 runs, 3 minutes here, twice
# with e2e-spin) is make test-extra's (suite e2e-extra): make test keeps
# test_shm.py's proofs and its own ten-minute budget.
@pytest.mark.extra
@pytest.mark.parametrize("scenario,family", list(cases(SHM_KNOWN)))
def test_same_as_tcp_shm(build, scenario, family):
    same_as_tcp(scenario, family, tier="shm")


# The core of the matrix (connect blocking and not, read/write and
# vectored I/O, poll/select/epoll readiness and timeouts, half-close,
# names, a peer killed), with listeners where servers really listen
# (LFPROBE_LISTEN, see probe.c): 0.0.0.0 and [::] (dual-stack), an IPv4
# client to a dual-stack [::], [::] with IPV6_V6ONLY, and 127.0.0.2.
CORE = ["names", "connect-nonblock", "vectored", "readiness", "halfclose", "sigkill"]
LISTENERS = [("any", "4"), ("any", "6"), ("dual", "4"), ("v6only", "6"), ("lo2", "4")]


@pytest.mark.parametrize("listen,family", LISTENERS, ids=[f"{k}-v{f}" for k, f in LISTENERS])
@pytest.mark.parametrize("scenario", CORE)
def test_listener_kinds(build, scenario, listen, family):
    same_as_tcp(scenario, family, listen)


def test_every_documented_option_is_in_the_matrix(build):
    """docs/sockopts.md's table and the probe's option table are the same set
    of options: every documented row is asked of both ends, on both families."""
    doc = (ROOT / "docs" / "sockopts.md").read_text()
    names = set(re.findall(r"^\| `([A-Z0-9_]+)`", doc, re.M))
    assert len(names) > 200, "docs/sockopts.md lists fewer options than expected"
    for family in ("4", "6"):
        lines, _, _ = run("tcp", "sockopt-table", family)
        asked = {l.split()[2] for l in lines if l.split()[0] in ("client", "server")}
        assert names - asked == set(), f"documented but not in the matrix (IPv{family})"
        assert asked - names - {"0", "99", "15", "1"} == set(), f"in the matrix but not documented (IPv{family})"


@pytest.mark.parametrize("server_mode,client_mode", [("tcp", "loopfast"), ("loopfast", "tcp")])
def test_one_end_not_opted_in_gets_plain_tcp(build, server_mode, client_mode):
    srv = subprocess.Popen(wrap(server_mode, [str(PROBE), "serve-echo", "1"]), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        port = readline(srv).strip()
        cli = subprocess.run(wrap(client_mode, [str(PROBE), "client-echo", port]), capture_output=True,
                             text=True, timeout=30)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "echo ok" in cli.stdout
        assert "#path client tcp" in cli.stdout
        srv.wait(timeout=30)
        assert "#path server tcp" in srv.stderr.read()
    finally:
        stop(srv)


def path_line(text, who):
    """(path, inode, peer inode) of the first "#path WHO" line in text."""
    m = re.search(r"^#path %s (\S+) (\d+) peer (\d+)$" % who, text, re.M)
    assert m, f"no #path {who} line in:\n{text}"
    return m[1], int(m[2]), int(m[3])


def test_both_ends_in_different_processes(build):
    """A server and a client started on their own, in one process group:
    each end is the other's peer. A second client in a group of its own
    is not "unix" for the probe (its peer is outside its group), so the
    probe's proof does look at who holds the peer."""
    srv = subprocess.Popen(wrap("loopfast", [str(PROBE), "serve-echo", "2"]), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, process_group=0)
    try:
        port = readline(srv).strip()
        outs = []
        for group in (srv.pid, 0):
            cli = subprocess.run(wrap("loopfast", [str(PROBE), "client-echo", port]), capture_output=True,
                                 text=True, timeout=30, process_group=group)
            assert cli.returncode == 0 and "echo ok" in cli.stdout, cli.stdout + cli.stderr
            outs.append(cli.stdout)
        srv.wait(timeout=30)
        err = srv.stderr.read()
        c_path, c_ino, c_peer = path_line(outs[0], "client")
        s_path, s_ino, s_peer = path_line(err, "server")
        assert (c_path, s_path) == ("unix", "unix") and (c_peer, s_peer) == (s_ino, c_ino), outs[0] + err
        assert path_line(outs[1], "client")[0] == "unix-peer-not-ours", outs[1]
    finally:
        stop(srv)
