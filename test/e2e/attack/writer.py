"""Clients that write their request and close (run as root, under
`loopfast run` or not): N connections to PORT one after the other, each
sending SIZE bytes and closing without reading, then exits. Prints "done N"."""
import socket
import sys

port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"r" * size)
    s.close()
print("done", n, flush=True)
