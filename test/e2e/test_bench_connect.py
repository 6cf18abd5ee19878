"""End-to-end tests of `loopfast bench connect`: every path completes its
connections without errors, the fast-path rows really took the fast path
(the benchmark's own sample of kernel state), the rows that must not did
not, the JSON holds what the table shows, and bad input is refused with one
line. Timings are never asserted: rates are only checked to be positive."""
import json
import os
import subprocess

import pytest

BUILD = os.environ.get("LOOPFAST_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
LOOPFAST = os.path.join(BUILD, "loopfast")
PATHS = ["tcp", "fast", "client-only", "unix", "tcp+flood", "fast+flood"]


def bench(*args, timeout=180):
    return subprocess.run([LOOPFAST, "bench", "connect", *args], capture_output=True, text=True, timeout=timeout)


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
