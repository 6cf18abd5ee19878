"""The loopfast command: bad input, static programs, the environment that
`loopfast run` sets, status, installation for C consumers."""
import os
import shutil
import subprocess
import time
import sys

import pytest

import kernel
from conftest import BUILD, LOOPFAST, PROBE, readline, stop, wait_fast_path, wait_status, wrap, new_netns

# A client that connects, prints its local port, and holds the connection
# until its stdin closes; then it checks one echoed byte.
HOLDING_CLIENT = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(c.getsockname()[1], flush=True)
sys.stdin.read()
c.sendall(b"x")
assert c.recv(1) == b"x"
"""


@pytest.mark.parametrize("args", [
    [], ["frobnicate"], ["--bogus"], ["run"], ["run", "--"], ["run", "/nonexistent/program"],
    ["run", "--spin-us"], ["run", "--spin-us", "lots", "true"], ["run", "--spin-us", "-5", "true"],
    ["run", "--spin-us", "99999999", "true"], ["run", "--what", "true"], ["status", "extra"],
    ["bench"], ["bench", "nothing"],
])
def test_bad_input_one_line_nonzero(build, args):
    p = subprocess.run([str(LOOPFAST), *args], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.stdout == "" and 1 <= len(lines) <= 8, p.stderr
    assert "loopfast" in lines[0] or "usage" in lines[0]


def test_json_errors_are_json(build):
    import json
    p = subprocess.run([str(LOOPFAST), "--json", "frobnicate"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "unknown command" in json.loads(p.stdout)["error"]


def test_run_passes_exit_status_and_args(build):
    p = subprocess.run([str(LOOPFAST), "run", "--", "sh", "-c", 'echo "$0 $1"; exit 3', "a", "b c"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and p.stdout == "a b c\n"


def test_static_program_runs_supervised(build, tmp_path):
    """A static program runs under the seccomp supervisor (issue 21; its
    connections are test_supervisor.py's): no warning any more, and
    --mode preload keeps the old answer, a one-line warning and plain TCP."""
    src = tmp_path / "s.c"
    src.write_text("#include <stdio.h>\nint main(void){puts(\"static ok\");return 0;}\n")
    exe = tmp_path / "s"
    if subprocess.run(["cc", "-static", "-o", str(exe), str(src)], capture_output=True).returncode:
        pytest.fail("cannot link a static program (libc6-dev provides libc.a)")
    p = subprocess.run([str(LOOPFAST), "run", str(exe)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout == "static ok\n" and p.stderr == ""
    p = subprocess.run([str(LOOPFAST), "run", "--mode", "preload", str(exe)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and p.stdout == "static ok\n"
    assert "statically linked" in p.stderr and len(p.stderr.splitlines()) == 1


def test_children_inherit_it(build):
    p = subprocess.run([str(LOOPFAST), "run", "sh", "-c", f"{PROBE} names"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert "#path client unix" in p.stdout and "#path server unix" in p.stdout


def test_environment_alone_enables_it(build):
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libloopfast-preload.so"), LOOPFAST_ENABLE="1")
    p = subprocess.run([str(PROBE), "names"], capture_output=True, text=True, timeout=60, env=env)
    assert "#path client unix" in p.stdout, p.stdout + p.stderr
    env["LOOPFAST_ENABLE"] = "0"
    p = subprocess.run([str(PROBE), "names"], capture_output=True, text=True, timeout=60, env=env)
    assert "#path client tcp" in p.stdout


def test_status_lists_listener_and_connection(build):
    srv = subprocess.Popen(wrap("loopfast", [str(PROBE), "serve-echo", "1"]), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    cli = None
    try:
        port = int(readline(srv))
        cli = subprocess.Popen(wrap("loopfast", [sys.executable, "-c", HOLDING_CLIENT, str(port)]),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        cport = int(readline(cli))
        wait_fast_path(cli, srv.pid, port)  # both ends, from the kernel
        server, client = f"127.0.0.1:{port}", f"127.0.0.1:{cport}"

        def listed(st):
            conns = [(c["pid"], c["role"], c["local"], c["peer"]) for c in st["connections"]]
            return ({"pid": srv.pid, "address": server} in [{"pid": l["pid"], "address": l["address"]}
                                                             for l in st["listeners"]]
                    and (cli.pid, "client", client, server) in conns and (srv.pid, "server", server, client) in conns)
        wait_status(listed)
        for _ in range(100):  # a sock_diag dump can miss a socket that others' churn moved; retry
            text = subprocess.run([str(LOOPFAST), "status"], capture_output=True, text=True, timeout=30).stdout
            if server in text and client in text:
                break
        assert server in text and client in text, text
        cli.stdin.close()
        assert cli.wait(timeout=30) == 0
    finally:
        stop(cli, srv)


def test_install_and_compile_against_it(build, tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)], check=True, capture_output=True)
    pc = next(prefix.rglob("loopfast.pc"))
    src = tmp_path / "app.c"
    src.write_text(
        '#include <loopfast.h>\n#include <stdio.h>\n#include <sys/socket.h>\n'
        'int main(void){int fd=socket(AF_INET,SOCK_STREAM,0);'
        'printf("%d %s\\n", lf_enable_fast_path(fd), lf_strerror(-95));return 0;}\n')
    env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "--define-variable=prefix=" + str(prefix),
                            "loopfast"], capture_output=True, text=True, env=env, check=True).stdout.split()
    exe = tmp_path / "app"
    subprocess.run(["cc", "-o", str(exe), str(src), *flags], check=True, env=env)
    libdir = next(p for p in flags if p.startswith("-L"))[2:]
    p = subprocess.run([str(exe)], capture_output=True, text=True, env=dict(os.environ, LD_LIBRARY_PATH=libdir))
    assert p.stdout.split()[0] == "0", p.stdout + p.stderr
    assert (prefix / "bin" / "loopfast").exists()
    assert list(prefix.rglob("libloopfast-preload.so"))
    assert list(prefix.rglob("loopfast.3"))
    share = prefix / "share" / "loopfast" / "bench"
    assert (share / "apps" / "apps.py").exists() and (share / "latency" / "plot_latency.py").exists()
    assert not list(share.rglob("*.[ch]")), "benchmark C sources must not be installed"


def tw_overflow():
    """TcpExtTCPTimeWaitOverflow: connections that left no TIME_WAIT
    socket because the kernel's table (tcp_max_tw_buckets) was full."""
    with open("/proc/net/netstat") as f:
        head, vals = [l.split() for l in f if l.startswith("TcpExt:")][:2]
    return int(vals[head.index("TCPTimeWaitOverflow")])


def room_for_time_wait(need, timeout=90):
    """Waits until the TIME_WAIT table has room for `need` more (the suite's
    benchmarks and floods fill it; each entry lasts 60 s)."""
    with open("/proc/sys/net/ipv4/tcp_max_tw_buckets") as f:
        limit = int(f.read())
    deadline = time.monotonic() + timeout
    while True:
        n = len(subprocess.run(["ss", "-Htan", "state", "time-wait"], capture_output=True, text=True,
                               check=True, timeout=30).stdout.splitlines())
        if n + need <= limit:
            return
        assert time.monotonic() < deadline, f"{n} TIME_WAIT sockets of {limit} still after {timeout} s"
        time.sleep(1)


@pytest.fixture
def own_netns():
    """The test in its own network namespace (conftest.new_netns): its
    own TIME_WAIT table (tcp_max_tw_buckets is counted per namespace) and
    port range, which neither the suite's other tests nor other runs on
    the machine fill."""
    with new_netns():
        yield


def churn_time_wait(mode):
    """Runs the probe's churn (400 connections to one port) and counts
    the TIME_WAIT sockets of exactly those connections, either end: never
    machine-wide, and not merely on the port either (on a machine busy with
    loopback traffic, others' ephemeral ports include the listener's)."""
    room_for_time_wait(800)
    overflow = tw_overflow()
    p = subprocess.run(wrap(mode, [str(PROBE), "churn"]), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "400 connect/echo/close cycles ok" in p.stdout, p.stdout + p.stderr
    # A full TIME_WAIT table keeps none, and the count would prove nothing.
    assert tw_overflow() == overflow, "the kernel's TIME_WAIT table overflowed during the churn"
    lines = p.stdout.splitlines()
    port = int(next(l.split()[1] for l in lines if l.startswith("#port ")))
    clients = {int(x) for l in lines if l.startswith("#client-ports ") for x in l.split()[1:]}
    assert clients, p.stdout  # fewer than 400 when ports were reused (no TIME_WAIT kept them)
    out = subprocess.run(["ss", "-Htan", "state", "time-wait", f"( sport = :{port} or dport = :{port} )"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    ends = [{int(f.rsplit(":", 1)[1]) for f in l.split()[-2:]} for l in out.splitlines()]
    return p.stdout, sum(1 for e in ends if len(e) == 2 and (e - {port}) <= clients)


def test_fast_path_connections_leave_no_time_wait(build, own_netns):
    """The doorbell TCP connection is reset, not closed: 400 fast-path
    connections leave no TIME_WAIT socket on their port (bind(0) cannot
    reuse those; bursts would run out of ports). Plain TCP's churn is the
    control that the count sees them. In its own network namespace: in the
    machine's, the suite's benchmarks fill the TIME_WAIT table (131,072
    places) and the test waited for its oldest entries to expire (47 s
    after a 15 s burst of plain connects had filled a namespace's table,
    against 0.3 s for the churn itself)."""
    out, tw = churn_time_wait("loopfast")
    assert "#path churn unix" in out, out
    assert tw == 0
    out, tw = churn_time_wait("tcp")
    assert "#path churn tcp" in out and tw > 0, (out, tw)


# A server on the port given that echoes one byte on each of the
# connections it accepts, and holds them until its stdin closes.
HOLDING_SERVER = """
import socket, sys, threading
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
def serve():
    while True:
        a, _ = s.accept()
        a.sendall(a.recv(1))
        held.append(a)
threading.Thread(target=serve, daemon=True).start()
sys.stdin.read()
"""

# N connects to the port, back to back, each checked with one echoed byte,
# all held; then the seconds they took, and the connections are held until
# stdin closes.
CONNECTING_CLIENT = """
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
t, held = time.monotonic(), []
for _ in range(n):
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"x")
    assert c.recv(1) == b"x"
    held.append(c)
print(time.monotonic() - t, flush=True)
sys.stdin.read()
"""

RANGE = (40000, 40063)  # the namespace's ephemeral ports
FILLER, SERVER = 39998, 39999  # listeners' ports, outside it


def write_sysctl(name, value):
    with open("/proc/sys/net/ipv4/" + name, "w") as f:
        f.write(value)


@pytest.fixture
def full_port_range(own_netns):
    """own_netns, whose ephemeral port range (RANGE) is full: each port
    holds the TIME_WAIT entry of a plain TCP client that closed first, to
    one listener (so no bind can have any of them, while a connect
    elsewhere shares them). The fill runs with tcp_tw_reuse off, so that
    no connect takes a TIME_WAIT port in place of a free one; the
    namespace's default is restored before the test."""
    import errno
    import socket
    write_sysctl("ip_local_port_range", f"{RANGE[0]} {RANGE[1]}")
    with open("/proc/sys/net/ipv4/tcp_tw_reuse") as f:
        reuse = f.read().strip()
    write_sysctl("tcp_tw_reuse", "0")
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", FILLER))
        lst.listen(RANGE[1] - RANGE[0] + 1)
        for _ in range(RANGE[0], RANGE[1] + 1):
            c = socket.create_connection(lst.getsockname())
            a, _ = lst.accept()
            c.close()
            a.close()
    write_sysctl("tcp_tw_reuse", reuse)
    out = subprocess.run(["ss", "-Htan", "state", "time-wait"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    assert len(out.splitlines()) == RANGE[1] - RANGE[0] + 1, out
    with socket.socket() as s, pytest.raises(OSError) as e:
        s.bind(("127.0.0.1", 0))
    assert e.value.errno == errno.EADDRINUSE


def connect_n(mode, port, n, trace=None):
    """CONNECTING_CLIENT in mode (under strace's record of its binds when
    trace names a file), once its n connections are up: (the Popen, the
    seconds they took)."""
    cmd = wrap(mode, [sys.executable, "-c", CONNECTING_CLIENT, str(port), str(n)])
    if trace:
        cmd = ["strace", "-f", "-qq", "-e", "trace=bind", "-o", str(trace), *cmd]
    cli = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return cli, float(readline(cli, timeout=60))


@pytest.mark.skipif(not shutil.which("strace"), reason="needs strace")
def test_full_port_range_of_time_wait_goes_plain_and_stops_searching(build, tmp_path, full_port_range):
    """A port range full of TIME_WAIT entries of plain TCP clients (other
    connections' churn): the hello's bind(0) finds no port (its search
    passes over every port with a socket, and no bind can share one with a
    socket that did not set SO_REUSEADDR), while TCP's own connect shares
    them with a new destination. So loopfast's connects go plain, as
    TCP's do, every byte echoed (both proven from the kernel: TCP pairs,
    no Unix pair), and only the first pays the failed search, which walks
    the whole range: the others in the same second go plain at once (the
    kernel's record of the client's binds: at most one a second, where the
    old code made one per connect)."""
    n = 20
    srv = subprocess.Popen(wrap("loopfast", [sys.executable, "-c", HOLDING_SERVER, str(SERVER)]),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    clis = []
    try:
        port = int(readline(srv))
        for mode in ("tcp", "loopfast"):
            trace = tmp_path / "binds" if mode == "loopfast" else None
            cli, took = connect_n(mode, port, n, trace)
            clis.append(cli)
            cpids, spids = kernel.process_tree(cli.pid), kernel.process_tree(srv.pid)
            assert len(kernel.tcp_pairs(cpids, spids, port)) == n, mode
            assert kernel.unix_pairs(cpids, spids, port) == [], mode
        binds = [l for l in trace.read_text().splitlines() if "AF_INET" in l]
        assert binds and all("EADDRINUSE" in l for l in binds), binds
        assert len(binds) <= 1 + took, (binds, took)
        for cli in clis:
            cli.stdin.close()
            assert cli.wait(timeout=30) == 0
    finally:
        stop(*clis, srv)


def entry_points():
    """Every command the source defines an entry point for (`int
    cmd_NAME(int argc, ...)` in src/cli or a bench), as the words a user
    types: cmd_run is "run", cmd_bench_connect "bench connect"."""
    from conftest import ROOT
    import re
    found = set()
    for src in [*(ROOT / "src" / "cli").glob("*.c"), *(ROOT / "bench").glob("*/*.c")]:
        for name in re.findall(r"^int cmd_(\w+)\(int argc", src.read_text(), re.M):
            found.add(" ".join(name.split("_", 1)) if name.startswith("bench_") else name)
    assert {"run", "status", "bench connect"} <= found, found
    return found


def listed(args):
    """The commands a help lists: its indented lines that start with a
    command (their arguments and the line below them left out)."""
    p = subprocess.run([str(LOOPFAST), *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    return {" ".join(w for w in l.split()[:2] if w[0].isalpha()) for l in p.stdout.splitlines()
            if l.startswith("  ") and not l.startswith("      ")}


def test_help_lists_every_command_and_each_has_help(build):
    """`loopfast --help` is printed from the dispatch table: it lists every
    command that has an entry point (`bench connect` too, which the help
    once left out), `loopfast bench --help` every benchmark, and each listed
    command runs its own `--help` (status 0, a usage line naming it), so
    none is listed that the table cannot dispatch."""
    commands = entry_points()
    assert listed(["--help"]) == commands
    assert listed(["bench", "--help"]) == {c for c in commands if c.startswith("bench ")}
    for c in sorted(commands):
        p = subprocess.run([str(LOOPFAST), *c.split(), "--help"], capture_output=True, text=True, timeout=30)
        first = p.stdout.splitlines()[0] if p.stdout else ""
        assert p.returncode == 0 and first.startswith("usage: loopfast"), (c, p.stdout, p.stderr)
        assert " " + c + " " in first.replace(" [--json]", "") + " ", (c, first)


def test_version_is_the_one_version(build):
    """`loopfast --version` prints one version, the same as CMake's project
    version (from the build's cache), the pkg-config files' Version, the
    libraries' file names, every man page's .TH line and the public
    header's LF_VERSION_* (its one source)."""
    from conftest import ROOT
    import re
    p = subprocess.run([str(LOOPFAST), "--version"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and re.fullmatch(r"loopfast \d+\.\d+\.\d+\n", p.stdout), p.stdout + p.stderr
    version = p.stdout.split()[1]
    cache = (BUILD / "CMakeCache.txt").read_text()
    assert re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(.*)$", cache, re.M)[1] == version
    for pc in ("loopfast.pc", "loopfast-rio.pc"):
        assert re.search(r"^Version: (.*)$", (BUILD / pc).read_text(), re.M)[1] == version, pc
    for lib in ("libloopfast.so", "libloopfast-rio.so"):
        assert (BUILD / f"{lib}.{version}").exists(), f"{lib}.{version}"
    header = (ROOT / "include" / "loopfast.h").read_text()
    parts = [re.search(rf"^#define LF_VERSION_{k} (\d+)$", header, re.M)[1] for k in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(parts) == version
    pages = [p for p in sorted((ROOT / "man").glob("*.[137]")) if not p.read_text().startswith(".so ")]
    assert len(pages) >= 8, pages
    for page in pages:
        th = re.search(r'^\.TH \S+ \d \S+ "([^"]*)"', page.read_text(), re.M)
        assert th and th[1] == f"loopfast {version}", f"man/{page.name}: .TH says {th and th[1]!r}, not loopfast {version}"
