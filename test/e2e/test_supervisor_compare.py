"""The behaviour comparison matrix (test_compare.py) with the probe linked
-static, so that under `loopfast run` the seccomp supervisor serves it
(docs/supervisor.md), not the preload: every scenario, both families, plain
TCP without loopfast against `loopfast run`, the path of each connection
proved from the kernel at both ends (the probe's "#path" lines, paired by
inode), as test_compare.same_as_tcp does.

The supervisor sees no data call, so some answers differ from TCP's (and
from the preload's). Each is written down in docs/supervisor.md ("The
behaviour matrix") and here, in one of three forms:
  SECCOMP_DOCUMENTED  a line of the transcript whose supervised answer is
                      the documented one (checked exactly, and required to
                      occur, as test_compare.DOCUMENTED);
  SECCOMP_PATH        connections that are documented to stay on plain TCP;
  SECCOMP_KNOWN       scenarios that cannot run to their end under the
                      supervisor (the probe stops at the first answer it
                      does not accept): strict xfails that must fail in the
                      way named (ProbeFailed: the probe stopped on an error,
                      never ProbeHung or a timeout), each naming its section.
No entry stands for a hang: a scenario that hangs fails."""
import pathlib
import subprocess
import tempfile

import pytest

from conftest import ROOT
from test_compare import (DOCUMENTED, WHO, EXPECTED_LOOPFAST_PATH, FAMILY_AGNOSTIC, SCENARIOS, FastPathDiffers,
                          ProbeFailed, same_as_tcp)

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = [pytest.mark.timeout(150), pytest.mark.extra]

DOC = "docs/supervisor.md, The behaviour matrix"

# Lines the supervised run answers differently, as (TCP's line, the
# supervised line) patterns; a scenario listed here replaces test_compare's
# entries for the preload (the preload answers some of them itself).
_UNTRAPPED = r" (IPPROTO_UDP UDP_CORK|9999 1 \(level 9999: no such level\))"
SECCOMP_DOCUMENTED = {
    **DOCUMENTED,
    # The kernel's SHUT_RD of a Unix stream: reads end, and the peer's
    # writes fail (EPIPE) where TCP takes and delivers them. epoll is TCP's
    # here (the Unix socket is readable once shut), unlike the preload's.
    "shut-rd": [("the peer writes after SHUT_RD: 2 0", "the peer writes after SHUT_RD: -1 EPIPE"),
                ("and the reader gets them: 2 'cd'", "and the reader gets them: 0 ''"),
                ("the peer writes: 2 0", "the peer writes: -1 EPIPE")],
    # sendto/sendmsg with a destination on a connected socket: TCP ignores
    # it, a Unix stream refuses it (the preload drops the address). And
    # MSG_TRUNC: TCP discards the bytes, a Unix stream copies them (EFAULT
    # for no buffer; the preload discards them itself). The supervisor sees
    # no data call (docs/supervisor.md).
    "vectored": [(r"sendto/sendmsg with an address: 1 4", r"sendto/sendmsg with an address: -1 -1"),
                 (r"then '@one '", r"then ''"),
                 (r"recv NULL MSG_TRUNC ok 0", r"recv NULL MSG_TRUNC short Bad address"),
                 (r"recv NULL MSG_TRUNC\|MSG_WAITALL ok 0", r"recv NULL MSG_TRUNC\\|MSG_WAITALL short Bad address"),
                 (r"recv NULL MSG_TRUNC\|MSG_WAITALL\|MSG_PEEK ok 0",
                  r"recv NULL MSG_TRUNC\\|MSG_WAITALL\\|MSG_PEEK short Bad address")],
    # A recv of 0 bytes: TCP's one wait ends with 0 whatever ends it, and
    # an urgent byte counts as queued; the Unix socket's wait says EAGAIN
    # at its timeout and EINTR at a signal, and waits past an urgent byte,
    # whose mark a read then finds gone (the preload answers such a read
    # itself). The supervisor sees no read.
    "msgflags": [(r"(recv of 0 under SO_RCVTIMEO 150 ms, empty:) 0 0", r"\1 -1 EAGAIN"),
                 (r"(recv of 0 under SO_RCVTIMEO 2 s, SA_RESTART signal after 100 ms:) 0 0", r"\1 -1 EINTR"),
                 (r"(recv of 0 under SO_RCVTIMEO 1 s, only an urgent byte queued:) 0 0", r"\1 -1 EAGAIN"),
                 (r"then MSG_OOB 1 0 '!'", r"then MSG_OOB -1 Invalid argument ''")],
    # SO_SNDTIMEO: the Unix socket's timeout restarts for each buffer a
    # write waits for, where TCP's is the call's (the preload makes the
    # write's steps itself); a reader that frees room within each keeps the
    # write going. The supervisor sees no write.
    "backpressure": [(r"(a write of 16 MiB under SO_SNDTIMEO 200 ms, .*: ended before all:) yes", r"\1 no")],
    # Option levels libloopfast does not answer for a fast-path socket
    # (IPPROTO_UDP, a level no socket has) are not trapped, so that other
    # sockets' calls at them cost nothing: the Unix socket's EOPNOTSUPP
    # where TCP says ENOPROTOOPT (the preload asks TCP).
    "sockopt-table": DOCUMENTED["sockopt-table"] + [
        (WHO + _UNTRAPPED + r" (get|set|get after set): -1 ENOPROTOOPT", r"\1" + _UNTRAPPED + r" \3: -1 EOPNOTSUPP")],
    # Options are kept by socket, not per descriptor as under the preload:
    # a dup and a forked child share them, as TCP's (docs/supervisor.md,
    # Socket options).
    "sockopt-shared": [],
}

