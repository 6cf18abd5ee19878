#!/usr/bin/env python3
"""Runs loopfast's test suites and decides the run from everything they say.

usage: scripts/test.sh [BUILD_DIR [ASAN_BUILD_DIR]] [--extra | --all | --only SPEC...]

The suites:
  c         each BUILD_DIR/test-* program (the C unit tests)
  e2e       pytest test/e2e, without the tests marked "extra"
  e2e-extra the tests of test/e2e marked "extra" (whole benchmark runs)
  e2e-spin  pytest test/e2e/test_compare.py with busy polling on every
            fast-path socket (back-off off, so that the spin really runs)
  compat    pytest test/compat (real programs from Debian's packages)
  asan      the C programs again, built with ASan+UBSan in ASAN_BUILD_DIR
  fuzz      test/fuzz/run.sh: each libFuzzer target (the parsers of peer
            input) built with clang in build-fuzz/ and run FUZZ_LONG_S
            seconds each; each must run at least FUZZ_MIN_RUNS inputs
  mutants   test/mutants/run.py: the library built with each deliberate
            fault of test/mutants/mutants.py, each against the subset that
            must catch it; one test per mutant, passed when it was killed
            (an expected survivor, marked with the branch that will catch
            it, is a strict expected failure). A mutant killed only by a
            time limit (its subset hung, or only tests stopped by a timeout
            failed) passes too, but is listed apart: a test should catch it
            with a check.

Which run (floors in test/floor.txt apply to the suites it runs):
  (default) c, e2e and compat: `make test` (at most 10 minutes on 2 vCPUs
            with the build, on a slow day too)
  --extra   the long fuzz, asan, e2e-spin, e2e-extra, every compat program
            sent every signal (compat-signals) and the mutants: `make
            test-extra`, which .ci/run runs after `make test`
  --all     both in one run: `make test-all`

--only runs a named subset instead (for mutants and for developers), with
no floors; each SPEC is one of
  c:PROGRAM[:TEST,...]       e.g. c:test-spin:sa_restart_read_continues
  asan:PROGRAM[:TEST,...]    the same in ASAN_BUILD_DIR (built first)
  e2e:PYTEST-ARGS            e.g. "e2e:test_compare.py -k names" (in test/e2e)
  e2e-spin:PYTEST-ARGS       the same with busy polling
  compat:PYTEST-ARGS         e.g. "compat:test_socat.py" (in test/compat)
  fuzz[:TARGET,...]          e.g. fuzz:name (test/fuzz/run.sh; targets: name, syn, ring, pass; the long run)
  mutants[:NAME,...]         all mutants, or the named ones (make test-mutants)

What fails the run, besides a failing test:
  - any exit status that disagrees with what the suite reported (a C
    program or pytest that exits non-zero with nothing failed, a summary
    line that disagrees with the per-test lines, no summary at all);
  - a suite (or a program, file or directory of one, named in
    test/floor.txt) that ran fewer tests than its floor there (a test
    skipped for a reason test/skips.allow allows counts), or a subset that
    ran no test;
  - a skip that test/skips.allow does not list with its reason (every skip
    is printed with its reason either way);
  - an expected failure that is not strict or names no issue "(issue N)"
    (pytest's mark, or a C table row's xfail), and one that passes (the
    mark must come off). Every strict expected failure is listed.

A test stopped by a time limit (the C runner's, pytest-timeout's) is
reported as failed with a reason that starts with TIMEOUT. The summary
table gives each suite's counts and wall time; the last line is
"N passed, N failed, N skipped" (CI reads it); the exit status is 0 only
when nothing failed.
"""
import argparse
import fnmatch
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
E2E = os.path.join(ROOT, "test", "e2e")
COMPAT = os.path.join(ROOT, "test", "compat")
MUTANTS = os.path.join(ROOT, "test", "mutants", "run.py")
FLOOR = os.path.join(ROOT, "test", "floor.txt")
ALLOW = os.path.join(ROOT, "test", "skips.allow")
SPIN_ENV = {"LOOPFAST_TEST_SPIN_US": "50", "LOOPFAST_SPIN_BACKOFF": "0"}
SPIN_NOT_CONNECT_WAITS = ("not connect-full and not connect-again and not connect-sndtimeo and not connect-eintr "
                          "and not connect-restart")
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
C_LIMIT_S = 1800     # a whole C program (each test has the runner's own timeout)
FUZZ = os.path.join(ROOT, "test", "fuzz", "run.sh")
FUZZ_BUILD = os.path.join(ROOT, "build-fuzz")
FUZZ_LONG_S = 30     # each fuzz target's run (libFuzzer's -max_total_time)
FUZZ_MIN_RUNS = 10000  # the fewest inputs a fuzz target must run (test/fuzz/run.sh checks)
PYTEST_LIMIT_S = 3600  # a whole pytest run (each test has pytest-timeout's)
MUTANTS_LIMIT_S = 3600  # every mutant (each subset has its mutant's limit_s); CI allows 90 min in all
SUITES = ("c", "e2e", "e2e-spin", "compat", "asan", "fuzz", "e2e-extra", "compat-signals", "mutants")
ISSUE = re.compile(r"\(issue \d+\)")  # what an expected failure's reason must name


