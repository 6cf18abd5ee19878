"""A client on the shared-memory tier (run as root under `loopfast run
--tier shm`) of a server that may write garbage into the rings: one round
trip ("hi\\n"), prints "ready", waits for a line on stdin, then reads (after
writing one byte if WRITE is "write"), each call bounded by a 10 s
timeout, until the end or an error; prints one JSON line: what the calls
ended with (the exception's name, "eof" or "timeout") and the bytes read."""
import json
import socket
import sys

fam, port, write = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "write"
c = socket.create_connection(("127.0.0.1" if fam == "4" else "::1", port))
c.sendall(b"hi\n")
assert c.recv(100) == b"hi\n"
print("ready", flush=True)
sys.stdin.readline()
c.settimeout(10)
got, outcome = 0, None
try:
    if write:
        c.sendall(b"y")
    while True:
        d = c.recv(65536)
        if not d:
            outcome = "eof"
            break
        got += len(d)
except socket.timeout:
    outcome = "timeout"
except OSError as e:
    outcome = type(e).__name__
print(json.dumps({"outcome": outcome, "bytes": got}), flush=True)
