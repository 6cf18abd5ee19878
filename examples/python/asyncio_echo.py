"""asyncio: an echo server (streams) and a client (a protocol), each
opting its socket in before handing it to asyncio.

    loopfast run --per-socket -- python3 asyncio_echo.py server
    loopfast run --per-socket -- python3 asyncio_echo.py client PORT
"""
import asyncio
import socket
import sys

import loopfast


def opted_in_socket():
    s = socket.socket()
    loopfast.enable_fast_path(s)
    s.setblocking(False)
    return s


async def serve():
    async def echo(reader, writer):
        on = loopfast.fast_path_active(writer.get_extra_info("socket"))
        print("accepted:", "fast path" if on else "plain TCP", flush=True)
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()

    ls = opted_in_socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    server = await asyncio.start_server(echo, sock=ls)
    print("listening on", ls.getsockname()[1], flush=True)
    await server.serve_forever()


class Client(asyncio.Protocol):
    def __init__(self):
        self.lines = asyncio.Queue()

    def data_received(self, data):
        for line in data.splitlines(keepends=True):
            self.lines.put_nowait(line)


async def client(port):
    loop = asyncio.get_running_loop()
    s = opted_in_socket()
    await loop.sock_connect(s, ("127.0.0.1", port))
    transport, proto = await loop.create_connection(Client, sock=s)
    on = loopfast.fast_path_active(transport.get_extra_info("socket"))
    print("connected:", "fast path" if on else "plain TCP", flush=True)
    while line := await loop.run_in_executor(None, sys.stdin.buffer.readline):
        transport.write(line)
        print("echo:", (await proto.lines.get()).decode(), end="", flush=True)
    transport.close()


asyncio.run(serve() if sys.argv[1] == "server" else client(int(sys.argv[2])))