class Suite:
    def __init__(self, name):
        self.name = name
        self.results = {}  # test id -> (outcome, reason); outcomes: passed failed skipped xfailed
        self.problems = []  # failures that are not a test's: exit statuses, missing summaries
        self.xfail_marks = []  # (test id, reason)
        self.timeout_kills = []  # mutants killed only by a time limit
        self.seconds = 0.0  # wall time of everything run for this suite

    def add(self, tid, outcome, reason=""):
        self.results[tid] = (outcome, reason)

    def count(self, outcome, part=""):
        return sum(1 for t, (o, _) in self.results.items() if o == outcome and in_part(t, part))

    def ran(self, part=""):
        return sum(self.count(o, part) for o in ("passed", "failed", "xfailed"))


def in_part(tid, part):
    """Whether test id tid is in part (a floor's key: SUITE/PROGRAM,
    SUITE/FILE or SUITE/DIR): the id is the part itself or goes on with
    ':' or '/' after it, so that c/test-rio does not take in
    c/test-rio-rq:..., nor e2e/test_apps.py e2e/test_apps.pyx."""
    return not part or tid == part or (tid.startswith(part) and tid[len(part)] in ":/")


def timed(suite, fn, *args, **kw):
    """Runs fn(suite, ...), adding its wall time to the suite's."""
    start = time.monotonic()
    try:
        return fn(suite, *args, **kw)
    finally:
        suite.seconds += time.monotonic() - start


def banner(text):
    print(f"== {text}", flush=True)


