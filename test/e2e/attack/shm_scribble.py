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
  size   the size of the ring it writes: 3 (not a power of two within the
         area), with one byte in it
  grow   the size of the ring the victim writes: its whole area (a size
         the victim's SO_SNDBUF never asked), then as "room"
  token  nothing in the page; a token byte that no push explains
  urg    the urgent mark of the ring it writes: 2**40 ahead of the
         reader, with one byte in the ring
  room   the head of the ring the victim writes (the attacker reads it):
         2**40; as a client, then one honest byte, which the server echoes
  left   nothing in the page; the byte that ends a writer's ring bytes when
         it leaves the tier ("l"), though the victim never answered a
         request to leave (docs/shm.md, "Leaving the tier")
  copy   nothing in the page; the byte a writer's copy follows ("k"), though
         the victim never asked
Each ends with a token byte on the socket written by a raw system call (the
doorbell a reader wakes on; "left" and "copy" put theirs instead), except
"room" and "grow", whose victim is its writer."""
import ctypes
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, raw  # noqa: E402

SYS_WRITE = {"x86_64": 1, "aarch64": 64}[os.uname().machine]
MEMFD = "memfd:loopfast-shm"
# src/protocol/ring.h: the page's header, then one struct lf_ring_hdr of
# 320 bytes per direction ([0] client to server, [1] server to client);
# in each, tail at 0 (u64), bell at 8 (u32), size at 36 (u32), urg at 40
# (u64), head at 64 (u64).
RING0, HDR, TAIL, BELL, SIZE, URG, HEAD = 64, 320, 0, 8, 36, 40, 64

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
elif mode == "size":
    word(mine + SIZE, 4).value = 3
    tail.value += 1
elif mode == "urg":
    word(mine + URG, 8).value = tail.value + 2 ** 40
    tail.value += 1
elif mode in ("room", "grow"):
    if mode == "room":
        word(theirs + HEAD, 8).value = 2 ** 40
    else:
        word(theirs + SIZE, 4).value = word(8, 4).value  # the page's third word: the area
    if role == "client":
        c.sendall(b"x")  # the server echoes it: a write into the ring
if mode not in ("room", "grow"):
    token = ctypes.create_string_buffer({"left": b"l", "copy": b"k"}.get(mode, b"t"))  # held: the raw call reads it
    assert raw(SYS_WRITE, c.fileno(), ctypes.addressof(token), 1) == 1
print("scribbled", flush=True)
sys.stdin.read()
print(json.dumps({"mode": mode}), flush=True)
