"""Programs stopped by signals under `loopfast run` end as without it.

A Go net/http server and client (test/e2e/progs/gohttp.go, the standard
library only, built here with cgo as `go build` does by default: the binary
is linked against libc, so the preload is loaded and wraps the handlers Go's
runtime installs through libc's sigaction) are sent SIGTERM, SIGINT, SIGHUP
and SIGQUIT, plainly and under loopfast: the exit status must be the same,
Go's own (killed by the signal; SIGQUIT dumps the goroutines and exits 2),
never a SIGSEGV (Go resets a signal to SIG_DFL with SA_SIGINFO set before
it raises it again: loopfast's trampoline once called a NULL handler). A
Go server with signal.Notify(SIGTERM) exits 0 after a clean shutdown. And a
C program doing siginterrupt(SIGALRM, 1); signal(SIGALRM, h); alarm(1);
read(pipe) gets EINTR under loopfast with spinning on, as without it
(loopfast's signal() once always set SA_RESTART: the read waited forever).

The children start with SIGINT, SIGQUIT, SIGHUP and SIGTERM at their
defaults: a shell running the suite in the background ignores SIGINT and
SIGQUIT, and Go keeps a signal that was ignored when it started ignored."""
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import BUILD, go_binary, lf_cmd, readline, stop

PROGS = pathlib.Path(__file__).resolve().parent / "progs"
PRELOAD = "libloopfast-preload"
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT]


@pytest.fixture(scope="module")
def gohttp():
    """gohttp built from source in a temporary GOPATH, without the network,
    with the build's GOCACHE (shared with the other Go tests: 16 s less);
    linked against libc (ldd), so that the preload loads."""
    go = go_binary()
    with tempfile.TemporaryDirectory(prefix="lf-go-") as d:
        d = pathlib.Path(d)
        shutil.copy(PROGS / "gohttp.go", d / "gohttp.go")
        env = dict(os.environ, GOCACHE=str(BUILD / "go-cache"), GOPATH=str(d / "gopath"), GOFLAGS="",
                   GOTOOLCHAIN="local", GOPROXY="off", GO111MODULE="off", HOME=str(d))
        out = subprocess.run([go, "build", "-o", str(d / "gohttp"), "gohttp.go"], cwd=d, env=env,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr
        ldd = subprocess.run(["ldd", str(d / "gohttp")], capture_output=True, text=True, timeout=30)
        assert "libc.so" in ldd.stdout, f"gohttp is not linked against libc: {ldd.stdout}{ldd.stderr}"
        yield d / "gohttp"


def defaults():
    for s in SIGNALS:
        signal.signal(s, signal.SIG_DFL)


def start(args, under_lf, spin=None):
    """Under loopfast: the preload, named (a Go binary would get the seccomp
    supervisor by itself; these tests are about the preload's signals)."""
    cmd = [*lf_cmd(args, spin)[:2], "--mode", "preload", *lf_cmd(args, spin)[2:]] if under_lf else list(args)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=defaults)


def preloaded(pid):
    return PRELOAD in pathlib.Path(f"/proc/{pid}/maps").read_text()


def end_status(proc, sig):
    proc.send_signal(sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        stop(proc)
        pytest.fail(f"{proc.args!r} still ran 60 s after {sig.name}")
    err = proc.stderr.read()
    assert proc.returncode != -signal.SIGSEGV, f"{proc.args!r} crashed on {sig.name}: {err[-2000:]}"
    return proc.returncode, err


def server_and_client(gohttp, under_lf, sig):
    """Starts a server and a client talking to it; sends sig to the
    server, then to the client; returns both exit statuses."""
    srv = start([str(gohttp), "server"], under_lf)
    cli = None
    try:
        port = readline(srv).split()[1]
        cli = start([str(gohttp), "client", port], under_lf)
        assert readline(cli).strip() == "ok"
        for p in (srv, cli):
            assert preloaded(p.pid) == under_lf
        s_status, s_err = end_status(srv, sig)
        c_status, c_err = end_status(cli, sig)
        if sig == signal.SIGQUIT:  # Go's goroutine dump
            assert "goroutine" in s_err and "goroutine" in c_err
        return s_status, c_status
    finally:
        stop(srv, cli)  # cli is stopped even if stopping srv fails the test (one was left running under init)


@pytest.mark.extra  # its Go build, 20-25 s (make test's ten minutes)
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_go_server_and_client_end_as_without_loopfast(gohttp, sig):
    want = 2 if sig == signal.SIGQUIT else -sig
    plain = server_and_client(gohttp, False, sig)
    under = server_and_client(gohttp, True, sig)
    assert plain == (want, want), f"without loopfast: {plain}"
    assert under == plain, f"under loopfast {under}, without {plain}"


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("under_lf", [False, True], ids=["plain", "loopfast"])
def test_go_server_with_notify_exits_cleanly(gohttp, under_lf):
    srv = start([str(gohttp), "server-notify"], under_lf)
    try:
        readline(srv)
        assert preloaded(srv.pid) == under_lf
        status, err = end_status(srv, signal.SIGTERM)
        assert status == 0, err
        assert srv.stdout.read().strip() == "stopping"
    finally:
        stop(srv)


@pytest.mark.parametrize("under_lf", [False, True], ids=["plain", "loopfast"])
def test_siginterrupt_signal_read_gets_eintr(under_lf):
    prog = BUILD / "sigintr"
    assert prog.exists(), f"{prog} is missing: run make"
    cmd = lf_cmd([str(prog)], spin=100) if under_lf else [str(prog)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, preexec_fn=defaults)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Interrupted system call handled=1"
