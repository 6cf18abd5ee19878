"""The SOL_LOOPFAST option's answers, asked with raw setsockopt/getsockopt
(no package), for test_sockopt.py. Prints one JSON object: each case's
answer (an int, or the errno name of the error), and the ports of the
connections it holds open: "fast" (both ends opted in), "plain" (the
client not opted in), "out" (the listener opted out before listen, the
client opted in); then waits for stdin to close so that the test can
look at them in the kernel. argv[1] "whole" when run under whole-process
`loopfast run` (no opt-in of its own but the option's 0)."""
import errno
import json
import socket
import struct
import sys

SOL, FAST, SPIN = 0x4C46, 1, 2
whole = len(sys.argv) > 1 and sys.argv[1] == "whole"
out = {}


def ask(name, fn):
    try:
        r = fn()
        out[name] = r if isinstance(r, int) else 0
    except OSError as e:
        out[name] = errno.errorcode[e.errno]


def get(s):
    return lambda: s.getsockopt(SOL, FAST)


def put(s, v, opt=FAST):
    return lambda: s.setsockopt(SOL, opt, v)


def listener(opt):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    if opt == 0:
        ask(f"listener_out_before_listen", put(ls, 0))
    ls.listen(8)
    return ls


held = []
fast_l = listener(None)
ask("listener_before", get(fast_l))
if not whole:
    ask("listener_set", put(fast_l, 1))
ask("listener_after", get(fast_l))
ask("listener_out_after_listen", put(fast_l, 0))
ask("listener_still", get(fast_l))

c = socket.socket()
ask("unconnected_before", get(c))
if not whole:
    ask("unconnected_set", put(c, 1))
ask("unconnected_after", get(c))
ask("spin_set", put(c, 40, SPIN))
ask("spin_get", lambda: c.getsockopt(SOL, SPIN))
ask("spin_negative", put(c, -1, SPIN))
ask("spin_too_big", put(c, 1000001, SPIN))
ask("short_len", lambda: c.setsockopt(SOL, FAST, b"\x01"))
ask("short_get", lambda: c.getsockopt(SOL, FAST, 2))
ask("unknown_set", put(c, 1, 99))
ask("unknown_get", lambda: c.getsockopt(SOL, 99))
c.connect(fast_l.getsockname())
a, _ = fast_l.accept()
held += [c, a]
ask("connected_fast", get(c))
ask("accepted_fast", get(a))
ask("connected_set", put(c, 1))
ask("connected_out", put(c, 0))
ask("connected_spin_get", lambda: c.getsockopt(SOL, SPIN))

p = socket.socket()
if whole:
    ask("plain_out", put(p, 0))
    ask("plain_out_get", get(p))
p.connect(fast_l.getsockname())
pa, _ = fast_l.accept()
held += [p, pa]
ask("connected_plain", get(p))
ask("accepted_plain", get(pa))
ask("plain_out_after", put(p, 0))

out_l = listener(0)
ask("listener_out_get", get(out_l))
oc = socket.socket()
ask("out_client_set", put(oc, 1))
oc.connect(out_l.getsockname())
oa, _ = out_l.accept()
held += [oc, oa, out_l]
ask("out_connected", get(oc))

# A connect in progress (SYN_SENT: the listener's queue is full, its SYN
# dropped) has chosen its path: neither 1 nor 0 may answer success.
full = socket.socket()
full.bind(("127.0.0.1", 0))
full.listen(0)
for k in range(2):
    q = socket.socket()
    q.setblocking(False)
    q.connect_ex(full.getsockname())
    held.append(q)
syn = [s for s in held[-2:] if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == 2]
out["syn_sent"] = len(syn)
ask("connecting_set", put(syn[0], 1))
ask("connecting_out", put(syn[0], 0))
held.append(full)

u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ask("udp_set", put(u, 1))
ask("udp_get", get(u))
x = socket.socket(socket.AF_UNIX)
ask("unix_set", put(x, 1))
out["ports"] = {"fast": fast_l.getsockname()[1], "out": out_l.getsockname()[1]}
print(json.dumps(out), flush=True)
sys.stdin.read()
