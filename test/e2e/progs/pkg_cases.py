"""The python/ package's calls in the ways Python programs make sockets,
for test_python_pkg.py (run with the venv's python, which has the package
installed). argv[1] picks the case: blocking, socketserver, streams,
protocols (each a server and two clients in this process: "fast" opted in,
"plain" not), or errors. Prints one JSON object (what the package
answered, the server's port, the echoes), then holds every connection open
until stdin closes, so that the test can read their paths in the kernel."""
import asyncio
import json
import socket
import socketserver
import sys
import threading

import loopfast

case = sys.argv[1]
out = {"module": loopfast.__file__}


def listener():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    loopfast.enable_fast_path(ls)
    out["port"] = ls.getsockname()[1]
    out["listener"] = loopfast.fast_path_active(ls)
    return ls


def client(opt):
    s = socket.socket()
    if opt:
        loopfast.enable_fast_path(s)
        loopfast.set_spin(s, 30)
    return s


def hold():
    print(json.dumps(out), flush=True)
    sys.stdin.read()


def echo_blocking(s, name):
    s.sendall(name.encode() + b"\n")
    out["echo_" + name] = s.makefile("rb").readline().decode().strip()
    out["client_" + name] = loopfast.fast_path_active(s)


def blocking():
    ls = listener()
    kept = []

    def serve():
        for _ in range(2):
            a, _ = ls.accept()
            kept.append(a)
            line = a.makefile("rb").readline()
            out["accepted_" + line.decode().strip()] = loopfast.fast_path_active(a)
            a.sendall(line)

    t = threading.Thread(target=serve)
    t.start()
    clients = [client(True), client(False)]
    for name, s in zip(("fast", "plain"), clients):
        s.connect(("127.0.0.1", out["port"]))
        echo_blocking(s, name)
    t.join()
    out["spin"] = [loopfast.get_spin(s) for s in clients]
    hold()


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline()
        out["accepted_" + line.decode().strip()] = loopfast.fast_path_active(self.connection)
        self.wfile.write(line)
        self.rfile.read()  # held until the client closes


def with_socketserver():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    loopfast.enable_fast_path(srv.socket)
    out["port"] = srv.server_address[1]
    out["listener"] = loopfast.fast_path_active(srv.socket)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    kept = []
    for name, opt in (("fast", True), ("plain", False)):
        s = client(opt)
        s.connect(("127.0.0.1", out["port"]))
        kept.append(s)
        echo_blocking(s, name)
    hold()


async def streams():
    loop = asyncio.get_running_loop()

    async def handle(r, w):
        line = await r.readline()
        out["accepted_" + line.decode().strip()] = loopfast.fast_path_active(w.get_extra_info("socket"))
        w.write(line)
        await w.drain()
        await r.read()

    ls = listener()
    ls.setblocking(False)
    server = await asyncio.start_server(handle, sock=ls)
    kept = []
    for name, opt in (("fast", True), ("plain", False)):
        s = client(opt)
        s.setblocking(False)
        await loop.sock_connect(s, ("127.0.0.1", out["port"]))
        r, w = await asyncio.open_connection(sock=s)
        kept.append(w)
        w.write(name.encode() + b"\n")
        out["echo_" + name] = (await r.readline()).decode().strip()
        out["client_" + name] = loopfast.fast_path_active(w.get_extra_info("socket"))
    await loop.run_in_executor(None, hold)
    server.close()


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport

    def data_received(self, data):
        out["accepted_" + data.decode().strip()] = loopfast.fast_path_active(self.t.get_extra_info("socket"))
        self.t.write(data)


class Ask(asyncio.Protocol):
    def __init__(self, got):
        self.got = got

    def data_received(self, data):
        self.got.set_result(data)


async def protocols():
    loop = asyncio.get_running_loop()
    ls = listener()
    ls.setblocking(False)
    server = await loop.create_server(Echo, sock=ls)
    kept = []
    for name, opt in (("fast", True), ("plain", False)):
        s = client(opt)
        s.setblocking(False)
        await loop.sock_connect(s, ("127.0.0.1", out["port"]))
        got = loop.create_future()
        t, _ = await loop.create_connection(lambda: Ask(got), sock=s)
        kept.append(t)
        t.write(name.encode() + b"\n")
        out["echo_" + (await got).decode().strip()] = name
        out["client_" + name] = loopfast.fast_path_active(t.get_extra_info("socket"))
    await loop.run_in_executor(None, hold)
    server.close()


def errors():
    """Each call's OSError (errno, message), then TCP carries on."""
    def err(fn):
        try:
            return fn()
        except OSError as e:
            return [e.errno, e.strerror]
        except ValueError as e:
            return ["ValueError", str(e)]

    s = socket.socket()
    out["loaded"] = loopfast.loaded()
    out["enable"] = err(lambda: loopfast.enable_fast_path(s))
    out["active"] = err(lambda: loopfast.fast_path_active(s))
    out["spin"] = err(lambda: loopfast.set_spin(s, 10))
    out["spin_range"] = err(lambda: loopfast.set_spin(s, -1))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out["udp"] = err(lambda: loopfast.enable_fast_path(u))
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    s.connect(ls.getsockname())
    out["after_connect"] = err(lambda: loopfast.enable_fast_path(s))
    out["port"] = ls.getsockname()[1]
    a, _ = ls.accept()
    s.sendall(b"x")
    out["tcp_carries_on"] = a.recv(1).decode()
    hold()


{"blocking": blocking, "socketserver": with_socketserver, "errors": errors,
 "streams": lambda: asyncio.run(streams()), "protocols": lambda: asyncio.run(protocols())}[case]()
