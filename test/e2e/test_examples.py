"""Every example in examples/ runs, and its connection takes the path it
says, proved from the kernel at both ends: the C server (C call) with the C
client (socket option, no loopfast header), that client without loopfast
(plain TCP, carries on), the Python socketserver/blocking pair and the
asyncio pair, and the Java pair: opted in through the JDK's native option
call (--add-opens), and unmodified under whole-process `loopfast run`."""
import os
import subprocess

import pytest

from conftest import BUILD, LOOPFAST, ROOT, go_binary, readline, stop, wait_paths

EX = ROOT / "examples"
PER_SOCKET = [str(LOOPFAST), "run", "--per-socket", "--"]


@pytest.fixture(scope="module")
def c_examples(tmp_path_factory):
    d = tmp_path_factory.mktemp("examples")
    flags = ["-Wall", "-Wextra", "-Werror"]
    subprocess.run(["cc", *flags, "-I", str(ROOT / "include"), "-o", str(d / "server_api"), str(EX / "c/server_api.c"),
                    "-L", str(BUILD), "-lloopfast", f"-Wl,-rpath,{BUILD}"], check=True, timeout=120)
    subprocess.run(["cc", *flags, "-o", str(d / "client_sockopt"), str(EX / "c/client_sockopt.c")], check=True,
                   timeout=120)
    return d


def env():
    e = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LOOPFAST_ENABLE")}
    e["PYTHONPATH"] = str(ROOT / "python")
    return e


def start(cmd):
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env())


def echo_and_path(server_cmd, client_cmd, fast, label=True):
    srv = start(server_cmd)
    cl = None
    try:
        line = readline(srv).split()
        if line[:2] == ["option", "refused"]:  # the Go server without loopfast says so first
            line = readline(srv).split()
        assert line[:2] == ["listening", "on"], line
        port = int(line[2])
        cl = start(client_cmd + [str(port)])
        said = [readline(cl).strip()]
        if said[0].startswith(("option refused", "loopfast")):
            said.append(readline(cl).strip())
        want = ("fast path" if fast else "plain TCP") if label else ""
        assert said[-1].startswith("connected: " + want), said
        assert readline(srv, timeout=60).strip().startswith("accepted: " + want)
        cl.stdin.write("hello\n")
        cl.stdin.flush()
        assert readline(cl).strip() == "echo: hello"
        wait_paths(cl.pid, srv.pid, port, fast=int(fast), plain=int(not fast))
        cl.stdin.close()
        assert cl.wait(timeout=30) == 0
        return said
    finally:
        stop(cl, srv)


def test_c_api_server_and_sockopt_client(c_examples):
    echo_and_path([str(c_examples / "server_api")], PER_SOCKET + [str(c_examples / "client_sockopt")], fast=True)


def test_c_sockopt_client_without_loopfast(c_examples):
    said = echo_and_path([str(c_examples / "server_api")], [str(c_examples / "client_sockopt")], fast=False)
    assert said[0] == "option refused (Protocol not available): plain TCP", said


def test_python_socketserver_and_client():
    py = ["python3", "-u"]
    echo_and_path(PER_SOCKET + py + [str(EX / "python/echo_server.py")],
                  PER_SOCKET + py + [str(EX / "python/echo_client.py")], fast=True)


def test_python_asyncio():
    py = ["python3", "-u", str(EX / "python/asyncio_echo.py")]
    echo_and_path(PER_SOCKET + py + ["server"], PER_SOCKET + py + ["client"], fast=True)


@pytest.fixture(scope="module")
def java_example(tmp_path_factory):
    d = tmp_path_factory.mktemp("java")
    subprocess.run(["javac", "-Xlint:all", "-Werror", "-d", str(d), str(EX / "java/FastPathEcho.java")], check=True,
                   timeout=300)
    return d


def test_java_opts_in_through_the_option(java_example):
    java = ["java", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "-cp", str(java_example), "FastPathEcho"]
    echo_and_path(PER_SOCKET + java + ["server"], PER_SOCKET + java + ["client"], fast=True)


def test_java_whole_process_without_add_opens(java_example):
    """The JDK alone cannot set the option (no --add-opens: the example
    says so and carries on); whole-process `loopfast run` still gives the
    fast path."""
    java = ["java", "-cp", str(java_example), "FastPathEcho"]
    whole = [str(LOOPFAST), "run", "--"]
    echo_and_path(whole + java + ["server"], whole + java + ["client"], fast=True, label=False)


@pytest.fixture(scope="module")
def go_example(tmp_path_factory):
    """examples/go built as its users build it: CGO_ENABLED=0, offline."""
    d = tmp_path_factory.mktemp("go")
    env = dict(os.environ, CGO_ENABLED="0", GOCACHE=str(BUILD / "go-cache"), GOPATH=str(d / "gopath"), GOFLAGS="",
               GOTOOLCHAIN="local", GOPROXY="off", GO111MODULE="off", HOME=str(d))
    subprocess.run([go_binary(), "build", "-o", str(d / "fastpath_echo"), str(EX / "go/fastpath_echo.go")], cwd=d,
                   env=env, check=True, timeout=900)
    return [str(d / "fastpath_echo")]


@pytest.mark.extra  # 10 s, mostly its Go build: make test-extra's (the C and Python examples stay)
def test_go_opts_in_through_the_option(go_example):
    """A pure-Go server and client (syscall.SetsockoptInt in their Control
    hooks) under `loopfast run --per-socket`, which supervises them."""
    echo_and_path(PER_SOCKET + go_example + ["server"], PER_SOCKET + go_example + ["client"], fast=True)


@pytest.mark.extra  # its Go build, 10 s: with the opt-in case above in make test-extra (make test's ten minutes)
def test_go_without_loopfast(go_example):
    """Without loopfast the kernel refuses the option and both carry on
    over TCP."""
    said = echo_and_path(go_example + ["server"], go_example + ["client"], fast=False)
    assert said[0] == "option refused (protocol not available): plain TCP", said


@pytest.mark.extra  # its Go build (make test's ten minutes)
def test_go_server_and_c_sockopt_client(go_example, c_examples):
    """The Go server (supervised) with the C client (preloaded), each
    opted in through the option."""
    echo_and_path(PER_SOCKET + go_example + ["server"], PER_SOCKET + [str(c_examples / "client_sockopt")], fast=True)
