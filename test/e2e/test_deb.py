"""The Debian packages (debian/, `make deb`): built from this tree by
scripts/deb.sh (lintian: no error, no warning), installed with apt-get,
used from the installed paths only and purged. Installed: a program built
against libloopfast-dev (pkg-config, loopfast.h, libloopfast.so.0) serves
a client that opts in with the socket option under /usr/bin/loopfast run
--per-socket (the preload from /usr/lib/<multiarch>/), and the system
python3 imports python3-loopfast and opts one socket in; the kernel shows
both ends of each on the fast path, and each process's memory map shows
the installed libraries, not the build tree's. Purged: dpkg knows none of
the packages and none of their files is left (nor byte-code, nor
ldconfig's cache entries). The packages are purged even when the test
fails. 95 to 140 s on 2 shared vCPUs (most of it the build), so it runs
with make test-extra (suite e2e-extra)."""
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, readline, stop, wait_paths

PACKAGES = re.findall(r"^Package: (\S+)$", (ROOT / "debian/control").read_text(), re.M)
CASES = ROOT / "test/e2e/progs/pkg_cases.py"
EX = ROOT / "examples/c"
SYSTEM = "/usr/sbin:/usr/bin:/sbin:/bin"


def env():
    """The machine's own: nothing of the build tree (no preload, library or
    Python path of it), the system's PATH."""
    drop = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LOOPFAST_ENABLE", "LOOPFAST_PRELOAD", "PYTHONPATH", "PKG_CONFIG_PATH")
    e = {k: v for k, v in os.environ.items() if k not in drop}
    e["PATH"] = SYSTEM
    return e


def sh(*cmd, timeout=120, check=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env(), timeout=timeout)
    assert not check or p.returncode == 0, f"{cmd}: exit status {p.returncode}\n{p.stdout}{p.stderr}"
    return p


def installed(pkg):
    p = sh("dpkg-query", "-W", "-f=${Status}", pkg, check=False)
    return p.returncode == 0 and "installed" in p.stdout.split()


