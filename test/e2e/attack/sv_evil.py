"""A server of another uid for test_supervisor_security.py: a TCP listener
on 127.0.0.1 and a rendezvous made by hand, named after the listener's
inode (so a loopfast client joins it). Prints its port, then:

  MODE "take": takes the first hello that comes before its stdin closes
  (at most 60 s), reads what its client
  sent (5 s), answers "pwned", and prints {"got": TEXT}.
  MODE "sendfd": serves one connection, fast path (its hello: the
  doorbell is claimed as loopfast's server does) or plain TCP, by sending
  "hi" with one of its descriptors (SCM_RIGHTS, the kernel's sendmsg) and,
  if that fails, "hi" alone; prints {"fast": bool, "sendfds": "sent" or
  the errno's name}, then waits for stdin to close."""
import errno
import json
import os
import select
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lfsec import claim, rendezvous  # noqa: E402

mode = sys.argv[1]
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(8)
rdv = socket.socket(socket.AF_UNIX)
rdv.bind(rendezvous("4", os.fstat(lst.fileno()).st_ino))
rdv.listen(8)
print(lst.getsockname()[1], flush=True)

if mode == "take":
    got = b""
    try:
        if rdv not in select.select([rdv, sys.stdin], [], [], 60)[0]:
            raise TimeoutError
        h, _ = rdv.accept()
        h.settimeout(5)
        got = h.recv(100)
        h.sendall(b"pwned")
    except OSError:
        pass
    print(json.dumps({"got": got.decode(errors="replace")}), flush=True)
    sys.exit(0)

# sendfd
select.select([lst], [], [], 30)
d, _ = lst.accept()
rdv.setblocking(False)
try:
    conn, fast = rdv.accept()[0], True  # queued before the doorbell's SYN
    claim(d)
except BlockingIOError:
    conn, fast = d, False
conn.setblocking(True)
try:
    socket.send_fds(conn, [b"hi"], [lst.fileno()])
    sent = "sent"
except OSError as e:
    sent = errno.errorcode.get(e.errno, str(e.errno))
    conn.sendall(b"hi")
print(json.dumps({"fast": fast, "sendfds": sent}), flush=True)
sys.stdin.read()