# A connect whose handshake waits (a full accept queue) is answered when
# the supervisor stops holding it (a non-blocking one after 2 s, a blocking
# one at SO_SNDTIMEO, or at a signal for a handler: EINTR, or restarted
# under SA_RESTART): its connection then goes on as plain TCP.
_HELD = {"client": "tcp", "server": "tcp"}
SECCOMP_PATH = {**EXPECTED_LOOPFAST_PATH,
                **{sc: _HELD for sc in ("connect-full-poll", "connect-full-epoll", "connect-full-select",
                                        "connect-sndtimeo", "connect-again", "connect-eintr",
                                        "connect-eintr-reconnect", "connect-restart")},
                # A socket registered in an epoll set before its connect
                # is left on plain TCP (the switch would take the
                # registration away): docs/supervisor.md, Options and epoll.
                **{sc: _HELD for sc in ("epoll-before-connect", "fortify-pwait2")}}


# The line each stopping scenario's probe must stop on (its documented
# answer), so that no other failure passes for the expected one.
STOPS = {}


def _known(why, stop, *scenarios, raises=ProbeFailed):
    STOPS.update({sc: stop for sc in scenarios if stop})
    return {(sc, fam): pytest.mark.xfail(raises=raises, strict=True, reason=f"{DOC}: {why} (issue 21)")
            for sc in scenarios for fam in ("4", "6")}


SECCOMP_KNOWN = {
    # TCP_INFO's state: the library keeps what it cannot ask the kernel
    # (the socket's own SHUT_WR, a reset seen before its error was read)
    # per descriptor, and the supervisor's copy lives for one call;
    # shutdown is not trapped. First line: ESTABLISHED after the socket's
    # own SHUT_WR, where TCP says FIN_WAIT2.
    **_known("TCP_INFO's state does not see the socket's own shutdown", None, "tcp-info", raises=FastPathDiffers),
    # sendmmsg with destinations: EISCONN, nothing sent (the probe stops
    # waiting for it); recvmmsg names the Unix peer.
    **_known("sendmmsg with destinations", "sendmmsg with destinations: -1 EISCONN", "mmsg"),
}

def cases():
    for sc in SCENARIOS:
        for fam in ("4",) if sc in FAMILY_AGNOSTIC else ("4", "6"):
            marks = SECCOMP_KNOWN.get((sc, fam), ())
            yield pytest.param(sc, fam, id=f"{sc}-v{fam}", marks=marks)


@pytest.fixture(scope="module")
def static_probe():
    """lfprobe linked -static (no program interpreter: loopfast run picks
    the supervisor for it)."""
    with tempfile.TemporaryDirectory(prefix="lf-svprobe-") as d:
        out = pathlib.Path(d) / "lfprobe"
        src = sorted(str(p) for p in (ROOT / "test" / "e2e" / "lfprobe").glob("*.c"))
        done = subprocess.run(["cc", "-O2", "-D_GNU_SOURCE", "-static", "-pthread", "-o", str(out), *src],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        ph = subprocess.run(["readelf", "-lW", str(out)], capture_output=True, text=True, timeout=30).stdout
        assert "LOAD" in ph and "INTERP" not in ph, f"lfprobe has a program interpreter:\n{ph}"
        yield out


def supervised_same_as_tcp(probe, scenario, family):
    try:
        same_as_tcp(scenario, family, probe=probe, documented=SECCOMP_DOCUMENTED, expected_path=SECCOMP_PATH)
    except ProbeFailed as e:
        stop = STOPS.get(scenario)
        if stop and not (str(e).startswith("loopfast ") and stop in str(e)):
            raise AssertionError(f"the probe did not stop on the documented answer {stop!r}:\n{e}") from e
        raise


# make test: a few scenarios of the core (names, non-blocking connect and
# readiness, half-close, a killed peer, SO_RCVLOWAT's readiness; SHUT_RD waits 5 s: extra).
CORE = ["names", "connect-nonblock", "connect-refused", "readiness", "halfclose", "sigkill", "rcvlowat"]


@pytest.mark.parametrize("scenario", CORE)
def test_supervised_core(build, static_probe, scenario):
    supervised_same_as_tcp(static_probe, scenario, "4")


# The whole matrix, both families (about 99 runs, minutes): make test-extra.
@pytest.mark.extra
@pytest.mark.parametrize("scenario,family", list(cases()))
def test_supervised_same_as_tcp(build, static_probe, scenario, family):
    supervised_same_as_tcp(static_probe, scenario, family)


def test_every_entry_names_a_scenario():
    """No entry outlives the scenario it documents."""
    for table in (SECCOMP_DOCUMENTED, SECCOMP_PATH):
        assert set(table) <= set(SCENARIOS)
    assert {sc for sc, _ in SECCOMP_KNOWN} <= set(SCENARIOS)
