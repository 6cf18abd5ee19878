"""What a program may do to its own connects and descriptors, which
loopfast must survive as TCP would: a signal that interrupts a blocking
connect (EINTR, then the connection completes in the background), a
connect bounded by SO_SNDTIMEO (EINPROGRESS), and a program that closes or
overwrites every descriptor it has, loopfast's own included, between two
connects, a connection reset before anyone claimed it (connected, or
still connecting), a client that forks before it reads, and glibc's set*id
signal during a blocking read, a listener that defers its accepts, and a
signal set to SIG_DFL or SIG_IGN with SA_SIGINFO, then raised.
Not attacks (a program can only do this to itself), but each
once made loopfast hang; the scripts are in attack/ with the attacks'."""
import json
import os
import signal
import socket
import subprocess
import tempfile

import pytest

from conftest import expect_signal, readline, stop, wrap

ATTACK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attack")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
FAMS = pytest.mark.parametrize("fam", ["4", "6"])
# For the tests that wait 2.5-3 s a run: their IPv6 runs are make
# test-extra's, to keep make test within its ten minutes.
FAMS_V6_EXTRA = pytest.mark.parametrize("fam", ["4", pytest.param("6", marks=pytest.mark.extra)])


def script(mode, name, *args):
    err = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen(wrap(mode, [PY, os.path.join(ATTACK, name), *map(str, args)]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=err, text=True)
    p.err = err
    return p


def errors(p):
    p.err.seek(0)
    return p.err.read()[-4000:]


def both_ways(name, *args):
    """attack/NAME's JSON line over plain TCP and under loopfast (one
    process each, both ends in it): ({"tcp": ..., "loopfast": ...}, the
    loopfast run's stderr)."""
    outs = {}
    for mode in ("tcp", "loopfast"):
        p = script(mode, name, *args)
        try:
            outs[mode] = json.loads(readline(p, 60))
            p.wait(timeout=30)
        finally:
            stop(p)
    return outs, errors(p)


def echo_server(fam, *opts):
    """attack/echo_server.py under loopfast: (process, port)."""
    srv = script("loopfast", "echo_server.py", fam, *opts)
    port = int(readline(srv).split()[0])
    assert readline(srv).strip() == "listening"
    return srv, port


def sigconnect_transcript(mode, fam):
    """sigconnect.py's lines, run in `mode` against a loopfast server whose
    accept queue is full until the script says it is waiting."""
    srv, port = echo_server(fam, "--hold", "--backlog", 1)
    fill, cl = [], None
    try:
        for _ in range(2):  # a listener of backlog 1 holds two in its accept queue
            fill.append(socket.create_connection(("127.0.0.1" if fam == "4" else "::1", port), timeout=10))
        cl = script(mode, "sigconnect.py", fam, port)
        lines = []
        while True:
            line = readline(cl, 60).rstrip("\n")
            lines.append(line)
            if line == "waiting":
                break
        srv.stdin.write("accept\n")
        srv.stdin.flush()
        cl.stdin.write("go on\n")
        cl.stdin.flush()
        for _ in range(10):  # five lines per connection
            lines.append(readline(cl, 90).rstrip("\n"))
        cl.wait(timeout=30)
        assert cl.returncode == 0, errors(cl)
        return lines
    finally:
        for f in fill:
            f.close()
        stop(srv, cl)


@FAMS_V6_EXTRA
def test_signal_and_sndtimeo_during_connect_as_tcp(build, fam):
    tcp = sigconnect_transcript("tcp", fam)
    fast = sigconnect_transcript("loopfast", fam)
    print("\n".join(fast))
    assert tcp[0].endswith(": EINTR"), tcp  # the control: what TCP does
    assert [l for l in fast if not l.startswith("path")] == [l for l in tcp if not l.startswith("path")]
    # Both connections completed on the fast path after all.
    assert [l for l in fast if l.startswith("path")] == ["path interrupted fast", "path timed out fast"], fast


@FAMS
@pytest.mark.parametrize("how", ["close_range", "dup2", "dup3-raw"])
def test_connect_after_wrecking_every_descriptor(build, fam, how):
    srv, port = echo_server(fam)
    cl = None
    try:
        cl = script("loopfast", "closefds.py", fam, port, how)
        out = json.loads(readline(cl, 60))
        cl.wait(timeout=30)
    finally:
        stop(srv, cl)
    assert out == {"first": ["ok", "fast"], "second": ["ok", "fast"]}, (out, errors(cl))


@FAMS
def test_server_that_closes_every_other_descriptor_after_listen(build, fam):
    # A daemon that binds, then closes "everything else" with close():
    # loopfast's rendezvous and stash are among those numbers, and must
    # survive it, or every later client silently falls back to TCP.
    srv, port = echo_server(fam, "--close-others")
    cl = None
    try:
        cl = script("loopfast", "clients.py", fam, port, 5, "--conc", 1)
        out = json.loads(readline(cl, 60))
        cl.wait(timeout=30)
    finally:
        stop(srv, cl)
    assert (out["outcomes"], out["fast"]) == ({"ok": 5}, 5), (out, errors(cl), errors(srv))


@FAMS
@pytest.mark.parametrize("how", ["shutdown", "rogue-reset"])
@pytest.mark.parametrize("read", ["select", "epoll", "blocking"])
def test_reset_before_accept_as_tcp(build, fam, how, read):
    # A connection reset before anyone claimed it (its listener shut down
    # with it in the accept queue; a process without loopfast accepted it
    # and closed it with a reset): the client must read TCP's ECONNRESET,
    # not wait forever for a claim that will not come.
    outs, errs = both_ways("resetq.py", fam, how, read)
    assert outs["tcp"] == {"path": "tcp", "read": "ECONNRESET"}, outs  # the control: what TCP does
    assert outs["loopfast"] == {"path": "fast", "read": "ECONNRESET"}, (outs, errs)


@FAMS
def test_set_id_broadcast_during_a_read_as_tcp(build, fam):
    # glibc's set*id calls signal every thread of the process (SIGSETXID,
    # SA_RESTART): a blocking read must go on, as TCP's is restarted by the
    # kernel, also while it waits for the server's claim (on the bell).
    outs, errs = both_ways("setxid_read.py", fam)
    assert outs["tcp"] == {"read": "hi", "blocked": True}, outs  # the control
    assert outs["loopfast"] == {"read": "hi", "blocked": True}, (outs, errs)


@FAMS_V6_EXTRA
@pytest.mark.parametrize("how", ["connect", "poll"])
def test_pending_connect_reset_before_accept_as_tcp(build, fam, how):
    # A non-blocking connect still in progress (full accept queue) whose
    # connection a process without loopfast then accepts and resets: the
    # application finishes its connect (a second connect, or poll and
    # SO_ERROR) and reads. Nothing of this is a claim.
    outs, errs = both_ways("reconnect_reset.py", fam, how)
    assert outs["tcp"]["finished"] == "ECONNRESET", outs  # the control: what TCP does
    assert outs["loopfast"] == outs["tcp"], (outs, errs)


@FAMS
def test_forked_client_reads_as_tcp(build, fam):
    # A client forks right after its connect; the child reads first, then
    # the parent: both hold the connection, and on the fast path both hold
    # its bell until they see the claim, each on its own.
    outs, errs = both_ways("forkread.py", fam)
    assert outs["tcp"] == {"path": "tcp", "child": "one", "parent": "two"}, outs  # the control
    assert outs["loopfast"] == {"path": "fast", "child": "one", "parent": "two"}, (outs, errs)


@FAMS
def test_defer_accept_listener_stays_tcp(build, fam):
    # A listener with TCP_DEFER_ACCEPT accepts a connection only once data
    # has arrived on it; a fast-path doorbell carries none, so its clients
    # waited the whole defer period (30 s here) for each connection.
    # loopfast keeps such a listener on plain TCP.
    outs, errs = both_ways("defer_accept.py", fam)
    assert outs["tcp"] == {"path": "tcp", "read": "x"}, outs  # the control
    assert outs["loopfast"] == {"path": "tcp", "read": "x"}, (outs, errs)


SA_SIGINFO, SA_RESTART, SA_RESETHAND = 0x4, 0x10000000, 0x80000000


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR1"])
@pytest.mark.parametrize("disp", ["dfl", "ign"])
@pytest.mark.parametrize("flags", [0, SA_SIGINFO, SA_SIGINFO | SA_RESTART | SA_RESETHAND], ids=["none", "siginfo",
                                                                                             "siginfo-restart-reset"])
def test_default_and_ignored_signals_end_as_without_loopfast(build, sig, disp, flags):
    # Over TCP a program's signal dispositions are the kernel's business:
    # SIG_DFL kills with that signal, SIG_IGN ignores it, whatever the
    # flags. Under loopfast every sigaction goes through its wrapper; a
    # SIG_DFL or SIG_IGN with SA_SIGINFO once got its trampoline, which
    # called address 0 or 1 (SIGSEGV: how php-fpm's workers died when
    # stopped during a request).
    ends = {}
    for mode in ("tcp", "loopfast"):
        p = subprocess.Popen(wrap(mode, [PY, os.path.join(ATTACK, "sigdisp.py"), sig, disp, str(flags)]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        expect_signal(p, signal.Signals[sig])  # it raises it itself
        out, err = p.communicate(timeout=60)
        ends[mode] = (p.returncode, out)
    want = (-signal.Signals[sig], None) if disp == "dfl" else (0, "alive")
    assert ends["tcp"][0] == want[0] and (want[1] is None or want[1] in ends["tcp"][1]), ends  # the control
    assert ends["loopfast"] == ends["tcp"], ends


def test_threads_with_small_stacks_still_start(build, mode):
    # glibc takes a thread's static TLS (every loaded library's __thread
    # variables) out of its stack and refuses a thread whose stack cannot
    # hold it: a preloaded library with a large thread-local buffer makes
    # programs that start threads with small stacks fail (mariadbd's timer
    # thread: "Can't initialize timers"). A 64 KiB stack starts as without
    # loopfast, whatever tier the process asked for.
    code = ("import threading; threading.stack_size(65536); t = threading.Thread(target=lambda: None); t.start(); "
            "t.join(); print('ok')")
    for tier in (None, "shm"):
        p = subprocess.run(wrap(mode, [PY, "-c", code], tier=tier), capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stdout.strip()) == (0, "ok"), (mode, tier, p.stderr[-500:])
