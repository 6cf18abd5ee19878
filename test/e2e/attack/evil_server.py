"""A server of another uid (run as the attacker) that looks for descriptors
in everything its clients send. MODE "genuine": a TCP echo server that runs
under loopfast (the attacker's own rendezvous); every accepted connection
is read with recvmsg and room for descriptors. MODE "handmade": a TCP
listener and a rendezvous made by hand, named after the listener's inode,
reading every hello with recvmsg. Prints its port, serves (echoes) until
stdin closes, then prints one JSON line: hellos (fast-path connections)
and TCP connections served, bytes and descriptors received."""
import json
import os
import select
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import ADDR, FAMILY, claim, fds_in, kernel_domain, rendezvous  # noqa: E402

fam, mode = sys.argv[1], sys.argv[2]
lst = socket.socket(FAMILY[fam])
lst.bind((ADDR[fam], 0))
lst.listen(64)
watch = [lst]
if mode == "handmade":
    rdv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    rdv.bind(rendezvous(fam, os.fstat(lst.fileno()).st_ino))
    rdv.listen(64)
    watch.append(rdv)
print(lst.getsockname()[1], flush=True)
stats = {"hellos": 0, "tcp": 0, "bytes": 0, "fds": 0}
conns = []
while True:
    r = select.select([sys.stdin] + watch + conns, [], [])[0]
    if sys.stdin in r:
        break
    for s in r:
        if s in watch:
            c, _ = s.accept()
            unix = s is not lst or kernel_domain(c.fileno()) == socket.AF_UNIX
            stats["hellos" if unix else "tcp"] += 1
            if s is lst and mode == "handmade":
                # The doorbell: its client talks on the hello. Claimed as
                # loopfast does (anything else tells the client nobody did).
                claim(c)
                continue
            conns.append(c)
            continue
        try:
            msg, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(4 * 64))
        except OSError:
            msg, anc = b"", []
        stats["bytes"] += len(msg)
        stats["fds"] += fds_in(anc)
        if msg:
            s.sendall(msg)
        elif not anc:
            conns.remove(s)
            s.close()
print(json.dumps(stats), flush=True)
