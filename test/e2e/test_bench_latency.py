"""End-to-end tests of `loopfast bench latency`: a tiny bench of every row,
the JSON it writes, the table, the plot, bad input and timeouts. No test
asserts a timing: the figures are only checked for being consistent. Every
row must run ("ok"); the only row allowed to be unavailable is an io_uring
style where this machine's io_uring is absent or disabled."""
import ctypes
import json
import os
import platform
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from bench_kernel import liar, liar_env, unix_pairs
from conftest import io_uring_unavailable, process_tree

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = pytest.mark.extra

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOOPFAST_BUILD", ROOT / "build"))
LOOPFAST = BUILD / "loopfast"

STYLES = ["block", "epoll", "spin", "uring", "uring-poll"]
TRANSPORTS = ["tcp", "fastpath", "fastpath-spin", "uds", "shm", "fastpath-shm", "fastpath-shm-spin"]
TINY = ["--count", "200", "--warmup", "20", "--timeout", "20"]
FIGURES = ["mean_us", "p50_us", "p99_us", "p999_us", "max_us", "min_us", "jitter_us",
           "round_trips_per_s", "cpu_us_per_round_trip"]


def runs(style, transport):
    """The combinations the benchmark runs (the others make no sense)."""
    if transport == "shm":
        return style == "spin"
    if transport in ("fastpath-spin", "fastpath-shm-spin"):
        return style in ("block", "epoll")
    if transport == "fastpath-shm":
        return style not in ("uring", "uring-poll")
    return True


def bench(*args, timeout=120, env=None, preexec_fn=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([str(LOOPFAST), *args], capture_output=True, text=True, timeout=timeout, env=e,
                          preexec_fn=preexec_fn)


def deny_io_uring():
    """In the child before exec: a seccomp filter that makes io_uring_setup
    fail with EPERM, as on a machine where io_uring is disabled."""
    libc = ctypes.CDLL(None, use_errno=True)
    # BPF: load the syscall number; io_uring_setup (425) -> ERRNO(EPERM); else allow.
    prog = [(0x20, 0, 0, 0), (0x15, 0, 1, 425), (0x06, 0, 0, 0x00050000 | 1), (0x06, 0, 0, 0x7FFF0000)]
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(buf))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, fbuf, 0, 0):  # NO_NEW_PRIVS, SECCOMP filter
        os._exit(99)


def check_row_ran(row):
    """A row ran, or it is an io_uring row on a machine without io_uring
    (identified precisely, and said so in the row's reason)."""
    if row["status"] == "ok":
        return True
    missing = io_uring_unavailable()
    assert row["style"].startswith("uring") and missing, row
    assert row["status"] == "unavailable" and "io_uring_queue_init" in row["reason"], (missing, row)
    return False


