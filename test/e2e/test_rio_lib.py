"""Registered I/O is a product of its own: libloopfast-rio.so.0 defines the
lf_rio_* calls and nothing else, so a program that links it for RIO keeps
libc's socket calls (checked with dlsym/dladdr in the program itself, and
from the kernel: its TCP connection to a loopfast server stays plain TCP at
both ends, while the same program linked with libloopfast and opted in is
on the fast path). Programs built against libloopfast.so.0 when it held
lf_rio_* itself still find them, and `make install` installs the
library, its header, loopfast-rio.pc and a man page per call."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, LOOPFAST, ROOT, echo_server, need_io_uring, readline, stop, wait_fast_path, wait_tcp

RIO_LIB = BUILD / "libloopfast-rio.so.0"
CLIENT = ROOT / "test" / "e2e" / "riolib" / "rio_client.c"

# Echoes on a listener of its own (127.0.0.1, port 0), under `loopfast run`:
# it opts in, so an opted-in client gets the fast path.
SERVER = echo_server(backlog=8)


def interposed():
    """The libc names libloopfast interposes, from its version script."""
    text = re.sub(r"/\*.*?\*/", "", (ROOT / "src" / "loopfast.map").read_text(), flags=re.S)
    names = re.search(r"global:(.*?)local:", text, re.S).group(1)
    return [n for n in re.split(r"[\s;]+", names) if n and not n.startswith("lf_")]


def exported(lib):
    """The dynamic symbols lib defines (nm -D --defined-only)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return sorted(l.split()[-1] for l in out.splitlines() if l.strip())


