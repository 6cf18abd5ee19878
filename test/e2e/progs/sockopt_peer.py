"""A client or server that opts one socket in through loopfast's socket
option (the python/ package), for test_sockopt.py and test_python_pkg.py.

    sockopt_peer.py server OPT ACCEPT   listens on 127.0.0.1:0 (opted in if
        OPT is 1), prints its port, accepts once if ACCEPT is 1 and prints
        "accepted FAST" (the option's answer), then waits for stdin to close.
    sockopt_peer.py client PORT OPT     connects (opted in if OPT is 1),
        prints "ready", then blocks in recv; a SIGINT must end it with
        "KeyboardInterrupt" (Python's own handler, installed before the
        opt-in)."""
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
import loopfast  # noqa: E402


def server(opt, accept):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    if opt:
        loopfast.enable_fast_path(ls)
    print(ls.getsockname()[1], flush=True)
    if accept:
        a, _ = ls.accept()
        print("accepted", int(loopfast.fast_path_active(a)) if loopfast.loaded() else "-", flush=True)
    sys.stdin.read()


def client(port, opt):
    s = socket.socket()
    if opt:
        loopfast.enable_fast_path(s)
    s.connect(("127.0.0.1", port))
    print("ready", flush=True)
    try:
        got = s.recv(10)
        print("recv returned", got, flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)


if sys.argv[1] == "server":
    server(sys.argv[2] == "1", sys.argv[3] == "1")
else:
    client(int(sys.argv[2]), sys.argv[3] == "1")