def stop_group(p, grace=0):
    """Stops p's process group: with a grace period, SIGINT first (so that
    p stops what it started and cleans up), SIGKILL after grace seconds."""
    if grace:
        try:
            os.killpg(p.pid, signal.SIGINT)
            p.wait(timeout=grace)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stream(argv, env=None, cwd=None, limit=None, grace=0):
    """Runs argv with its output (stdout and stderr) shown as it comes;
    returns (exit status, output lines). Stopped (stop_group) after `limit`
    seconds, or when this run is interrupted."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd, text=True,
                         errors="replace", start_new_session=True)
    lines, start = [], time.monotonic()
    timer = None
    if limit:
        import threading
        timer = threading.Timer(limit, lambda: stop_group(p, grace))
        timer.start()
    try:
        for line in p.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
        rc = p.wait()
    finally:
        if timer:
            timer.cancel()
        if p.poll() is None:
            stop_group(p, grace)
            p.wait()
    if limit and time.monotonic() - start >= limit:
        lines.append(f"(killed after {limit} s)")
        rc = rc or -9
    return rc, lines


C_LINE = re.compile(r"^(ok  |FAIL|skip|xfail|XPASS) (\S+?)(?::? (.*))?$")
C_SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped(?:, (\d+) xfailed)?$")


def run_c(suite, program, tests=(), env=None, name=None):
    """One C test program: every test's line, the summary, the exit status.
    (Any program that prints the C runner's lines will do: the fuzz
    script does, with name "" so that its tests are fuzz/<target>.)"""
    if name is None:
        name = os.path.basename(program)
    banner(f"{suite.name} {name or os.path.basename(program)}{' ' + ' '.join(tests) if tests else ''}")
    e = dict(os.environ, **(env or {}))
    rc, lines = stream([program, *tests], env=e, limit=C_LIMIT_S)
    seen = {"ok  ": 0, "FAIL": 0, "skip": 0, "xfail": 0, "XPASS": 0}
    summary = None
    for line in lines:
        m = C_LINE.match(line)
        if m:
            kind, test, reason = m.group(1), m.group(2), m.group(3) or ""
            seen[kind] += 1
            tid = f"{suite.name}/{name}:{test}" if name else f"{suite.name}/{test}"
            if kind == "ok  ":
                suite.add(tid, "passed")
            elif kind == "FAIL":
                # The runner's "timed out after N s": in the harness's form.
                suite.add(tid, "failed", re.sub(r"^timed out after", "TIMEOUT after", reason))
            elif kind == "skip":
                suite.add(tid, "skipped", reason)
            elif kind == "xfail":
                suite.add(tid, "xfailed", reason)
                suite.xfail_marks.append((tid, reason))
            else:
                suite.add(tid, "failed", "passes, but is marked as an expected failure")
                suite.xfail_marks.append((tid, reason))
            if kind in ("xfail", "XPASS") and not ISSUE.search(reason):
                suite.problems.append(f"{tid}: an expected failure must name its issue, "
                                      f"\"<the fault> (issue N)\", in its table row: '{reason}'")
        s = C_SUMMARY.match(line)
        if s:
            summary = [int(x or 0) for x in s.groups()]
    where = f"{suite.name}/{name}" if name else suite.name
    if summary is None:
        suite.problems.append(f"{where}: no summary line (exit status {rc})")
        return
    counted = [seen["ok  "], seen["FAIL"] + seen["XPASS"], seen["skip"], seen["xfail"]]
    if summary != counted:
        suite.problems.append(f"{where}: summary {summary} disagrees with the per-test lines {counted}")
    if rc != (1 if counted[1] else 0):
        suite.problems.append(f"{where}: exit status {rc} with {counted[1]} failed")
    if sum(counted) == 0:
        suite.problems.append(f"{where}: ran no test")


def c_programs(build):
    return sorted(os.path.join(build, f) for f in os.listdir(build)
                  if f.startswith("test-") and os.access(os.path.join(build, f), os.X_OK)
                  and os.path.isfile(os.path.join(build, f)))


def run_c_suite(suite, build, env=None):
    progs = c_programs(build) if os.path.isdir(build) else []
    if not progs:
        suite.problems.append(f"{suite.name}: no test-* program in {build}")
    for p in progs:
        run_c(suite, p, env=env)


def run_pytest(suite, build, args, env=None, cwd=None):
    """pytest with the report conftest.py writes: every test's outcome and
    skip reason, every expected-failure mark, and pytest's exit status."""
    banner(f"{suite.name} (pytest {' '.join(args)})")
    fd, report = tempfile.mkstemp(prefix="loopfast-pytest-", suffix=".json")
    os.close(fd)
    e = dict(os.environ, LOOPFAST_BUILD=os.path.abspath(build), LOOPFAST_TEST_REPORT=report, **(env or {}))
    try:
        # --durations: the slowest tests, for whoever keeps make test
        # within its ten minutes
        rc, _ = stream([sys.executable, "-m", "pytest", "-q", "--durations=15", *args], env=e, cwd=cwd or E2E,
                       limit=PYTEST_LIMIT_S)
        try:
            with open(report) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = None
    finally:
        os.unlink(report)
    if not doc:
        suite.problems.append(f"{suite.name}: pytest wrote no report (exit status {rc})")
        return
    for tid, r in doc["tests"].items():
        suite.add(f"{suite.name}/{tid}", r["outcome"], r["reason"])
    marked = {m["id"] for m in doc["xfail_marks"]}
    for m in doc["xfail_marks"]:
        suite.xfail_marks.append((f"{suite.name}/{m['id']}", m["reason"]))
    for tid, r in doc["tests"].items():
        if r["outcome"] == "xfailed" and tid not in marked:
            suite.problems.append(f"{suite.name}/{tid}: an expected failure without a strict mark "
                                  f"(pytest.xfail() in the test?)")
    for c in doc["collect_errors"]:
        suite.problems.append(f"{suite.name}/{c}: collection error")
    failed = sum(1 for r in doc["tests"].values() if r["outcome"] == "failed")
    if rc not in (0, 1) or (rc == 1) != bool(failed or doc["collect_errors"]):
        suite.problems.append(f"{suite.name}: pytest exit status {rc} with {failed} failed")
    if not doc["tests"]:
        suite.problems.append(f"{suite.name}: pytest ran no test")


