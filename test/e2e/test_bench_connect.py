"""End-to-end tests of `loopfast bench connect`: every path completes its
connections without errors, the fast-path rows really took the fast path
(the benchmark's own sample of kernel state), the rows that must not did
not, the JSON holds what the table shows, and bad input is refused with one
line. The bench's verdict is itself checked against the kernel: while it
runs, the kernel shows fast-path connections (connected Unix pairs bound to
loopfast's name for its server's port) for the fast row and only TCP ones
for client-only, and under a library that lies about the
path (bench_kernel.liar) the fast row reports 0%. Timings are never
asserted: rates are only checked to be positive."""
import json
import os
import subprocess
import time

import pytest

from bench_kernel import liar, liar_env, listening_port, to_port
from conftest import process_tree

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = pytest.mark.extra

BUILD = os.environ.get("LOOPFAST_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
LOOPFAST = os.path.join(BUILD, "loopfast")
PATHS = ["tcp", "fast", "client-only", "unix", "tcp+flood", "fast+flood"]


def bench(*args, timeout=180):
    return subprocess.run([LOOPFAST, "bench", "connect", *args], capture_output=True, text=True, timeout=timeout)


# A whole benchmark run (every path: 11 s in make test here): make
# test-extra, as the other whole benchmark runs, to keep make test within
# ten minutes.
@pytest.mark.extra
def test_every_path_completes_and_takes_its_path(tmp_path):
    out = tmp_path / "connect.json"
    r = bench("--clients", "1,20", "--time", "0.3", "--warmup", "0.05", "--repeat", "2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "connect" and doc["config"]["repeat"] == 2
    rows = {(x["path"], x["clients"]): x for x in doc["rows"]}
    assert set(rows) == {(p, c) for p in PATHS for c in (1, 20)}
    for (path, clients), x in rows.items():
        assert len(x["runs"]) == 2 and all(v > 0 for v in x["runs"]), x
        assert x["min"] <= x["median"] <= x["max"], x
        assert x["errors"] == 0, x
        if path == "fast":
            # Every sampled end, both sides, but for a port the kernel gave
            # again to this row's server less than a second after a plain
            # row's: the client process remembers that destination as
            # having no rendezvous for a second (README), and its
            # connections take plain TCP at both ends.
            assert x["fast_share"] >= 0.99, x
        if path in ("tcp", "client-only", "tcp+flood"):
            assert x["fast_share"] in (0, -1), x  # never the fast path
        if path.endswith("+flood"):
            assert x["junk_hellos"] > 0 or path == "tcp+flood", x  # the flood was in place
        assert (path, str(clients)) in {(l.split()[1], l.split()[0]) for l in r.stdout.splitlines()
                                        if l.strip() and l.split()[0].isdigit()}, r.stdout
    assert rows[("tcp", 1)]["vs_tcp"] == 1.0


def test_tcp_unix_floor_row_completes(tmp_path):
    """tcp+unix (asked for by name: the floor of a fast path that keeps
    the TCP handshake, each byte over a Unix connection) completes every
    connection, none checked for a fast path (it has none)."""
    out = tmp_path / "floor.json"
    r = bench("--paths", "tcp,tcp+unix", "--clients", "1,20", "--time", "0.3", "--warmup", "0", "--repeat", "2",
              "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = {(x["path"], x["clients"]): x for x in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(p, c) for p in ("tcp", "tcp+unix") for c in (1, 20)}
    for x in rows.values():
        assert x["errors"] == 0 and all(v > 0 for v in x["runs"]), x
    assert rows[("tcp+unix", 20)]["fast_share"] == -1, rows


def test_global_json_goes_to_stdout():
    r = subprocess.run([LOOPFAST, "--json", "bench", "connect", "--paths", "tcp,fast", "--clients", "5",
                        "--time", "0.2", "--warmup", "0", "--repeat", "1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["path"] for x in doc["rows"]] == ["tcp", "fast"]
    assert "conn/s" in r.stderr  # the table, on stderr


@pytest.mark.parametrize("args, words", [
    (["--paths", "tcp,udp"], "udp"),
    (["--clients", "0"], "--clients"),
    (["--clients", "abc"], "--clients"),
    (["--time", "0"], "--time"),
    (["--repeat", "0"], "--repeat"),
    (["--plot", "x.png"], "--plot"),
    (["--bogus", "1"], "--bogus"),
    (["--time"], "--time"),
])
def test_bad_input_is_one_line(args, words):
    r = bench(*args, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], r.stderr


def watch(path, seconds=3.0, env=None):
    """Runs one row of `path` for `seconds` with 20 clients, looking at the
    kernel while it runs: returns (its JSON row, the most fast-path and the
    most established TCP connections to its server's port seen at once)."""
    p = subprocess.Popen([LOOPFAST, "--json", "bench", "connect", "--paths", path, "--clients", "20", "--time",
                          str(seconds), "--warmup", "0", "--repeat", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    port, most_fast, most_tcp = None, 0, 0
    try:
        while p.poll() is None:
            port = port or listening_port([k for k in process_tree(p.pid) if k != p.pid])
            if port:
                fast, tcp = to_port(port)
                most_fast, most_tcp = max(most_fast, fast), max(most_tcp, tcp)
            time.sleep(0.02)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert port, "the bench's server was never seen listening"
    (row,) = json.loads(out)["rows"]
    assert row["path"] == path and row["errors"] == 0, row
    return row, most_fast, most_tcp


def test_fast_row_verdict_agrees_with_the_kernel():
    """The fast row says 100%; the kernel shows fast-path connections to
    its server while it runs."""
    row, fast, _ = watch("fast")
    assert row["fast_share"] >= 0.99, row
    assert fast > 0, "the bench said fast; the kernel showed no fast-path connection to its server"


def test_client_only_verdict_agrees_with_the_kernel():
    """client-only (the server did not opt in) says 0%; the kernel shows
    TCP connections to its server and no fast-path one."""
    row, fast, tcp = watch("client-only")
    assert row["fast_share"] == 0, row
    assert fast == 0 and tcp > 0, (fast, tcp)


def test_a_lying_library_does_not_fool_the_bench(tmp_path):
    """Under a library that opts nothing in yet says every connection is on
    the fast path, the fast row took plain TCP (the kernel shows TCP and no
    Unix pair) and the bench says so: 0%, not loopfast's 100%."""
    # As long as the other rows' watch: `ss -p` walks every process's fds,
    # and on a loaded machine one walk could outlast a one-second run.
    row, fast, tcp = watch("fast", env=liar_env(liar(tmp_path)))
    assert fast == 0 and tcp > 0, (fast, tcp)
    assert row["fast_share"] == 0, row
