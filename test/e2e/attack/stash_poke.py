"""Tries to write into a listener's stash (run as the attacker): a forged
stash message carrying one of its own sockets, by sendto and by connect +
send, to the stash's abstract name. Prints one JSON line: what each got
("ok" or the error's name)."""
import json
import socket
import struct
import sys

fam, ino = sys.argv[1], int(sys.argv[2])
VERSION = 9  # LF_PROTO_VERSION (src/protocol/protocol.h; test_security.py checks it)
name = b"\0loopfast/%d/S/%s/%d" % (VERSION, fam.encode(), ino)
mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
magic = 0x0053464C | (ord("0") + VERSION) << 24  # LF_STASH_MAGIC: "LFS" and the version
msg = struct.pack("=III", magic, 0, 1) + bytes(32)  # uid 0, vouched
rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, mine.fileno().to_bytes(4, "little"))]
out = {}
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    d.sendmsg([msg], rights, 0, name)
    out["sendto"] = "ok"
except OSError as e:
    out["sendto"] = type(e).__name__
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    d.connect(name)
    d.sendmsg([msg], rights)
    out["connect"] = "ok"
except OSError as e:
    out["connect"] = type(e).__name__
print(json.dumps(out), flush=True)