def run_mutants(suite, names=""):
    """test/mutants/run.py (it builds its own copies): one test per mutant.
    Killed: passed. Survived: failed, unless marked as expected to survive
    until a branch lands (a strict expected failure, listed; killed while
    marked: failed, so that the mark comes off). A snippet that no longer
    applies, a mutant that does not build, or a subset that fails without
    any mutant: failed."""
    banner(f"{suite.name}{' ' + names if names else ''}")
    fd, report = tempfile.mkstemp(prefix="loopfast-mutants-", suffix=".json")
    os.close(fd)
    try:
        # Interrupted, it gets SIGINT first: it stops its subset and
        # removes its copy of the tree.
        rc, _ = stream([sys.executable, MUTANTS, "--report", report, *(["--only", names] if names else [])],
                       limit=MUTANTS_LIMIT_S, grace=60)
        try:
            with open(report) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = None
    finally:
        os.unlink(report)
    if not doc:
        suite.problems.append(f"{suite.name}: test/mutants/run.py wrote no report (exit status {rc})")
        return
    failed = 0
    for m in doc["mutants"]:
        tid = f"{suite.name}/{m['name']}"
        mark = f"expected to survive until branch {m['until']} lands: {m['why']} (issue 13)" if m["until"] else None
        if mark:
            suite.xfail_marks.append((tid, mark))
        if m["status"] == "killed-by-timeout":
            suite.timeout_kills.append((tid, ", ".join(m["killed_by"])))
        if m["status"] in ("killed", "killed-by-timeout") and not mark:
            suite.add(tid, "passed")
        elif m["status"] in ("killed", "killed-by-timeout"):
            suite.add(tid, "failed", "killed, but marked as expected to survive: remove the mark")
        elif m["status"] == "survived" and mark:
            suite.add(tid, "xfailed", mark)
        elif m["status"] == "survived":
            suite.add(tid, "failed", f"SURVIVED: {m['what']}")
        elif m["status"] == "not-run":
            suite.add(tid, "skipped", m["detail"])
        else:
            suite.add(tid, "failed", m["detail"])
        failed += suite.results[tid][0] == "failed"
    suite.problems += [f"{suite.name}: {p}" for p in doc["problems"]]
    if rc != (1 if failed or doc["problems"] else 0):
        suite.problems.append(f"{suite.name}: test/mutants/run.py exit status {rc} with {failed} failed")
    if not doc["mutants"]:
        suite.problems.append(f"{suite.name}: no mutant ran")


def build_asan(asan):
    """Only the C test programs (test/test-*.c) and what they link: the
    suite runs nothing else (a third less to build than the whole tree)."""
    banner("building under ASan+UBSan")
    tests = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "test")) if f.startswith("test-") and f.endswith(".c"))
    for argv in (["cmake", "-S", ROOT, "-B", asan, "-DLF_SANITIZE=ON", "-DLF_WERROR=ON"],
                 ["cmake", "--build", asan, "-j2", "--target", *tests]):
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode:
            print(p.stdout[-4000:])
            return f"ASan build failed: {' '.join(argv)} exited {p.returncode}"
    return None


def read_table(path):
    """[(line number, line)] of a committed table, without blank lines and
    comments (lines that start with #)."""
    with open(path) as f:
        return [(n, line.strip()) for n, line in enumerate(f, 1) if line.strip() and not line.lstrip().startswith("#")]


def check_floors(suites, allow):
    """The floors of the suites that ran (a floor of a suite this run does
    not include, the mutants' in `make test`, is not checked). A test
    counts when it ran (passed, failed, or failed as a strict expected
    failure) or was skipped for a reason test/skips.allow allows: a floor
    catches tests that vanish (not collected, not built, a selection that
    takes none), and an allowed skip is a test that is there and says why
    this machine cannot run it."""
    problems = []
    by_name = {s.name: s for s in suites}
    for n, line in read_table(FLOOR):
        key, _, num = line.rpartition(" ")
        key = key.strip()
        name, _, part = key.partition("/")
        if name not in SUITES or not num.isdigit():
            problems.append(f"test/floor.txt:{n}: want 'SUITE[/PART] N' with a suite of {', '.join(SUITES)}, "
                            f"got '{line}'")
            continue
        if name not in by_name:
            continue
        s = by_name[name]
        ran = s.ran(key if part else "") + sum(1 for t, (o, r) in s.results.items()
                                              if o == "skipped" and in_part(t, part and key)
                                              and skip_allowed(t, r, allow))
        if ran < int(num):
            problems.append(f"{key}: {ran} tests ran (or skipped as test/skips.allow allows), fewer than "
                            f"the floor of {num} (test/floor.txt:{n})")
    return problems


