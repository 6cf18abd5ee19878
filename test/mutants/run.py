#!/usr/bin/env python3
"""Builds loopfast with each deliberate fault of test/mutants/mutants.py, one
at a time, and runs the part of the suite that must catch it.

usage: test/mutants/run.py [--only NAME[,NAME...]] [--report FILE] [--keep]

Nothing here touches the developer's tree: the tree as it is (tracked and
untracked files that git does not ignore) is copied to a temporary
directory, built there out of tree (only the targets the subsets need),
and each mutant is applied to the copy, built, run with
`scripts/test.sh BUILD --only ...` and taken back out. Ctrl-C stops the
subset and removes the copy.

Before any mutant, every snippet must occur exactly once in its file, and
every subset must pass on the unmutated copy (else a failure would prove
nothing about the mutant). A mutant is killed when its subset ends with
failures; it survived when the subset passed. The table at the end says
which test killed each (pytest stops at a subset's first failure). A
mutant whose subset hung past its limit_s, or whose only failures were
tests stopped by a time limit (the harness's "TIMEOUT after ..."), is
"killed-by-timeout": it counts as killed, but is listed apart, since no
check caught it (aim for none). Exit status 0 only
when every mutant was killed, except those marked `until` (expected
survivors), which must survive.
--report writes the results as JSON (for test/harness.py's mutants suite).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from mutants import MUTANTS  # noqa: E402

E2E_TARGETS = ["loopfast-cli", "loopfast-preload", "lfprobe"]
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$")


def say(msg=""):
    print(msg, flush=True)


def check_snippets(mutants, root):
    """Every edit's snippet exactly once in its file (of the tree being
    tested). Returns the problems, one line each."""
    problems = []
    for m in mutants:
        for path, old, new in m.edits:
            if old == new:
                problems.append(f"mutant {m.name}: an edit of {path} changes nothing")
            try:
                with open(os.path.join(root, path)) as f:
                    n = f.read().count(old)
            except OSError as e:
                problems.append(f"mutant {m.name}: cannot read {path}: {e.strerror}")
                continue
            if n != 1:
                first = old.strip().splitlines()[0] if old.strip() else repr(old)
                problems.append(f"mutant {m.name}: its snippet of {path} occurs {n} times, not exactly once "
                                f"(starts: {first!r}): rewrite it in test/mutants/mutants.py against the code")
    return problems


def tree_files(root):
    """The files of the tree as a developer has it: tracked ones that still
    exist and untracked ones git does not ignore (no build directories)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        return sorted({p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(root, p))})
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(("build", ".git", "__pycache__"))]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return sorted(files)


def copy_tree(root, dest):
    for rel in tree_files(root):
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(root, rel), os.path.join(dest, rel), follow_symlinks=False)


def targets(specs):
    """The build targets a set of --only specs needs."""
    t = []
    for spec in specs:
        kind, _, rest = spec.partition(":")
        if kind in ("e2e", "e2e-spin", "compat"):
            t += E2E_TARGETS
        elif kind == "c":
            t.append(rest.partition(":")[0])
        else:
            raise SystemExit(f"test/mutants/mutants.py: subset spec '{spec}': want c:, e2e:, e2e-spin: or compat:")
    return sorted(set(t))


