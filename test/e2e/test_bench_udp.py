"""End-to-end tests of `loopfast bench udp`: every server design receives
exactly the datagrams that were sent, runs end, and bad input is refused
with one line. Timings are never asserted. The io_uring (rio-*) designs run
in their own test cases, which skip only where io_uring is absent or
disabled (conftest.need_io_uring says which); the others never skip."""
import json
import os
import subprocess

import pytest

from conftest import need_io_uring

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = pytest.mark.extra

BUILD = os.environ.get("LOOPFAST_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
LOOPFAST = os.path.join(BUILD, "loopfast")

DESIGNS = ["simple", "recvmmsg", "epoll", "epoll-mt", "rio-posted", "rio-polled",
           "rio-polled-mt", "rio-sqpoll", "rio-event", "rio-port", "rio-port-mt"]
PLAIN = [d for d in DESIGNS if not d.startswith("rio-")]
RIO = [d for d in DESIGNS if d.startswith("rio-")]


def bench(*args, timeout=120):
    return subprocess.run([LOOPFAST, "bench", "udp", *args], capture_output=True, text=True,
                          timeout=timeout)


def split(plain, rio):
    """Parameters: the designs without io_uring, and those with it."""
    return pytest.mark.parametrize("designs", [plain, rio], ids=["plain", "rio"])


def need(designs):
    if any(d.startswith("rio-") for d in designs.split(",")):
        need_io_uring()


@split(",".join(PLAIN), ",".join(RIO))
@pytest.mark.parametrize("size", [64, 1024])
def test_drain_every_design_receives_exactly_what_was_sent(tmp_path, size, designs):
    need(designs)
    out = tmp_path / "udp.json"
    r = bench("--mode", "drain", "--size", str(size), "--count", "3000", "--repeat", "1",
              "--threads", "2", "--designs", designs, "--json", str(out))
    assert r.returncode == 0, r.stderr
    runs = json.loads(out.read_text())["runs"]
    assert sorted(x["design"] for x in runs) == sorted(designs.split(","))
    for x in runs:
        assert x["error"] == 0, x
        assert x["end_marker_seen"], x
        assert (x["sent"], x["received"], x["lost"]) == (3000, 3000, 0), x
    for d in designs.split(","):
        assert d in r.stdout


@split("epoll-mt", "rio-port-mt,rio-event")
def test_drain_with_work_and_more_threads(tmp_path, designs):
    need(designs)
    out = tmp_path / "udp.json"
    r = bench("--count", "2000", "--repeat", "2", "--work", "50", "--threads", "3",
              "--designs", designs, "--json", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 2 * len(designs.split(","))
    for x in data["runs"]:
        assert x["received"] == 2000 and x["lost"] == 0, x
        assert x["threads"] == (1 if x["design"] == "rio-event" else 3)


@split("simple", "rio-polled,rio-port")
def test_rate_accounts_for_every_datagram(tmp_path, designs):
    """In rate mode datagrams may be lost, but every one is accounted for by
    the socket's kernel drop counter (which also counts an end marker dropped
    while the queue was full), and the end marker still ends the run."""
    need(designs)
    out = tmp_path / "udp.json"
    r = bench("--mode", "rate", "--time", "0.3", "--repeat", "1", "--generators", "2",
              "--designs", designs, "--json", str(out))
    assert r.returncode == 0, r.stderr
    runs = json.loads(out.read_text())["runs"]
    assert sorted(x["design"] for x in runs) == sorted(designs.split(","))
    for x in runs:
        assert x["sent"] > 0
        assert x["end_marker_seen"], x
        assert x["sent"] - x["received"] <= x["lost"] <= x["sent"] - x["received"] + x["markers_sent"], x


@split("recvmmsg,epoll", "rio-polled")
def test_global_json_flag_prints_json(designs):
    need(designs)
    r = subprocess.run([LOOPFAST, "--json", "bench", "udp", "--count", "500", "--repeat", "1",
                        "--designs", designs], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {x["design"] for x in data["summary"]} == set(designs.split(","))


@split("epoll,simple", "epoll,rio-polled")
def test_plot(tmp_path, designs):
    need(designs)
    import matplotlib  # noqa: F401  (scripts/deps.sh installs it)
    png = tmp_path / "udp.png"
    r = bench("--count", "500", "--repeat", "1", "--size", "64,1024",
              "--designs", designs, "--plot", str(png))
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
