"""An asyncio server and a client with many concurrent connections.

server: listens on 127.0.0.1, a kernel-chosen port (asyncio's default
backlog, 100); each connection sends a length-prefixed message and gets
back its SHA-256.

client PORT N: opens N connections at once, prints "connected N", and
once its stdin has ended sends a different 64 KiB message on each, all
concurrently, checks every answer and prints how many were right."""
import asyncio
import hashlib
import os
import struct
import sys


async def handle(reader, writer):
    n = struct.unpack("!I", await reader.readexactly(4))[0]
    writer.write(hashlib.sha256(await reader.readexactly(n)).digest())
    await writer.drain()
    writer.close()


async def server():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    await srv.serve_forever()


async def exchange(reader, writer, msg):
    writer.write(struct.pack("!I", len(msg)) + msg)
    await writer.drain()
    ok = await reader.readexactly(32) == hashlib.sha256(msg).digest()
    writer.close()
    await writer.wait_closed()
    return ok


async def client(port, n):
    conns = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", int(port)) for _ in range(int(n))))
    print("connected", len(conns), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)
    oks = await asyncio.gather(*(exchange(r, w, os.urandom(64 << 10)) for r, w in conns))
    print("answers right:", sum(oks), flush=True)


if __name__ == "__main__":
    asyncio.run(server() if sys.argv[1] == "server" else client(*sys.argv[2:]))