def allowed_skips():
    rows = []
    for n, line in read_table(ALLOW):
        pattern, sep, reason = line.partition(" | ")
        if not sep or not reason.strip():
            raise SystemExit(f"test/skips.allow:{n}: want 'TEST-ID-GLOB | REASON', got '{line}'")
        rows.append((pattern.strip(), reason.strip()))
    return rows


def skip_allowed(tid, reason, allow):
    return any(fnmatch.fnmatchcase(tid, p) and reason.startswith(r) for p, r in allow)


def check_skips(suites, allow):
    problems = []
    skips = [(t, r) for s in suites for t, (o, r) in s.results.items() if o == "skipped"]
    if skips:
        print("\nskipped, with their reasons:")
    for tid, reason in skips:
        ok = skip_allowed(tid, reason, allow)
        print(f"  {tid}: {reason}{'' if ok else '   <- NOT in test/skips.allow'}")
        if not ok:
            problems.append(f"{tid}: skipped ({reason}), and test/skips.allow does not allow it")
    return problems


def run_fuzz(suite, seconds, targets=()):
    banner(f"{suite.name}: {seconds} s per target, at least {FUZZ_MIN_RUNS} inputs each")
    run_c(suite, FUZZ, [FUZZ_BUILD, str(seconds), *targets], env={"FUZZ_MIN_RUNS": str(FUZZ_MIN_RUNS)}, name="")


def run_asan(suite, asan):
    err = build_asan(asan)
    if err:
        suite.problems.append(err)
    else:
        run_c_suite(suite, asan, ASAN_ENV)


