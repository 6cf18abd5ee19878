"""The harness's rules for every pytest suite (loaded by test/harness.py
with -p harness_plugin): pytest-timeout must be there, every expected
failure must be strict and name its issue, and when LOOPFAST_TEST_REPORT
names a file every test's outcome, skip reason and expected-failure mark is
written there for the harness to decide the run."""
import json
import os
import re

import pytest

_results = {}
_collect_errors = []
_xfail_marks = []
_ISSUE = re.compile(r"\(issue \d+\)")
_TIMEOUT = re.compile(r"Failed: Timeout \(?>([\d.]+)s")  # pytest-timeout's message (either form)


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("pytest-timeout is not installed (scripts/deps.sh installs it): "
                                "every test must run under a timeout")


def pytest_collection_modifyitems(session, config, items):
    bad = []
    for item in items:
        for m in item.iter_markers("xfail"):
            reason = m.kwargs.get("reason", "")
            if m.args or m.kwargs.get("strict") is not True or not _ISSUE.search(reason):
                bad.append(item.nodeid)
            _xfail_marks.append({"id": item.nodeid, "reason": reason})
    if bad:
        raise pytest.UsageError("an expected failure must be xfail(strict=True, reason=\"<the fault> "
                                "(issue N)\"), unconditional: " + ", ".join(bad))


def pytest_collectreport(report):
    if report.failed:
        _collect_errors.append(report.nodeid or "(collection)")


def _why(report):
    """One line on why a test failed: the exception's message (pytest's
    crash line), or the last line of the report. A failure by
    pytest-timeout's limit starts with TIMEOUT (the harness's form for a
    test stopped by a time limit rather than failed by a check)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        msg = (crash.message or "").strip().splitlines()
        msg = msg[0] if msg else ""
    else:
        lines = str(report.longrepr).strip().splitlines() if report.longrepr else []
        msg = lines[-1] if lines else ""
    m = _TIMEOUT.match(msg)
    if m:
        return f"TIMEOUT after {m.group(1)} s (pytest-timeout), in {report.when}"
    return f"{report.when}: {msg}"


def pytest_runtest_logreport(report):
    r = _results.setdefault(report.nodeid, {"outcome": "passed", "reason": "", "ran": False})
    if report.failed:
        r["outcome"] = "failed"
        r["reason"] = _why(report)
    elif r["outcome"] == "failed":
        pass
    elif hasattr(report, "wasxfail"):
        r["outcome"] = "xfailed" if report.skipped else "failed"
        r["reason"] = report.wasxfail
    elif report.skipped:
        r["outcome"] = "skipped"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        r["reason"] = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    if report.when == "call":
        r["ran"] = True


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("LOOPFAST_TEST_REPORT")
    if not path:
        return
    for r in _results.values():  # set up and torn down, but never called
        if r["outcome"] == "passed" and not r["ran"]:
            r["outcome"], r["reason"] = "failed", "the test body never ran"
    with open(path, "w") as f:
        json.dump({"tests": _results, "collect_errors": _collect_errors, "xfail_marks": _xfail_marks,
                   "exitstatus": int(exitstatus)}, f, indent=1)
