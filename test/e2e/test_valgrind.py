"""The interposer under valgrind memcheck, inside real (probe) programs,
with and without busy polling: no invalid access, no use of uninitialised
memory, in the host program or any child it forks or execs. Every process
writes its own log (--log-file with %p and %n: a process that execs gets a
second file rather than truncating its first), and every log is checked."""
import glob
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, PROBE

# 21 s of make test on 2026-11-27: make test-extra's, as the whole
# benchmark runs, so that make test stays within ten minutes (the C
# suites run under ASan in make test).
pytestmark = pytest.mark.extra

SCENARIOS = ["names", "sockopts", "connect-nonblock", "epoll-before-connect", "readiness", "msgflags",
             "sendfile-splice", "dup", "scm-rights", "exec-listener", "prefork", "fd-limit"]
# A reported error always carries a stack ("at 0x..."), and the summary a
# process prints at exit counts them.
ERROR = re.compile(r"^==\d+== +(at|by) 0x|^==\d+== ERROR SUMMARY: [1-9]", re.M)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("spin", [None, "20"], ids=["uds", "spin"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_memcheck_clean(build, scenario, spin, tmp_path):
    if not shutil.which("valgrind"):
        pytest.fail("valgrind is not installed (scripts/deps.sh installs it)")
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libloopfast-preload.so"), LOOPFAST_ENABLE="1")
    if spin:
        env.update(LOOPFAST_SPIN_US=spin, LOOPFAST_SPIN_BACKOFF="0")
    p = subprocess.run(["valgrind", "--trace-children=yes", f"--log-file={tmp_path}/vg.%p.%n.log",
                        "--error-exitcode=9", str(PROBE), scenario],
                       capture_output=True, text=True, timeout=120, env=env)
    logs = {f: open(f, errors="replace").read() for f in sorted(glob.glob(f"{tmp_path}/vg.*.log"))}
    assert any(f"Command: {PROBE} {scenario}" in t for t in logs.values()), (list(logs), p.stderr)
    bad = {os.path.basename(f): t for f, t in logs.items() if ERROR.search(t)}
    assert not bad, "\n".join(f"--- {f}\n{t[-4000:]}" for f, t in bad.items())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "#path" in p.stdout and "tcp" not in " ".join(l for l in p.stdout.splitlines() if l.startswith("#path"))
    if scenario in ("exec-listener", "prefork", "fd-limit"):  # they fork: their children's logs are there
        assert len({f.split(".")[-3] for f in logs}) >= 2, list(logs)
