"""The suite's own helpers (conftest.py), where a fault would leave
programs running after the test or hide a failure."""
import signal
import subprocess
import sys

import pytest

from conftest import expect_signal, stop


def dead_of(sig):
    """A program that killed itself with sig (a signal the test did not send it)."""
    p = subprocess.Popen([sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(sig)})"])
    p.wait(timeout=30)
    return p


def test_stop_reaps_every_process_though_stopping_one_fails():
    bad1, sleeper, bad2 = dead_of(signal.SIGUSR1), subprocess.Popen(["sleep", "60"]), dead_of(signal.SIGUSR2)
    try:
        with pytest.raises(pytest.fail.Exception, match="SIGUSR1") as failed:
            stop(bad1, None, sleeper, bad2)
        assert "SIGUSR2" not in str(failed.value), "not the first failure"
        assert sleeper.returncode == -signal.SIGKILL, f"sleep not stopped and reaped: {sleeper.returncode}"
    finally:
        sleeper.kill()
        sleeper.wait(timeout=30)
        for p, sig in ((bad1, signal.SIGUSR1), (bad2, signal.SIGUSR2)):
            expect_signal(p, sig)  # the autouse check: they were meant to
