"""The Python package (python/): installed offline into a venv of Debian's
system Python as the README says, then used by blocking sockets,
socketserver, asyncio streams and asyncio protocols under `loopfast run
--per-socket`. In each, one client opts in and one does not, and the
kernel shows the first on the fast path and the second on plain TCP, both
ends. Without loopfast every call raises a clear OSError and TCP carries
on."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import LOOPFAST, ROOT, readline, stop, wait_paths

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "pkg_cases.py")
SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """`python3 -m venv v && v/bin/pip install --no-build-isolation ./python`,
    with pip kept off the network (--no-index): it must work offline."""
    v = tmp_path_factory.mktemp("pkg") / "v"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(v)], check=True, timeout=120)
    p = subprocess.run([str(v / "bin" / "pip"), "install", "--no-index", "--no-build-isolation",
                        str(ROOT / "python")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    yield v
    shutil.rmtree(v, ignore_errors=True)


def run(venv, case, under_loopfast=True):
    pre = [str(LOOPFAST), "run", "--per-socket", "--"] if under_loopfast else []
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LOOPFAST_ENABLE", "PYTHONPATH")}
    p = subprocess.Popen(pre + [str(venv / "bin" / "python"), CASES, case], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    out = json.loads(readline(p))
    assert out["module"].startswith(str(venv)), out  # the installed package, not the tree's
    return p, out


@pytest.mark.parametrize("case", ["blocking", "socketserver", "streams", "protocols"])
def test_one_socket_opted_in(build, venv, case):
    p, out = run(venv, case)
    try:
        assert out["listener"] is True and out["echo_fast"] == "fast" and out["echo_plain"] == "plain", out
        assert (out["client_fast"], out["accepted_fast"]) == (True, True), out
        assert (out["client_plain"], out["accepted_plain"]) == (False, False), out
        if case == "blocking":
            assert out["spin"] == [30, 0], out
        wait_paths(p.pid, p.pid, out["port"], fast=1, plain=1)
    finally:
        stop(p)


def test_not_loaded_raises_and_tcp_carries_on(build, venv):
    p, out = run(venv, "errors", under_loopfast=False)
    try:
        assert out["loaded"] is False, out
        for call in ("enable", "active", "spin", "udp", "after_connect"):
            code, msg = out[call]
            assert code == 92 and "loopfast is not loaded" in msg, (call, out[call])  # ENOPROTOOPT
        assert out["spin_range"][0] == "ValueError", out
        assert out["tcp_carries_on"] == "x", out
        wait_paths(p.pid, p.pid, out["port"], fast=0, plain=1)
    finally:
        stop(p)


def test_not_eligible_raises(build, venv):
    p, out = run(venv, "errors")
    try:
        assert out["loaded"] is True and out["enable"] is None and out["active"] is True, out
        assert out["udp"][0] == 95 and "not a TCP socket" in out["udp"][1], out  # EOPNOTSUPP
        assert out["after_connect"][0] == 106 and "already connected" in out["after_connect"][1], out  # EISCONN
        # The client opted in, but the listener did not: plain TCP, no error.
        wait_paths(p.pid, p.pid, out["port"], fast=0, plain=1)
    finally:
        stop(p)
