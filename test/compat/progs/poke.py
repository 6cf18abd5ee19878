"""A client that makes one request and then holds its connection, for
test_signals.py: connects to HOST:PORT (retrying while refused, at most
10 s), sends REQUEST, reads until EXPECT has come back, prints "served",
and keeps the connection open until its stdin ends. With "idle", it then
opens a second connection and holds it too without sending anything (for
servers that close a connection once they have answered it).
usage: poke.py HOST PORT REQUEST_HEX EXPECT_HEX [idle]"""
import socket
import sys
import time


def connect(host, port):
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection((host, port), timeout=30)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def main(host, port, request, expect, *idle):
    held = [connect(host, int(port))]
    held[0].sendall(bytes.fromhex(request))
    got, want = b"", bytes.fromhex(expect)
    while want not in got:
        chunk = held[0].recv(1 << 16)
        if not chunk:
            sys.exit(f"EOF before {want!r}; got {got[:200]!r}")
        got += chunk
    if idle:
        held.append(connect(host, int(port)))
    print("served", flush=True)
    sys.stdin.buffer.read()


if __name__ == "__main__":
    main(*sys.argv[1:])
