"""The interposer under valgrind memcheck, inside real (probe) programs,
with and without busy polling: no invalid access, no use of uninitialised
memory, in the host program or any child it forks or execs."""
import os
import shutil
import subprocess

import pytest

from conftest import BUILD, PROBE

SCENARIOS = ["names", "sockopts", "connect-nonblock", "epoll-before-connect", "readiness", "msgflags",
             "sendfile-splice", "dup", "scm-rights", "exec-listener", "prefork", "fd-limit"]


@pytest.mark.parametrize("spin", [None, "20"], ids=["uds", "spin"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_memcheck_clean(build, scenario, spin):
    if not shutil.which("valgrind"):
        pytest.fail("valgrind is not installed (scripts/deps.sh installs it)")
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libloopfast-preload.so"), LOOPFAST_ENABLE="1")
    if spin:
        env.update(LOOPFAST_SPIN_US=spin, LOOPFAST_SPIN_BACKOFF="0")
    p = subprocess.run(["valgrind", "-q", "--trace-children=yes", "--error-exitcode=9", str(PROBE), scenario],
                       capture_output=True, text=True, timeout=300, env=env)
    errors = [l for l in p.stderr.splitlines() if l.startswith("==") and "== " in l]
    assert p.returncode == 0, "\n".join(errors[:40]) or p.stdout + p.stderr
    assert "#path" in p.stdout and "tcp" not in " ".join(l for l in p.stdout.splitlines() if l.startswith("#path"))
