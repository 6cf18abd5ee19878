"""`loopfast bench stream` (bench/stream): every path measured, each on
the path it names (the bench proves fast and fast+shm from the kernel at
both ends and reports a run that is not as unavailable, which fails here),
every byte checked by the reader; bad options fail with one line."""
import json
import subprocess

import pytest

from conftest import LOOPFAST

# make test-extra's (make test within ten minutes on a slow day: test/README.md)
pytestmark = [pytest.mark.timeout(300), pytest.mark.extra]
PATHS = ["tcp", "fast", "fast+shm", "unix", "shm"]  # shm: the floor, a busy-polled shared ring


def bench(*args):
    return subprocess.run([str(LOOPFAST), "bench", "stream", *args], capture_output=True, text=True, timeout=280)


# A whole benchmark run (every path, every size: 19 s in make test here): make
# test-extra, as the other whole benchmark runs, to keep make test within
# ten minutes.
@pytest.mark.extra
def test_every_path_measured_and_every_byte_checked(build, tmp_path):
    out, png = tmp_path / "stream.json", tmp_path / "stream.png"
    r = bench("--sizes", "1,64,65536", "--bytes", "3000000", "--max-msgs", "20000", "--rounds", "2",
              "--json", str(out), "--plot", str(png))
    assert r.returncode == 0, r.stdout + r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "--plot wrote no PNG"
    doc = json.loads(out.read_text())
    rows = {(row["size"], row["path"]): row for row in doc["rows"]}
    assert set(rows) == {(s, p) for s in (1, 64, 65536) for p in PATHS}, rows.keys()
    for key, row in rows.items():
        assert "unavailable" not in row, (key, row)
        assert row["runs"] == 2 and row["bad_bytes"] == 0, (key, row)
        assert row["gb_per_s_min"] <= row["gb_per_s"] <= row["gb_per_s_max"], (key, row)
        assert row["msgs_per_s"] > 0 and row["cpu_s_per_gb"] > 0, (key, row)
    for s in (1, 64, 65536):
        assert rows[(s, "tcp")]["vs_tcp"] == 1
        # Against fast round by round: every other path, from both rounds.
        assert "vs_fast" not in rows[(s, "fast")], rows[(s, "fast")]
        for p in PATHS:
            if p != "fast":
                v = rows[(s, p)]["vs_fast"]
                assert 0 < v["min"] <= v["median"] <= v["max"], (s, p, v)
        assert f"{s:<9} fast+shm " in r.stdout.split("against fast")[1], r.stdout


@pytest.mark.parametrize("args,says", [
    (["--paths", "tcp,bogus"], "bogus"),
    (["--sizes", "0"], "--sizes"),
    (["--rounds", "99"], "--rounds"),
    (["--what", "1"], "unknown option"),
    (["--idle", "0"], "--idle"),
    (["--plot", "x.png"], "--plot needs --json"),
    (["--idle", "2", "--json", "x.json", "--plot", "x.png"], "--plot needs --json"),
])
def test_bad_options(build, args, says):
    r = bench(*args)
    assert r.returncode == 2 and says in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("burst", [0, 300000])
def test_idle_connections_memory_from_the_kernel(build, tmp_path, burst):
    """--idle: every path held (fast and fast+shm proved from the kernel at
    both ends, or the row is unavailable and the command fails); on the
    tier each process maps one memfd per connection and holds at most
    64 KiB of each, never used or after carrying `burst` bytes each way."""
    out = tmp_path / "idle.json"
    r = bench("--idle", "40", "--burst", str(burst), "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    rows = {row["path"]: row for row in doc["rows"]}
    assert set(rows) == {"tcp", "fast", "fast+shm"} and doc["burst"] == burst, doc
    for path in ("tcp", "fast"):
        assert rows[path]["memfd_maps"] == [0, 0], rows[path]
    shm = rows["fast+shm"]
    assert shm["memfd_maps"] == [40, 40], shm
    assert all(0 < b <= 65536 for b in shm["memfd_rss_per_conn"]), shm
