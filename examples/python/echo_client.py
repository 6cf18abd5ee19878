"""An echo client that opts its socket in before connect; each line of
stdin is sent and its echo printed.

    loopfast run --per-socket -- python3 echo_client.py PORT
"""
import socket
import sys

import loopfast

s = socket.socket()
try:
    loopfast.enable_fast_path(s)
except OSError as e:  # not loaded: carry on over TCP
    print(e, "- plain TCP", flush=True)
s.connect(("127.0.0.1", int(sys.argv[1])))
print("connected:", "fast path" if loopfast.loaded() and loopfast.fast_path_active(s) else "plain TCP", flush=True)
f = s.makefile("rwb")
for line in sys.stdin.buffer:
    f.write(line)
    f.flush()
    print("echo:", f.readline().decode(), end="", flush=True)
