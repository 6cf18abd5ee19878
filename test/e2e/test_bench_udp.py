"""End-to-end tests of `loopfast bench udp`: every server design receives
exactly the datagrams that were sent, runs end, and bad input is refused
with one line. Timings are never asserted."""
import json
import os
import subprocess

import pytest

BUILD = os.environ.get("LOOPFAST_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
LOOPFAST = os.path.join(BUILD, "loopfast")

DESIGNS = ["simple", "recvmmsg", "epoll", "epoll-mt", "rio-posted", "rio-polled",
           "rio-polled-mt", "rio-sqpoll", "rio-event", "rio-port", "rio-port-mt"]


def bench(*args, timeout=120):
    return subprocess.run([LOOPFAST, "bench", "udp", *args], capture_output=True, text=True,
                          timeout=timeout)


def io_uring_available():
    r = subprocess.run([LOOPFAST, "bench", "udp", "--designs", "rio-polled", "--count", "10",
                        "--repeat", "1"], capture_output=True, text=True, timeout=60)
    return r.returncode == 0


@pytest.fixture(scope="module")
def rio_ok():
    if not io_uring_available():
        pytest.skip("io_uring is not available here")


@pytest.mark.parametrize("size", [64, 1024])
def test_drain_every_design_receives_exactly_what_was_sent(tmp_path, rio_ok, size):
    out = tmp_path / "udp.json"
    r = bench("--mode", "drain", "--size", str(size), "--count", "3000", "--repeat", "1",
              "--threads", "2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    runs = json.loads(out.read_text())["runs"]
    assert sorted(x["design"] for x in runs) == sorted(DESIGNS)
    for x in runs:
        assert x["error"] == 0, x
        assert x["end_marker_seen"], x
        assert (x["sent"], x["received"], x["lost"]) == (3000, 3000, 0), x
    for d in DESIGNS:
        assert d in r.stdout


def test_drain_with_work_and_more_threads(tmp_path, rio_ok):
    out = tmp_path / "udp.json"
    r = bench("--count", "2000", "--repeat", "2", "--work", "50", "--threads", "3",
              "--designs", "epoll-mt,rio-port-mt,rio-event", "--json", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 6
    for x in data["runs"]:
        assert x["received"] == 2000 and x["lost"] == 0, x
        assert x["threads"] == (1 if x["design"] == "rio-event" else 3)


def test_rate_accounts_for_every_datagram(tmp_path, rio_ok):
    """In rate mode datagrams may be lost, but every one is accounted for by
    the socket's kernel drop counter (which also counts an end marker dropped
    while the queue was full), and the end marker still ends the run."""
    out = tmp_path / "udp.json"
    r = bench("--mode", "rate", "--time", "0.3", "--repeat", "1", "--generators", "2",
              "--designs", "simple,rio-polled,rio-port", "--json", str(out))
    assert r.returncode == 0, r.stderr
    for x in json.loads(out.read_text())["runs"]:
        assert x["sent"] > 0
        assert x["end_marker_seen"], x
        assert x["sent"] - x["received"] <= x["lost"] <= x["sent"] - x["received"] + x["markers_sent"], x


def test_global_json_flag_prints_json(rio_ok):
    r = subprocess.run([LOOPFAST, "--json", "bench", "udp", "--count", "500", "--repeat", "1",
                        "--designs", "recvmmsg,rio-polled"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {x["design"] for x in data["summary"]} == {"recvmmsg", "rio-polled"}


def test_plot(tmp_path, rio_ok):
    pytest.importorskip("matplotlib")
    png = tmp_path / "udp.png"
    r = bench("--count", "500", "--repeat", "1", "--size", "64,1024",
              "--designs", "epoll,rio-polled", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args", [
    ["--designs", "nope"],
    ["--size", "8"],
    ["--size", "abc"],
    ["--mode", "fast"],
    ["--threads", "0"],
    ["--count", "-5"],
    ["--time", "0"],
    ["--work"],
    ["--bogus", "1"],
    ["extra"],
])
def test_bad_input_is_one_clear_line(args):
    r = bench(*args, timeout=10)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopfast: bench udp"), r.stderr
    assert r.stdout == ""


def test_help_lists_designs():
    r = bench("--help", timeout=10)
    assert r.returncode == 0
    for d in DESIGNS:
        assert d in r.stdout