def needed(obj):
    """obj's DT_NEEDED entries."""
    out = subprocess.run(["readelf", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", out)


def cc(out, *args):
    p = subprocess.run(["cc", "-o", str(out), *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out


def client(tmp_path, fast):
    """rio_client built against the build: libloopfast-rio alone, or (fast)
    with libloopfast too."""
    libs = ["-DLF_FAST", "-lloopfast", "-lloopfast-rio"] if fast else ["-lloopfast-rio"]
    return cc(tmp_path / ("rio_client_fast" if fast else "rio_client"), "-Wall", "-Wextra", "-Werror", CLIENT,
              f"-I{ROOT / 'include'}",
              f"-L{BUILD}", f"-Wl,-rpath,{BUILD}", *libs)


def binds(exe, names, env=None):
    """{name: file of the object that defines what exe's calls to name bind to}."""
    p = subprocess.run([str(exe), "0", *names], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 0, p.stderr
    return dict(l.split(" ", 1) for l in p.stdout.splitlines())


def test_rio_library_defines_only_the_rio_calls(build):
    header = (ROOT / "include" / "loopfast" / "rio.h").read_text()
    declared = sorted(set(re.findall(r"^(?:int|void \*)\s*(lf_rio_\w+)\(", header, re.M)))
    assert len(declared) >= 20, declared
    assert exported(RIO_LIB) == declared
    assert not [n for n in needed(RIO_LIB) if "loopfast" in n], needed(RIO_LIB)
    # Nothing of RIO is left in the fast path's library but its dependency.
    assert not [n for n in exported(BUILD / "libloopfast.so.0") if n.startswith("lf_rio")]
    assert "libloopfast-rio.so.0" in needed(BUILD / "libloopfast.so.0")


def test_every_rio_call_has_a_man_page(build):
    page = (ROOT / "man" / "lf_rio.3").read_text()
    for name in exported(RIO_LIB):
        alias = ROOT / "man" / f"{name}.3"
        assert alias.exists(), f"man {name} finds nothing"
        assert alias.read_text() == ".so man3/lf_rio.3\n", alias
        assert f".BI \"{'void *' if name == 'lf_rio_buf_ptr' else 'int '}{name}(" in page, name


@pytest.mark.parametrize("fast", [False, True], ids=["rio-only", "with-libloopfast"])
def test_rio_program_keeps_libc_socket_calls(build, tmp_path, fast):
    """A program linked with libloopfast-rio alone: every libc name that
    loopfast interposes (libloopfast's, and the preload's exec family)
    binds to libc. The control, linked with libloopfast too: each name
    libloopfast defines binds to libloopfast."""
    names = interposed()
    got = binds(client(tmp_path, fast), names)
    assert sorted(got) == sorted(names)
    lib = "libloopfast.so.0" if fast else "libc.so.6"
    want = set(names) & set(exported(BUILD / "libloopfast.so.0")) if fast else set(names)
    assert {"socket", "connect", "accept4", "close", "write", "recv", "epoll_wait"} <= want, want
    wrong = {n: got[n] for n in want if os.path.basename(got[n]) != lib}
    assert not wrong, f"not bound to {lib}: {wrong}"


@pytest.mark.parametrize("fast", [False, True], ids=["rio-only", "with-libloopfast"])
def test_rio_program_talks_plain_tcp_to_a_loopfast_server(build, tmp_path, fast):
    """The RIO program's connection to a server under `loopfast run` is
    plain TCP at both ends (kernel state), and its RIO send and receive
    work over it; opted in and linked with libloopfast (the control), the
    same program is on the fast path."""
    need_io_uring()
    exe = client(tmp_path, fast)
    srv = subprocess.Popen([str(LOOPFAST), "run", "--", sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                           text=True)
    cli = None
    try:
        port = int(readline(srv))
        cli = subprocess.Popen([str(exe), str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, LOOPFAST_ENABLE="1"))
        assert readline(cli) == "connected\n"
        if fast:
            wait_fast_path(cli, srv.pid, port)
        else:
            wait_tcp(cli, srv.pid, port)
        cli.stdin.close()
        assert readline(cli) == "echoed\n"
        assert cli.wait(timeout=30) == 0
    finally:
        stop(cli, srv)


@pytest.mark.parametrize("case", ["uds", "shm", "tcp"])
def test_rio_refuses_a_socket_on_the_shm_tier(build, tmp_path, case):
    """A request queue on a fast-path connection whose two ends asked for
    the shared-memory tier is refused with -EPROTOTYPE (docs/rio.md: its
    bytes are in rings io_uring cannot see), found through the public
    getsockopt(SOL_LOOPFAST, LOOPFAST_TIER), which says 1 (LF_TIER_SHM).
    The same program's RIO echo works on the Unix-stream fast path (uds:
    the client did not ask), and over plain TCP to a server without
    loopfast (tcp: the client asked; the query says 0). All from the
    kernel: the Unix stream, or TCP, at both ends, and the memfd of the
    rings mapped by both processes only when both asked."""
    need_io_uring()
    from test_shm import maps_memfd
    exe = client(tmp_path, True)
    srv = subprocess.Popen(([] if case == "tcp" else [str(LOOPFAST), "run", "--tier", "shm", "--"]) +
                           [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    cli = None
    try:
        port = int(readline(srv))
        env = dict(os.environ, LOOPFAST_ENABLE="1", **({"RIO_CLIENT_SHM": "1"} if case != "uds" else {}))
        cli = subprocess.Popen([str(exe), str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        if case != "uds":  # LF_TIER_SHM only with the rings: the client has the server's answer
            assert readline(cli) == ("tier 1\n" if case == "shm" else "tier 0\n")
        assert readline(cli) == "connected\n"
        if case == "tcp":
            wait_tcp(cli, srv.pid, port)
        else:
            wait_fast_path(cli, srv.pid, port)
        if case == "shm":
            assert maps_memfd(cli.pid) >= 1 and maps_memfd(srv.pid) >= 1, "not on the tier"
        cli.stdin.close()
        if case == "shm":
            assert cli.wait(timeout=30) == 1
            assert cli.stderr.read() == "rio_client: lf_rio_rq_create: Protocol wrong type for socket\n"
        else:
            assert readline(cli) == "echoed\n"
            assert (maps_memfd(cli.pid), maps_memfd(srv.pid)) == (0, 0)
            assert cli.wait(timeout=30) == 0
    finally:
        stop(cli, srv)


def test_programs_built_against_the_old_library_find_rio(build, tmp_path):
    """libloopfast.so.0 used to define lf_rio_*: a program linked against
    it (here against a stand-in of that soname whose calls fail with -42)
    and run with today's build gets the real calls, through libloopfast's
    dependency on libloopfast-rio."""
    need_io_uring()
    old = tmp_path / "old"
    old.mkdir()
    (tmp_path / "stub.c").write_text("int lf_rio_open(void *r) { return -42; }\n"
                                     "int lf_rio_close(void *r) { return -42; }\n")
    cc(old / "libloopfast.so.0", "-shared", "-fPIC", "-Wl,-soname,libloopfast.so.0", tmp_path / "stub.c")
    (old / "libloopfast.so").symlink_to("libloopfast.so.0")
    (tmp_path / "app.c").write_text(
        "#include <loopfast/rio.h>\n#include <stdio.h>\n"
        "int main(void){struct lf_rio *r; int a = lf_rio_open(&r), b = a ? a : lf_rio_close(r);"
        "printf(\"%d %d\\n\", a, b); return 0;}\n")
    app = cc(tmp_path / "app", tmp_path / "app.c", f"-I{ROOT / 'include'}", f"-L{old}", "-lloopfast")
    assert needed(app) == ["libloopfast.so.0", "libc.so.6"]
    run = lambda lib: subprocess.run([str(app)], capture_output=True, text=True, timeout=30,  # noqa: E731
                                     env=dict(os.environ, LD_LIBRARY_PATH=str(lib))).stdout.split()
    assert run(old) == ["-42", "-42"]
    assert run(BUILD) == ["0", "0"]


def test_install_rio_alone_and_with_the_fast_path(build, tmp_path):
    """make install's RIO: the library, its header, loopfast-rio.pc and the
    man pages. A program built with `pkg-config loopfast-rio` needs only
    libloopfast-rio and keeps libc's connect; one built with `pkg-config
    loopfast` (which requires loopfast-rio) gets both."""
    prefix = tmp_path / "prefix"
    p = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (prefix / "include" / "loopfast" / "rio.h").exists()
    assert list(prefix.rglob("man3/lf_rio_dequeue.3"))
    pc = next(prefix.rglob("loopfast-rio.pc"))
    env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent))

    def flags(pkg):
        return subprocess.run(["pkg-config", "--cflags", "--libs", "--define-variable=prefix=" + str(prefix), pkg],
                              capture_output=True, text=True, env=env, check=True).stdout.split()

    rio = cc(tmp_path / "rio", CLIENT, *flags("loopfast-rio"))
    both = cc(tmp_path / "both", "-DLF_FAST", CLIENT, *flags("loopfast"))
    assert not [n for n in needed(rio) if n.startswith("libloopfast") and n != "libloopfast-rio.so.0"]
    assert "libloopfast-rio.so.0" in needed(rio) and "libloopfast.so.0" in needed(both)
    libdir = next(p for p in flags("loopfast-rio") if p.startswith("-L"))[2:]
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    assert os.path.basename(binds(rio, ["connect"], env)["connect"]) == "libc.so.6"
    assert os.path.basename(binds(both, ["connect"], env)["connect"]) == "libloopfast.so.0"