def start(cmd):
    return subprocess.Popen([str(c) for c in cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env())


def mapped(pid, name):
    """The paths of the files named name (or name.VERSION) that pid has
    mapped: {libdir/libloopfast.so.0.1.0} for libloopfast.so.0."""
    with open(f"/proc/{pid}/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    return {p for p in paths if os.path.basename(p) == name or os.path.basename(p).startswith(name + ".")}


def c_pair(tmp, libdir):
    """server_api built against the installed libloopfast-dev, and the
    socket-option client under the installed `loopfast run --per-socket`:
    on the fast path, both ends, with the installed libraries mapped."""
    flags = sh("pkg-config", "--cflags", "--libs", "loopfast").stdout.split()
    sh("cc", "-Wall", "-Wextra", "-Werror", "-o", tmp / "server_api", EX / "server_api.c", *flags)
    sh("cc", "-Wall", "-Wextra", "-Werror", "-o", tmp / "client_sockopt", EX / "client_sockopt.c")
    srv = start([tmp / "server_api"])
    cl = None
    try:
        line = readline(srv).split()
        assert line[:2] == ["listening", "on"], line
        port = int(line[2])
        cl = start(["/usr/bin/loopfast", "run", "--per-socket", "--", tmp / "client_sockopt", port])
        assert readline(cl).strip() == "connected: fast path"
        assert readline(srv).strip() == "accepted: fast path"
        cl.stdin.write("hello\n")
        cl.stdin.flush()
        assert readline(cl).strip() == "echo: hello"
        wait_paths(cl.pid, srv.pid, port, fast=1, plain=0)
        assert mapped(cl.pid, "libloopfast-preload.so") == {f"{libdir}/libloopfast-preload.so"}
        assert {os.path.dirname(p) for p in mapped(srv.pid, "libloopfast.so.0")} == {libdir}
        assert {os.path.dirname(p) for p in mapped(srv.pid, "libloopfast-rio.so.0")} == {libdir}
    finally:
        stop(cl, srv)


def python_pair(libdir):
    """The system python3 imports python3-loopfast (not the tree's python/)
    and opts one client in: that one on the fast path, the other on TCP."""
    p = start(["/usr/bin/loopfast", "run", "--per-socket", "--", "/usr/bin/python3", CASES, "blocking"])
    try:
        out = json.loads(readline(p))
        assert out["module"] == "/usr/lib/python3/dist-packages/loopfast/__init__.py", out
        assert (out["echo_fast"], out["client_fast"], out["accepted_fast"]) == ("fast", True, True), out
        assert (out["echo_plain"], out["client_plain"], out["accepted_plain"]) == ("plain", False, False), out
        wait_paths(p.pid, p.pid, out["port"], fast=1, plain=1)
        assert mapped(p.pid, "libloopfast-preload.so") == {f"{libdir}/libloopfast-preload.so"}
    finally:
        stop(p)


def owned(paths):
    """The paths that some installed package owns (dpkg-query -S)."""
    out = sh("dpkg-query", "-S", *paths, check=False).stdout
    return {line.split(": ", 1)[1] for line in out.splitlines() if ": " in line}


@pytest.mark.extra
@pytest.mark.timeout(900)
def test_deb_installs_runs_and_purges(tmp_path):
    assert PACKAGES and "loopfast" in PACKAGES and "python3-loopfast" in PACKAGES, PACKAGES
    there = [p for p in PACKAGES if installed(p)]
    if there:
        pytest.fail(f"{there} already installed: this test installs and purges them (apt-get purge {' '.join(there)})")
    out = tmp_path / "deb"
    built = sh("bash", ROOT / "scripts/deb.sh", out, timeout=600).stdout
    # lintian (deb.sh prints its verdict): no error, no warning.
    assert "deb: lintian" in built, built
    tags = [line for line in built.splitlines() if line.startswith(("E: ", "W: "))]
    assert not tags, "lintian: " + "\n".join(tags)
    debs = [next(out.glob(f"{p}_*.deb")) for p in PACKAGES]
    libdir = "/usr/lib/" + sh("dpkg-architecture", "-qDEB_HOST_MULTIARCH").stdout.strip()
    files = set()
    try:
        sh("apt-get", "install", "-y", "-q", *debs, timeout=300)
        for p in PACKAGES:
            files |= set(sh("dpkg", "-L", p).stdout.split()) - {"/."}
        for f in ("/usr/bin/loopfast", f"{libdir}/libloopfast-preload.so", f"{libdir}/libloopfast.so.0",
                  "/usr/include/loopfast.h", "/usr/include/loopfast/rio.h",
                  "/usr/lib/python3/dist-packages/loopfast/__init__.py"):
            assert f in files, f"{f}: in no package"
        # The benchmarks' Python, found beside the command (share/loopfast/bench).
        usage = sh("/usr/bin/loopfast", "bench", "app", "--help").stdout
        assert usage.startswith("usage: loopfast bench app"), usage
        c_pair(tmp_path, libdir)
        python_pair(libdir)
    finally:
        purge = sh("apt-get", "purge", "-y", "-q", *PACKAGES, timeout=300, check=False)
    assert purge.returncode == 0, purge.stdout + purge.stderr
    for p in PACKAGES:
        listed = sh("dpkg", "-L", p, check=False)
        assert listed.returncode != 0 and not listed.stdout, f"{p}: dpkg still lists {listed.stdout!r}"
        assert not installed(p), p
    left = {f for f in files if os.path.lexists(f)}
    left -= owned(sorted(left)) if left else set()  # directories that other packages hold too
    assert not left, f"left after purge: {sorted(left)}"
    assert not os.path.exists("/usr/lib/python3/dist-packages/loopfast"), "byte-code left"
    cache = sh("ldconfig", "-p").stdout
    assert f"{libdir}/libloopfast" not in cache, "ldconfig's cache still names the libraries"
