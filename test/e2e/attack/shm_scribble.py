"""A peer of another uid on the shared-memory tier (run as the attacker,
under loopfast with LOOPFAST_TIER=shm, so that its end of the connection
is genuine) that writes garbage into the rings' shared words. ROLE
"server": listens, prints its port, accepts one connection; ROLE
"client": connects to PORT. Either way it does one honest round trip
("hi\\n", answered by the server's echo), prints "ready" and waits for a
line on stdin; then writes MODE's garbage into the page its own process
maps (as any process can write its own memory), prints "scribbled", and
holds the connection until stdin closes (then prints one JSON line). MODE:
  tail   the tail of the ring it writes: 2**40 ahead of the reader
  bell   the bell of the ring it writes: 7
  head   the reader's own head of the ring it writes: 2**40 past the tail
  token  nothing in the page; a token byte that no push explains
  room   the head of the ring the victim writes (the attacker reads it):
         2**40; as a client, then one honest byte, which the server echoes
  awake  the `awake` of the ring the victim writes, where a polling reader
         says when it last polled: from then on a thread stores there the
         time now (CLOCK_MONOTONIC >> 8: "polling just now"), and now and
         then 0xffffffff and 1, and clears that ring's bell and takes
         the tokens off its socket by raw system calls (so that each of
         the victim's pushes looks for a polling reader; the victim's
         writer may wait for it, on its own clock only), while it reads
         nothing from the ring; once stdin closes, it prints the bytes
         pushed and not taken (tail - head)
Each ends with a token byte on the socket written by a raw system call (the
doorbell a reader wakes on), except "room" and "awake", whose victim is its
writer."""
import ctypes
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, raw  # noqa: E402

SYS_WRITE = {"x86_64": 1, "aarch64": 64}[os.uname().machine]
SYS_RECVFROM = {"x86_64": 45, "aarch64": 207}[os.uname().machine]
MEMFD = "memfd:loopfast-shm"
# src/protocol/ring.h: the page's header, then one struct lf_ring_hdr of
# 128 bytes per direction ([0] client to server, [1] server to client);
# in each, tail at 0 (u64), bell at 8 (u32), head at 64 (u64).
RING0, HDR, TAIL, BELL, HEAD, AWAKE = 64, 128, 0, 8, 64, 84

role, fam, mode = sys.argv[1], sys.argv[2], sys.argv[3]
if role == "server":
    lst = socket.socket(FAMILY[fam])
    lst.bind((ADDR[fam], 0))
    lst.listen(1)
    print(lst.getsockname()[1], flush=True)
    c, _ = lst.accept()
    c.sendall(c.recv(100))
else:
    c = socket.create_connection((ADDR[fam], int(sys.argv[4])))
    c.sendall(b"hi\n")
    assert c.recv(100) == b"hi\n"
print("ready", flush=True)
sys.stdin.readline()

base = min(int(line.split("-")[0], 16) for line in open("/proc/self/maps") if MEMFD in line)
mine = RING0 + HDR * (1 if role == "server" else 0)     # the ring this end writes
theirs = RING0 + HDR * (0 if role == "server" else 1)   # the ring the victim writes


def word(off, size):
    return (ctypes.c_uint64 if size == 8 else ctypes.c_uint32).from_address(base + off)


tail = word(mine + TAIL, 8)
if mode == "tail":
    tail.value += 2 ** 40
elif mode == "bell":
    word(mine + BELL, 4).value = 7
elif mode == "head":
    word(mine + HEAD, 8).value = tail.value + 2 ** 40
elif mode == "room":
    word(theirs + HEAD, 8).value = 2 ** 40
    if role == "client":
        c.sendall(b"x")  # the server echoes it: a write into the ring
elif mode == "awake":
    import threading
    import time

    sink = ctypes.create_string_buffer(65536)

    def scribble(w=word(theirs + AWAKE, 4), bell=word(theirs + BELL, 4)):
        while True:
            for i in range(10000):
                w.value = (time.monotonic_ns() >> 8) & 0xffffffff or 1
                bell.value = 0
                if i % 100 == 0:  # the tokens the victim then sends, past loopfast
                    raw(SYS_RECVFROM, c.fileno(), ctypes.addressof(sink), 65536, socket.MSG_DONTWAIT, 0, 0)
            for v in (0xffffffff, 1):
                for _ in range(10):
                    w.value = v
    threading.Thread(target=scribble, daemon=True).start()
if mode not in ("room", "awake"):
    token = ctypes.create_string_buffer(b"t")  # held: the raw call reads it
    assert raw(SYS_WRITE, c.fileno(), ctypes.addressof(token), 1) == 1
print("scribbled", flush=True)
sys.stdin.read()
got = 0
if mode == "awake":  # what the victim pushed and no one took: every byte it wrote
    got = word(theirs + TAIL, 8).value - word(theirs + HEAD, 8).value
print(json.dumps({"mode": mode, "got": got}), flush=True)
