"""`loopfast bench stream` (bench/stream): every path measured, each on
the path it names (the bench proves fast and fast+shm from the kernel at
both ends and reports a run that is not as unavailable, which fails here),
every byte checked by the reader; bad options fail with one line."""
import json
import subprocess

import pytest

from conftest import LOOPFAST

pytestmark = pytest.mark.timeout(300)
PATHS = ["tcp", "fast", "fast+shm", "unix"]


def bench(*args):
    return subprocess.run([str(LOOPFAST), "bench", "stream", *args], capture_output=True, text=True, timeout=280)


def test_every_path_measured_and_every_byte_checked(build, tmp_path):
    out = tmp_path / "stream.json"
    r = bench("--sizes", "1,64,65536", "--bytes", "3000000", "--max-msgs", "20000", "--rounds", "2",
              "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
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


@pytest.mark.parametrize("args,says", [
    (["--paths", "tcp,bogus"], "bogus"),
    (["--sizes", "0"], "--sizes"),
    (["--rounds", "99"], "--rounds"),
    (["--what", "1"], "unknown option"),
])
def test_bad_options(build, args, says):
    r = bench(*args)
    assert r.returncode == 2 and says in r.stderr, r.stdout + r.stderr
