"""Shared fixtures for the end-to-end tests: where the build is, and how to
run a program plainly or under `loopfast run`."""
import os
import pathlib
import shutil
import socket
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LOOPFAST_BUILD", ROOT / "build"))
LOOPFAST = BUILD / "loopfast"
PROBE = BUILD / "lfprobe"


def lf_cmd(args, spin=None):
    """The command line that runs args under loopfast."""
    extra = ["--spin-us", str(spin)] if spin is not None else []
    return [str(LOOPFAST), "run", *extra, "--", *args]


@pytest.fixture(scope="session")
def build():
    if not LOOPFAST.exists():
        pytest.fail(f"{LOOPFAST} is missing: run make first")
    return BUILD


@pytest.fixture(params=["tcp", "loopfast"])
def mode(request):
    return request.param


def wrap(mode, args, spin=None):
    return lf_cmd(args, spin) if mode == "loopfast" else list(args)


def status_json():
    import json
    out = subprocess.run([str(LOOPFAST), "--json", "status"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_port(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def need(binary):
    if not shutil.which(binary):
        pytest.fail(f"{binary} is not installed (scripts/deps.sh installs it)")