def run_quiet(argv, log, limit=None, env=None):
    """Runs argv in its own process group with its output appended to log;
    returns (exit status, seconds, timed out). Ctrl-C (or the limit) stops
    the whole group: SIGINT first, so that the harness kills its own
    children, then SIGKILL; what is left of the group at the end (the
    orphans of a failed test) is killed too."""
    start = time.monotonic()
    mark = f"LF_MUTANT_SUBSET={os.getpid()}.{start}"
    env = dict(env or os.environ, LF_MUTANT_SUBSET=mark.split("=", 1)[1])
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
        timed_out = False
        try:
            try:
                rc = p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                raise
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            for sig, grace in ((signal.SIGINT, 20), (signal.SIGKILL, 30)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            if not timed_out:
                raise
            rc = None
    # What a failed test left running (a forked child whose parent died
    # keeps the group, not the parent): nothing outlives its subset.
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_marked(mark.encode())
    return rc, time.monotonic() - start, timed_out


def kill_marked(mark):
    """Kills every process whose environment holds mark: what a hung
    subset's tests started in sessions of their own (servers, loopfast
    run's children) left the group, and would load the next subsets."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def verdict(log):
    """What the harness said at the end of a subset: (passed, failed, the
    failures it listed as (test id, reason)), or None when it printed no
    final line."""
    with open(log, errors="replace") as f:
        lines = f.read().splitlines()
    counts = None
    for line in lines:
        m = SUMMARY.match(line)
        if m:
            counts = (int(m.group(1)), int(m.group(2)))
    if counts is None:
        return None
    failures, inside = [], False
    for line in lines:
        if line == "failed:":
            inside, failures = True, []
        elif inside and line.startswith("  "):
            tid, _, why = line.strip().partition(": ")
            failures.append((tid, why))
        elif inside:
            inside = False
    return counts[0], counts[1], failures


def tail(log, n=25):
    with open(log, errors="replace") as f:
        return "\n".join("    | " + l for l in f.read().splitlines()[-n:])


def apply(m, src, originals):
    """Applies mutant m to the copy, remembering each file's text in
    originals (to take it back out). Returns an error, or None."""
    for path, old, new in m.edits:
        p = os.path.join(src, path)
        with open(p) as f:
            text = f.read()
        originals.setdefault(p, text)
        if text.count(old) != 1:  # the tree changed since the check
            return f"its snippet of {path} occurs {text.count(old)} times in the copy, not exactly once"
        with open(p, "w") as f:
            f.write(text.replace(old, new, 1))
    return None


class Run:
    def __init__(self, src, build, logs):
        self.src, self.build, self.logs = src, build, logs

    def make(self, tgts, log):
        rc, secs, _ = run_quiet(["cmake", "--build", self.build, "-j2", "--target", *tgts], log)
        return rc == 0, secs

    def subset(self, specs, env, limit, log, first_failure=False):
        """first_failure: pytest stops at a subset's first failed test
        (a mutant is killed by one; its other tests would each wait out
        what the fault makes them wait: up to 4 minutes a mutant)."""
        argv = ["bash", os.path.join(self.src, "scripts", "test.sh"), self.build]
        for s in specs:
            argv += ["--only", s]
        # The copy has no git history: tests that build an old version
        # from it (test_versions.py) read it from the tree copied.
        e = dict(os.environ, LOOPFAST_GIT=os.environ.get("LOOPFAST_GIT", ROOT), **env)
        if first_failure:
            e["PYTEST_ADDOPTS"] = (e.get("PYTEST_ADDOPTS", "") + " -x").strip()
        rc, secs, timed_out = run_quiet(argv, log, limit, e)
        return rc, secs, timed_out, verdict(log)


def interrupted(*_):
    raise KeyboardInterrupt


NOT_RUN = "not run: the time budget of this run (LF_MUTANTS_DEADLINE) was spent"


def main():
    # SIGINT and SIGTERM both stop the subset and remove the copy, even
    # when this was started with SIGINT ignored (a background job); the
    # subsets inherit handled signals, so they can be stopped the same way.
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated mutant names")
    ap.add_argument("--report", help="write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the copy, its build and the logs")
    a = ap.parse_args()
    start = time.monotonic()

    if len({m.name for m in MUTANTS}) != len(MUTANTS):
        raise SystemExit("test/mutants/mutants.py: two mutants share a name")
    if a.only:
        want = a.only.split(",")
        unknown = [w for w in want if w not in {m.name for m in MUTANTS}]
        if unknown:
            raise SystemExit(f"--only: no mutant named {', '.join(unknown)}")
        chosen = [m for m in MUTANTS if m.name in want]
    else:
        chosen = list(MUTANTS)

    results = {m.name: {"name": m.name, "what": m.what, "until": m.until, "why": m.why, "status": "error",
                        "killed_by": [], "detail": "not run", "seconds": 0.0} for m in chosen}
    problems = check_snippets(chosen, ROOT)

    def finish():
        report = {"mutants": [results[m.name] for m in chosen], "problems": problems,
                  "seconds": round(time.monotonic() - start, 1)}
        if a.report:
            with open(a.report, "w") as f:
                json.dump(report, f, indent=1)
        return table(chosen, results, problems, time.monotonic() - start)

    if problems:
        for p in problems:
            say(f"ERROR {p}")
        for r in results.values():
            r["detail"] = "not run: a snippet does not apply"
        return finish()

    # Readable by every uid (servers that drop privileges load the library
    # from here); the build directory sits in the copy, as build/ does in
    # the tree (the command finds the benchmarks' Python beside it).
    tmp = tempfile.mkdtemp(prefix="loopfast-mutants-")
    os.chmod(tmp, 0o755)
    src, logs = os.path.join(tmp, "src"), os.path.join(tmp, "logs")
    build = os.path.join(src, "build")
    os.makedirs(logs)
    status = 1
    try:
        say(f"mutants: {len(chosen)}; copy of the tree, build and logs in {tmp}")
        copy_tree(ROOT, src)
        run = Run(src, build, logs)
        log = os.path.join(logs, "build.log")
        rc, _, _ = run_quiet(["cmake", "-S", src, "-B", build], log)
        all_targets = targets([s for m in chosen for s in m.only])
        ok, secs = run.make(all_targets, log) if rc == 0 else (False, 0)
        if not ok:
            problems.append(f"the unmutated copy does not build (log: {log})")
            say(f"ERROR {problems[-1]}\n{tail(log)}")
            status = finish()
            return status
        say(f"built {' '.join(all_targets)} in {secs:.0f} s")

        # Every subset must pass without a mutant, or its failures prove nothing.
        # .ci/run says when this run's make test (and make test-extra's suites
        # before this one) passed on the same tree: that is the evidence, and
        # each subset is not run again unmutated (LF_MUTANTS_BASELINES=0,
        # about a quarter of the mutants' time).
        baseline = {}
        trusted = os.environ.get("LF_MUTANTS_BASELINES") == "0"
        if trusted:
            say("baselines: not run again (LF_MUTANTS_BASELINES=0: this run's make test passed on this tree)")
        for m in chosen:
            key = (tuple(m.only), tuple(sorted(m.env.items())))
            if key in baseline:
                continue
            if trusted:
                baseline[key] = None
                continue
            blog = os.path.join(logs, f"baseline-{len(baseline)}.log")
            rc, secs, timed_out, v = run.subset(m.only, m.env, m.limit_s, blog)
            good = rc == 0 and v is not None and v[1] == 0 and v[0] > 0
            baseline[key] = None if good else blog
            say(f"baseline {' '.join(m.only)}: {'passes' if good else 'FAILS'} ({secs:.0f} s)")
            if not good:
                say(tail(blog))

        # A deadline (LF_MUTANTS_DEADLINE, seconds since the epoch: .ci/run
        # gives CI's, which must end within its hour on a machine that runs
        # slow): the mutants not begun by then are not run, each reported
        # as a skip with that reason (test/skips.allow), never as killed.
        # With a deadline the list starts at a place the tree's commit
        # picks, so that the mutants a slow run leaves out are not the same
        # ones (the end of the list) every time.
        deadline = float(os.environ.get("LF_MUTANTS_DEADLINE") or "inf")
        order = list(chosen)
        if deadline != float("inf"):
            head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
            k = int(head[:8], 16) % len(order) if re.fullmatch(r"[0-9a-f]{40}\n?", head) else 0
            order = order[k:] + order[:k]
            say(f"deadline in {deadline - time.time():.0f} s: starting at mutant {k + 1} ({order[0].name}), by the commit")
        for i, m in enumerate(order, 1):
            r = results[m.name]
            if time.time() >= deadline:
                r["status"], r["detail"] = "not-run", NOT_RUN
                continue
            bad = baseline[(tuple(m.only), tuple(sorted(m.env.items())))]
            if bad:
                r["detail"] = f"its subset fails without the mutant (log: {bad})"
                say(f"[{i}/{len(chosen)}] {m.name}: ERROR {r['detail']}")
                continue
            mlog = os.path.join(logs, f"{m.name}.log")
            originals = {}
            try:
                err = apply(m, src, originals)
                if not err:
                    ok, bsecs = run.make(targets(m.only), mlog)
                    if not ok:
                        err = f"does not build (log: {mlog}): fix its replacement in test/mutants/mutants.py"
                if not err:
                    rc, secs, timed_out, v = run.subset(m.only, m.env, m.limit_s, mlog, first_failure=True)
            finally:
                for p, text in originals.items():
                    with open(p, "w") as f:
                        f.write(text)
            if err:
                r["detail"] = err
                say(f"[{i}/{len(chosen)}] {m.name}: ERROR {err}" + (f"\n{tail(mlog)}" if os.path.exists(mlog) else ""))
                continue
            r["seconds"] = round(bsecs + secs, 1)
            if timed_out:
                r["status"], r["killed_by"] = "killed-by-timeout", [f"(the subset hung past {m.limit_s} s)"]
                r["detail"] = "hung"
            elif v is None:
                r["detail"] = f"the subset printed no final line (exit status {rc}; log: {mlog})"
            elif v[1] > 0 and v[2] and all(why.startswith("TIMEOUT") for _, why in v[2]):
                r["status"], r["detail"] = "killed-by-timeout", ""
                r["killed_by"] = [f"{tid} ({why})" for tid, why in v[2]]
            elif v[1] > 0:
                r["status"], r["detail"] = "killed", ""
                r["killed_by"] = [tid for tid, why in v[2] if not why.startswith("TIMEOUT")] or [f"exit status {rc}"]
            elif rc == 0 and v[0] > 0:
                r["status"], r["detail"] = "survived", f"{v[0]} tests passed"
            else:
                r["detail"] = f"the subset exited {rc} with nothing failed (log: {mlog})"
            shown = {"killed": "killed by " + ", ".join(r["killed_by"]),
                     "killed-by-timeout": "killed ONLY BY A TIMEOUT: " + ", ".join(r["killed_by"]),
                     "survived": "SURVIVED" + (f" (expected until {m.until} lands)" if m.until else ""),
                     "error": "ERROR " + r["detail"]}[r["status"]]
            say(f"[{i}/{len(chosen)}] {m.name}: {shown} (build {bsecs:.0f} s, run {secs:.0f} s)")
            if not r["status"].startswith("killed") and not m.until:
                say(tail(mlog))
        status = finish()
        return status
    except KeyboardInterrupt:
        status = 0  # nothing to look at: remove everything
        raise
    finally:
        if a.keep:
            say(f"kept {tmp}")
        elif status and os.listdir(logs):
            shutil.rmtree(src, ignore_errors=True)
            say(f"logs kept in {logs}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def table(chosen, results, problems, seconds):
    """Prints the table; returns the exit status."""
    bad = list(problems)
    w = max([len(m.name) for m in chosen] + [6])
    say(f"\n{'mutant':{w}}  {'result':40}  killed by")
    killed = ("killed", "killed-by-timeout")
    for m in chosen:
        r = results[m.name]
        if r["status"] in killed and m.until:
            res = f"killed, but marked until {m.until}"
            bad.append(f"{m.name}: killed, but marked as expected to survive until {m.until} lands: "
                       f"remove the mark in test/mutants/mutants.py")
        elif r["status"] in killed:
            res = r["status"]
        elif r["status"] == "survived" and m.until:
            res = f"survived (expected until {m.until} lands)"
        elif r["status"] == "survived":
            res = "SURVIVED"
            bad.append(f"{m.name}: SURVIVED ({m.what}): no test in {m.only} failed")
        elif r["status"] == "not-run":
            res = "not run"
        else:
            res = "ERROR"
            bad.append(f"{m.name}: {r['detail']}")
        by = (", ".join(r["killed_by"]) if r["status"] in killed else r["detail"] if r["status"] in ("error", "not-run")
              else m.why if m.until else "")
        say(f"{m.name:{w}}  {res:40}  {by}")
    slow = [m for m in chosen if results[m.name]["status"] == "killed-by-timeout"]
    if slow:
        say(f"\nkilled only by a timeout ({len(slow)}; counted as killed, but no check caught them: "
            f"a test should, with an assertion):")
        for m in slow:
            say(f"  {m.name}: {', '.join(results[m.name]['killed_by'])}")
    say(f"\n{len(chosen)} mutants in {seconds:.0f} s: "
        f"{sum(results[m.name]['status'] in killed for m in chosen)} killed "
        f"({len(slow)} only by a timeout), "
        f"{sum(results[m.name]['status'] == 'survived' and bool(m.until) for m in chosen)} expected survivors, "
        f"{sum(results[m.name]['status'] == 'not-run' for m in chosen)} not run (the deadline), "
        f"{len(bad)} problems")
    for b in bad:
        say(f"  {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted (the tree was never touched)", file=sys.stderr)
        sys.exit(130)