def default_signals():
    """Signals ignored by whoever started the run (a background job
    ignores SIGINT and SIGQUIT, nohup SIGHUP) are ignored by every program
    a test starts, since an ignored disposition survives exec: a plain
    program would then outlive a signal that ends it from a terminal, and
    the signal tests compare against that. Restored here, as a terminal
    has them."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM):  # SIGPIPE: Python ignores it itself; subprocess restores it for children
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)


def main():
    default_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("asan", nargs="?", default="build-asan")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--extra", action="store_true", help="the long fuzz and the mutants (make test-extra)")
    which.add_argument("--all", action="store_true", help="every suite, the long fuzz (make test-all)")
    which.add_argument("--only", action="append", default=[], metavar="SPEC")
    a = ap.parse_args()
    build = os.path.join(ROOT, a.build) if not os.path.isabs(a.build) else a.build
    asan = os.path.join(ROOT, a.asan) if not os.path.isabs(a.asan) else a.asan
    if not os.path.isdir(build):  # (a second SPEC without its own --only lands here, and tests then wrote into it)
        ap.error(f"{a.build}: no such build directory; each SPEC takes its own --only")
    start = time.monotonic()
    suites = {}

    def suite(name):
        return suites.setdefault(name, Suite(name))

    if not a.only and not a.extra:  # make test, and the first part of make test-all
        timed(suite("c"), run_c_suite, build)
        # Tests marked "extra" (whole benchmark runs, builds of Go programs
        # and of older versions, the bench tools, the supervisor's, the
        # IPv6 runs of the comparison matrix) wait for make test-extra, to
        # keep make test within ten minutes on a slow day (test/README.md).
        timed(suite("e2e"), run_pytest, build, [E2E, "-m", "not extra"])
        timed(suite("compat"), run_pytest, build, [COMPAT], cwd=COMPAT)
    if a.extra or a.all:
        timed(suite("fuzz"), run_fuzz, FUZZ_LONG_S)
        timed(suite("asan"), run_asan, asan)
        # Busy polling spins on fast-path sockets; a connect that waits on a
        # full accept queue (2 s each, SYN retransmits) is a TCP socket
        # until its handshake ends, so those scenarios run once, in e2e.
        # Both families (the IPv6 runs are marked extra for make test's
        # time), not the shm tier's matrix (e2e-extra's).
        timed(suite("e2e-spin"), run_pytest, build, [os.path.join(E2E, "test_compare.py"),
                                                    "-k", "not test_same_as_tcp_shm and " + SPIN_NOT_CONNECT_WAITS],
              SPIN_ENV)
        timed(suite("e2e-extra"), run_pytest, build, [E2E, "-m", "extra"])
        # Every compat program with every signal (make test sends each the
        # signals that tell its handlers apart: test/compat/test_signals.py).
        timed(suite("compat-signals"), run_pytest, build, ["test_signals.py"], {"LF_COMPAT_ALL_SIGNALS": "1"},
              cwd=COMPAT)
        timed(suite("mutants"), run_mutants)
    asan_built = None  # for --only asan:...: built once, or why not
    for spec in a.only:
        kind, _, rest = spec.partition(":")
        if kind == "c" and not rest:  # the whole C suite, as make test runs it
            timed(suite(kind), run_c_suite, build)
        elif kind in ("c", "asan"):
            prog, _, tests = rest.partition(":")
            if not prog:
                raise SystemExit(f"--only {spec}: name a program (c:test-api, asan:test-api)")
            d = build if kind == "c" else asan
            if kind == "asan":
                if asan_built is None:
                    asan_built = timed(suite(kind), lambda _s: build_asan(asan)) or ""
                if asan_built:
                    suite(kind).problems.append(asan_built)
                    continue
            path = os.path.join(d, prog)
            if not os.access(path, os.X_OK):
                suite(kind).problems.append(f"{spec}: no program {path}")
                continue
            timed(suite(kind), run_c, path, [t for t in tests.split(",") if t],
                  ASAN_ENV if kind == "asan" else None)
        elif kind in ("e2e", "e2e-spin"):
            timed(suite(kind), run_pytest, build, shlex.split(rest), SPIN_ENV if kind == "e2e-spin" else None)
        elif kind == "compat":
            timed(suite(kind), run_pytest, build, shlex.split(rest), cwd=COMPAT)
        elif kind == "fuzz":
            timed(suite(kind), run_fuzz, FUZZ_LONG_S, [t for t in rest.split(",") if t])
        elif kind == "mutants":
            timed(suite(kind), run_mutants, rest)
        else:
            raise SystemExit(f"--only {spec}: want c:, asan:, e2e:, e2e-spin:, compat:, fuzz or mutants")

    all_suites = list(suites.values())
    problems = [p for s in all_suites for p in s.problems]
    allow = allowed_skips()
    if a.only:
        if not any(s.ran() for s in all_suites):
            problems.append("the subset ran no test")
    else:
        problems += check_floors(all_suites, allow)
    problems += check_skips(all_suites, allow)

    marks = [m for s in all_suites for m in s.xfail_marks]
    print(f"\nstrict expected failures ({len(marks)}): each must fail; the run fails the day one passes")
    for tid, reason in marks:
        print(f"  {tid}: {reason}")
    slow = [k for s in all_suites for k in s.timeout_kills]
    if slow:
        print(f"\nmutants killed only by a timeout ({len(slow)}): counted as killed, but no check caught them; "
              f"a test should")
        for tid, by in slow:
            print(f"  {tid}: {by}")
    print("\nsuite      passed failed skipped xfailed  seconds")
    for s in all_suites:
        print(f"{s.name:10} {s.count('passed'):6} {s.count('failed'):6} {s.count('skipped'):7} "
              f"{s.count('xfailed'):7} {s.seconds:8.0f}")
    failures = [f"{t}{': ' + r if r else ''}" for s in all_suites for t, (o, r) in s.results.items()
                if o == "failed"]
    if failures or problems:
        print("\nfailed:")
        for f in failures + problems:
            print(f"  {f}")
    passed = sum(s.count("passed") for s in all_suites)
    failed = len(failures) + len(problems)
    skipped = sum(s.count("skipped") for s in all_suites)
    xfailed = sum(s.count("xfailed") for s in all_suites)
    print(f"\n{xfailed} xfailed (strict, listed above); took {time.monotonic() - start:.0f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