def check_figures(f):
    for k in FIGURES:
        assert isinstance(f[k], (int, float)), k
        assert f[k] >= 0, k
    for k in FIGURES[:-1]:
        assert f[k] > 0, k
    assert f["min_us"] <= f["p50_us"] <= f["p99_us"] <= f["p999_us"] <= f["max_us"]
    assert f["min_us"] <= f["mean_us"] <= f["max_us"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One tiny run of every row, two repeats, kept for the tests below."""
    out = tmp_path_factory.mktemp("lat") / "latency.json"
    r = bench("bench", "latency", *TINY, "--repeat", "2", "--json", str(out))
    return r, json.loads(out.read_text())


def test_every_row_present_with_figures_or_reason(tiny):
    r, doc = tiny
    assert r.returncode == 0, r.stderr
    rows = {(x["style"], x["transport"]): x for x in doc["rows"]}
    expected = [(s, t) for s in STYLES for t in TRANSPORTS if runs(s, t)]
    assert list(rows) == expected
    for key, row in rows.items():
        if not check_row_ran(row):
            assert "median" not in row
            continue
        check_figures(row["median"])
        check_figures(row["min_over_repeats"])
        check_figures(row["max_over_repeats"])
        assert len(row["repeats"]) == 2
        for rep in row["repeats"]:
            check_figures(rep)
        for k in FIGURES:
            assert row["min_over_repeats"][k] <= row["median"][k] <= row["max_over_repeats"][k]
        cdf = row["cdf"]
        assert cdf[0][0] == 0 and cdf[-1][0] == 100
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(cdf, cdf[1:]))
        assert isinstance(row["latency_reduction_pct"], (int, float))
        assert isinstance(row["jitter_reduction_pct"], (int, float))
        assert isinstance(row["p50_reduction_pct"], (int, float))
    base = doc["base"]
    assert rows[(base["style"], base["transport"])]["latency_reduction_pct"] == 0


def test_json_machine_and_options(tiny):
    _, doc = tiny
    assert doc["schema"] == "loopfast-bench-latency/1"
    m = doc["machine"]
    assert m["cpu_model"] and m["kernel"].startswith("Linux") and m["cpus"] >= 1
    o = doc["options"]
    assert o["styles"] == STYLES and o["transports"] == TRANSPORTS
    assert (o["size"], o["count"], o["warmup"], o["repeat"]) == (64, 200, 20, 2)
    assert o["pin"] == (m["cpus"] >= 2)
    assert doc["sockperf"] == []


def test_fastpath_rows_are_really_on_the_fast_path(tiny):
    """Every fast-path row ran on the fast path: the bench checks both ends
    of its connection and reports a row that is not as "unavailable" (its
    reason says "not on the fast path"), which fails here."""
    _, doc = tiny
    fast = [row for row in doc["rows"] if row["transport"].startswith("fastpath")]
    assert len(fast) == 12, fast  # fastpath 5 styles, -spin 2, -shm 3 (no io_uring), -shm-spin 2
    for row in fast:
        check_row_ran(row)


def test_fastpath_row_is_a_unix_pair_in_the_kernel():
    """While a fast-path row's sender is stuck after connecting, the kernel
    shows its one connection as a Unix stream pair between the bench's two
    processes (the bench's own verdict is not asked)."""
    p = subprocess.Popen([str(LOOPFAST), "--json", "bench", "latency", "--count", "100", "--warmup", "10",
                          "--repeat", "1", "--timeout", "20", "--styles", "block", "--transports", "fastpath"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, LOOPFAST_BENCH_LATENCY_STALL="sender"))
    try:
        deadline, pairs = time.monotonic() + 15, []
        while not pairs and time.monotonic() < deadline and p.poll() is None:
            kids = [k for k in process_tree(p.pid) if k != p.pid]
            pairs = unix_pairs(kids) if len(kids) == 2 else []
            time.sleep(0.05)
        assert len(pairs) == 1, pairs
    finally:
        p.kill()
        p.communicate(timeout=30)


def test_a_lying_library_does_not_fool_the_bench(tmp_path):
    """Under a library that opts nothing in yet says every connection is on
    the fast path, the fast-path rows ran on plain TCP, and the bench says
    so: unavailable, "not on the fast path", never a fast-path figure."""
    r = bench("--json", "bench", "latency", *TINY, "--repeat", "1", "--styles", "block",
              "--transports", "tcp,fastpath,fastpath-spin", env=liar_env(liar(tmp_path)))
    assert r.returncode == 0, r.stderr
    rows = {x["transport"]: x for x in json.loads(r.stdout)["rows"]}
    assert rows["tcp"]["status"] == "ok", rows["tcp"]
    for t in ("fastpath", "fastpath-spin"):
        assert rows[t]["status"] == "unavailable" and "not on the fast path" in rows[t]["reason"], rows[t]


def test_table_lists_every_row():
    r = bench("bench", "latency", *TINY, "--repeat", "1", "--styles", "block,spin", "--transports", "tcp,uds,shm")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = [line for line in lines if line.startswith("style")]
    assert len(header) == 1
    for col in ["mean", "p50", "p99", "p99.9", "max", "jitter", "RT/s", "lat.red", "jit.red", "CPU/RT"]:
        assert col in header[0].split()
    rows = [line.split()[:2] for line in lines[lines.index(header[0]) + 1:] if line.strip()]
    assert rows[:5] == [["block", "tcp"], ["block", "uds"], ["spin", "tcp"], ["spin", "uds"], ["spin", "shm"]]
    assert "not run (n/a)" in r.stdout  # block shm


def test_global_json_flag_prints_json():
    r = bench("--json", "bench", "latency", *TINY, "--repeat", "1", "--styles", "spin", "--transports", "uds")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(x["style"], x["transport"], x["status"]) for x in doc["rows"]] == [("spin", "uds", "ok")]


def test_no_pin():
    r = bench("--json", "bench", "latency", *TINY, "--repeat", "1", "--styles", "block", "--transports", "tcp",
              "--no-pin")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["options"]["pin"] is False and doc["options"]["cpus"] == [-1, -1]
    assert doc["rows"][0]["status"] == "ok"


def test_no_spin_backoff_is_recorded():
    r = bench("--json", "bench", "latency", *TINY, "--repeat", "1", "--styles", "block",
              "--transports", "fastpath-spin", "--no-spin-backoff", "--spin-us", "20")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["options"]["spin_backoff"] is False and doc["options"]["spin_us"] == 20
    assert doc["rows"][0]["status"] == "ok", doc["rows"][0]


def test_size_is_honoured_and_large_messages_arrive_whole():
    r = bench("--json", "bench", "latency", "--count", "50", "--warmup", "5", "--repeat", "1", "--size", "200000",
              "--transports", "tcp,uds,shm")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["options"]["size"] == 200000
    assert len(doc["rows"]) == 11
    for row in doc["rows"]:
        check_row_ran(row)


@pytest.mark.parametrize("args, words", [
    (["--styles", "foo"], "unknown style 'foo'"),
    (["--transports", "tcp,bar"], "unknown transport 'bar'"),
    (["--size", "7"], "--size needs a number from 8"),
    (["--count", "0"], "--count needs a number from 1"),
    (["--count", "12abc"], "--count needs a number"),
    (["--warmup", "-1"], "--warmup needs a number"),
    (["--repeat", "0"], "--repeat needs a number from 1"),
    (["--timeout", ""], "--timeout needs a number"),
    (["--size"], "--size needs a value"),
    (["--frobnicate", "1"], "unknown option '--frobnicate'"),
    (["extra"], "unexpected argument 'extra'"),
    (["--styles", "block", "--transports", "shm"], "no row to run"),
])
def test_bad_input_one_clear_line(args, words):
    start = time.monotonic()
    r = bench("bench", "latency", *args, timeout=20)
    assert r.returncode != 0
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("loopfast: ") and words in lines[0], lines[0]
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("who", ["echoer", "sender"])
def test_stuck_row_times_out_and_the_rest_runs(who):
    start = time.monotonic()
    r = bench("--json", "bench", "latency", "--count", "100", "--warmup", "10", "--repeat", "1", "--timeout", "1",
              "--styles", "block,spin", "--transports", "tcp", env={"LOOPFAST_BENCH_LATENCY_STALL": who})
    assert time.monotonic() - start < 15
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for row in doc["rows"]:
        assert row["status"] == "unavailable" and "timed out after 1 s" in row["reason"], row
    # No child is left behind (forked children carry the parent's command line).
    ps = subprocess.run(["pgrep", "-f", "--count 100 --warmup 10 --repeat 1 --timeout 1 "], capture_output=True,
                        text=True)
    assert ps.stdout == ""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the seccomp filter uses x86_64 syscall numbers")
def test_io_uring_disabled_rows_are_unavailable():
    r = bench("--json", "bench", "latency", *TINY, "--repeat", "1", "--transports", "tcp,uds", preexec_fn=deny_io_uring)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for row in doc["rows"]:
        if row["style"].startswith("uring"):
            assert row["status"] == "unavailable", row
            assert "io_uring_queue_init" in row["reason"] and "not permitted" in row["reason"], row
        else:
            assert row["status"] == "ok", row


def test_plot_writes_a_png(tmp_path):
    import matplotlib  # noqa: F401  (scripts/deps.sh installs it)
    png, js = tmp_path / "lat.png", tmp_path / "lat.json"
    r = bench("bench", "latency", *TINY, "--repeat", "1", "--styles", "block,spin", "--transports", "tcp,fastpath,shm",
              "--plot", str(png), "--json", str(js))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20000
    assert json.loads(js.read_text())["rows"]


@pytest.mark.extra  # a whole sockperf run (9 s): make test-extra's
def test_compare_sockperf():
    assert shutil.which("sockperf"), "sockperf is not installed (scripts/deps.sh installs it)"
    r = bench("--json", "bench", "latency", *TINY, "--repeat", "1", "--styles", "block",
              "--transports", "tcp,fastpath,uds,fastpath-shm-spin", "--compare-sockperf", timeout=180)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    sp = {x["transport"]: x for x in doc["sockperf"]}
    assert list(sp) == ["tcp", "unix", "fastpath", "fastpath-shm-spin"]
    assert sp["tcp"]["status"] == "ok", sp["tcp"]
    assert sp["tcp"]["p50_rtt_us"] > 0 and sp["tcp"]["p99_rtt_us"] >= sp["tcp"]["p50_rtt_us"]
    assert "--full-rtt" in sp["tcp"]["command"]
    assert sp["tcp"]["ours"]["style"] == "block" and sp["tcp"]["ours"]["transport"] == "tcp"
    # The fast-path run must run, on the fast path (the bench reads both
    # sockperf processes' sockets from /proc while they run).
    assert sp["fastpath"]["status"] == "ok", sp["fastpath"]
    assert sp["fastpath"]["p50_rtt_us"] > 0
    assert sp["fastpath"]["command"].startswith("loopfast run -- sockperf server")
    assert sp["fastpath"]["ours"]["transport"] == "fastpath" and doc["rows"][1]["status"] == "ok", doc["rows"]
    # Under the shm tier with spinning: on the rings (the client's maps,
    # read from /proc while it runs), against our block row of that transport.
    # sockperf's table of send times has room for --mps times (-t + 1 s)
    # messages; at its default rate (600,000 a second) a tier run faster
    # than 1.1 us a round trip filled it and sockperf stopped ("_seqN >
    # m_maxSequenceNo", docs/shm.md "Unmodified programs": no byte out of
    # place), so every run gives it room.
    tier = sp["fastpath-shm-spin"]
    assert all(x["command"].endswith("--full-rtt --mps 4000000") for x in sp.values()), sp
    assert tier["status"] == "ok", tier
    assert tier["command"].startswith("loopfast run --tier shm --spin-us 50 -- sockperf"), tier
    assert tier["p50_rtt_us"] > 0
    assert tier["ours"]["transport"] == "fastpath-shm-spin" and tier["ours"]["style"] == "block", tier
    # The Unix-socket reference needs a sockperf that takes a socket path
    # (Debian 12's does not: it refuses the address).
    assert sp["unix"]["status"] == "ok" or "Invalid address" in sp["unix"]["reason"], sp["unix"]
    if sp["unix"]["status"] == "ok":
        assert sp["unix"]["p50_rtt_us"] > 0
