"""The SOL_LOOPFAST option in the orders and hands an unlucky program uses
(an adversarial review of test_sockopt.py's surface): an option that the
fast path cannot keep set *before* the opt-in (the per-socket mode's
natural order), an opt-out undone by an opt-in, and a listener handed by
SCM_RIGHTS to a process of another uid. Each outcome is compared with
plain TCP in the same test and every path is proved from the kernel, both
ends (test_sockopt.py has the option's answers one by one)."""
import errno
import json
import os
import pwd
import subprocess
import shutil
import sys
import tempfile
import textwrap

import pytest

import kernel
from conftest import LOOPFAST, answers_plain_and_under, readline, stop

PER_SOCKET = [str(LOOPFAST), "run", "--per-socket", "--"]
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")  # any uid can run it

# One process, both ends: a listener opted in, a client that sets OPTION
# (zerocopy: SO_ZEROCOPY, inq: TCP_INQ) and then asks for the fast path
# (unless argv[2] is "tcp": the control, no SOL_LOOPFAST at all). Prints
# what the opt-in answered, then what TCP would give the program for the
# option: the MSG_ZEROCOPY completion on the error queue (polled for
# 10 s, never read blocking), or TCP_INQ's value and its control message.
PINNED = textwrap.dedent("""
    import errno, json, select, socket, sys
    SOL, FAST = 0x4C46, 1
    what, tcp = sys.argv[1], sys.argv[2] == "tcp"
    ls = socket.socket(); ls.bind(("127.0.0.1", 0))
    if not tcp:
        ls.setsockopt(SOL, FAST, 1)
    ls.listen(4)
    c = socket.socket()
    if what == "zerocopy":
        c.setsockopt(socket.SOL_SOCKET, 60, 1)     # SO_ZEROCOPY
    else:
        c.setsockopt(socket.IPPROTO_TCP, 36, 1)    # TCP_INQ
    out = {"port": ls.getsockname()[1]}
    try:
        if not tcp:
            c.setsockopt(SOL, FAST, 1)
        out["optin"] = 0
    except OSError as e:
        out["optin"] = errno.errorcode[e.errno]
    c.connect(ls.getsockname())
    a, _ = ls.accept()
    if what == "zerocopy":
        c.sendmsg([b"x" * 4096], [], 0x4000000)    # MSG_ZEROCOPY
        p = select.poll(); p.register(c, 0)
        out["completion"] = bool(p.poll(10000))
    else:
        a.sendall(b"hello")
        msg, anc, _, _ = c.recvmsg(100, 64)
        out["inq"] = c.getsockopt(socket.IPPROTO_TCP, 36)
        out["cmsg"] = [(lvl, kind) for lvl, kind, _ in anc]
    print(json.dumps(out), flush=True)
    sys.stdin.read()
""")


def run_held(cmd):
    """Starts a program that prints one JSON line and then holds its
    connections until its stdin closes; returns (process, its answers)."""
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, json.loads(readline(p, 60))


@pytest.mark.parametrize("what", ["zerocopy", "inq"])
def test_option_the_fast_path_cannot_keep_set_before_the_opt_in(build, what):
    """SO_ZEROCOPY or TCP_INQ set, then SOL_LOOPFAST 1: the opt-in is
    refused (EOPNOTSUPP, so the program is told) and the connection stays
    plain TCP at both ends, where the option works as over plain TCP in
    the same test (the MSG_ZEROCOPY completion arrives; TCP_INQ reads 1 and
    its control message comes). Before the fix the opt-in said yes, the
    connection was a Unix stream, TCP_INQ read 0 without its message and
    the zerocopy completion never came (a program that waits for it hangs)."""
    tcp, want = run_held([sys.executable, "-c", PINNED, what, "tcp"])
    stop(tcp)
    assert want.get("completion", True) and want.get("inq", 1) == 1, want
    p, got = run_held(PER_SOCKET + [sys.executable, "-c", PINNED, what, "lf"])
    try:
        assert got["optin"] == errno.errorcode[errno.EOPNOTSUPP], got
        assert {k: v for k, v in got.items() if k not in ("optin", "port")} == \
            {k: v for k, v in want.items() if k not in ("optin", "port")}
        assert len(kernel.tcp_pairs([p.pid], [p.pid], got["port"])) == 1
        assert not kernel.unix_pairs([p.pid], [p.pid], got["port"])
    finally:
        stop(p)


# Both ends opt out and then in again (0, then 1) before listen and
# connect; prints what the option answers at each step and the port.
OUT_THEN_IN = textwrap.dedent("""
    import json, socket, sys
    SOL, FAST = 0x4C46, 1
    ls = socket.socket(); ls.bind(("127.0.0.1", 0))
    ls.setsockopt(SOL, FAST, 0); ls.setsockopt(SOL, FAST, 1)
    out = {"port": ls.getsockname()[1], "listener_before": ls.getsockopt(SOL, FAST)}
    ls.listen(4)
    out["listener_after"] = ls.getsockopt(SOL, FAST)
    c = socket.socket(); c.setsockopt(SOL, FAST, 0); c.setsockopt(SOL, FAST, 1)
    c.connect(ls.getsockname()); a, _ = ls.accept()
    out["client"], out["accepted"] = c.getsockopt(SOL, FAST), a.getsockopt(SOL, FAST)
    c.sendall(b"ping"); assert a.recv(4) == b"ping"
    print(json.dumps(out), flush=True)
    sys.stdin.read()
""")


def test_opt_out_then_in_before_listen_serves_the_fast_path(build):
    """A listener opted out and then in again before listen: the second
    answer is the one that counts, as for a client. Before the fix the 1
    said yes (and the option read 1) but the listener got no rendezvous:
    read 0 after listen, and its opted-in client went plain TCP."""
    p, got = run_held(PER_SOCKET + [sys.executable, "-c", OUT_THEN_IN])
    try:
        assert (got["listener_before"], got["listener_after"], got["client"], got["accepted"]) == (1, 1, 1, 1), got
        assert len(kernel.unix_pairs([p.pid], [p.pid], got["port"])) == 1
        assert not kernel.tcp_pairs([p.pid], [p.pid], got["port"])
    finally:
        stop(p)


# The listener's owner (root, --per-socket, its listener opted in) hands
# the listener to a process of another uid over a Unix socket whose path
# it prints; then serves one echo client of its own.
OWNER = textwrap.dedent("""
    import json, os, socket, sys
    SOL, FAST = 0x4C46, 1
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.setsockopt(SOL, FAST, 1); ls.listen(4)
    path = sys.argv[1]
    u = socket.socket(socket.AF_UNIX); u.bind(path); os.chmod(path, 0o777); u.listen(1)
    print(ls.getsockname()[1], flush=True)
    k, _ = u.accept()
    socket.send_fds(k, [b"x"], [ls.fileno()])
    assert k.recv(1) == b"."           # the other uid is done with it
    c = socket.socket(); c.setsockopt(SOL, FAST, 1); c.connect(ls.getsockname())
    a, _ = ls.accept()
    c.sendall(b"mine"); ok = a.recv(4) == b"mine"
    print(json.dumps({"echo": ok, "client": c.getsockopt(SOL, FAST)}), flush=True)
    sys.stdin.read()
""")

# The other uid: takes the listener, asks for the fast path on it (set 1,
# then get), and reports what it got and which loopfast names it holds.
TAKER = textwrap.dedent("""
    import errno, json, os, socket, sys
    SOL, FAST = 0x4C46, 1
    u = socket.socket(socket.AF_UNIX); u.connect(sys.argv[1])
    _, fds, _, _ = socket.recv_fds(u, 1, 1)
    l = socket.socket(fileno=fds[0])
    out = {}
    try:
        l.setsockopt(SOL, FAST, 1); out["set"] = 0
    except OSError as e:
        out["set"] = errno.errorcode[e.errno]
    out["get"] = l.getsockopt(SOL, FAST)
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            s = socket.socket(fileno=int(fd))
        except OSError:
            continue
        try:
            n = s.getsockname() if s.family == socket.AF_UNIX else ""
            if isinstance(n, bytes) and b"loopfast/" in n:
                names.append(n.decode(errors="replace"))
        except OSError:
            pass
        finally:
            s.detach()
    out["names"] = names
    print(json.dumps(out), flush=True)
    u.send(b".")
""")


def test_listener_handed_to_another_uid_gets_no_rendezvous(build, shared_build):
    """A root server's opted-in listener passed by SCM_RIGHTS to a process
    of another uid (nobody, under --per-socket too) that asks for the fast
    path on it: the opt-in fails (EPERM), the option then answers 0, and
    that process holds none of loopfast's descriptors of the listener
    (its rendezvous is not handed to another uid by pidfd_getfd); the
    owner's own next connection is on the fast path at both ends."""
    nobody = pwd.getpwnam("nobody")
    d = tempfile.mkdtemp(prefix="lf-hand-")
    os.chmod(d, 0o755)
    path = os.path.join(d, "hand")
    owner = subprocess.Popen(PER_SOCKET + [sys.executable, "-c", OWNER, path], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(readline(owner))
        # nobody runs the shared copy of the build: this one may be in a
        # directory only root can enter (a clone in root's home)
        taker = subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                                str(shared_build / "loopfast"), *PER_SOCKET[1:], PY, "-c", TAKER, path],
                               capture_output=True, text=True, timeout=60)
        got = json.loads(taker.stdout)
        assert got == {"set": "EPERM", "get": 0, "names": []}, (got, taker.stderr)
        mine = json.loads(readline(owner))
        assert mine == {"echo": True, "client": 1}, mine
        assert len(kernel.unix_pairs([owner.pid], [owner.pid], port)) == 1
    finally:
        stop(owner)
        shutil.rmtree(d)


# A listener with a spin budget (LOOPFAST_SPIN 50), opted in; one client on
# the fast path; prints the budget each end reads and the port.
SPIN_LISTENER = textwrap.dedent("""
    import json, socket, sys
    SOL, FAST, SPIN = 0x4C46, 1, 2
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.setsockopt(SOL, FAST, 1); ls.listen(4)
    ls.setsockopt(SOL, SPIN, 50)
    c = socket.socket(); c.setsockopt(SOL, FAST, 1); c.connect(ls.getsockname()); a, _ = ls.accept()
    print(json.dumps({"port": ls.getsockname()[1], "listener": ls.getsockopt(SOL, SPIN),
                      "accepted": a.getsockopt(SOL, SPIN), "client": c.getsockopt(SOL, SPIN)}), flush=True)
    sys.stdin.read()
""")


def test_spin_set_on_a_listener_is_inherited(build):
    """A budget set on a listener (whose opt-in its accepted sockets
    inherit) goes to its accepted fast-path sockets, the ones that read
    and wait. Before the fix the set said yes, the listener read it back,
    and every accepted socket had none: nothing ever spun."""
    p, got = run_held(PER_SOCKET + [sys.executable, "-c", SPIN_LISTENER])
    try:
        assert (got["listener"], got["accepted"], got["client"]) == (50, 50, 0), got
        assert len(kernel.unix_pairs([p.pid], [p.pid], got["port"])) == 1
    finally:
        stop(p)


# A listener (IPv4 and IPv6) with options set after listen that TCP does
# not give to its accepted sockets: IP_OPTIONS (an accepted socket's come
# from its SYN: none here; IPv4 only), TCP_FASTOPEN and TCP_DEFER_ACCEPT
# (the accept queue's: an accepted socket has none, 0); and two that it
# does give: TCP_SAVE_SYN (1) and TCP_KEEPIDLE (77). Prints what the
# accepted socket reads, and the port, then holds its connection.
NOT_INHERITED = textwrap.dedent("""
    import json, socket, sys
    fam = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
    ls = socket.socket(fam); ls.bind(("::1" if sys.argv[1] == "6" else "127.0.0.1", 0)); ls.listen(4)
    opts = {"TCP_FASTOPEN": (socket.IPPROTO_TCP, 23, 5), "TCP_SAVE_SYN": (socket.IPPROTO_TCP, 27, 1),
            "TCP_KEEPIDLE": (socket.IPPROTO_TCP, 4, 77)}
    if fam == socket.AF_INET:
        opts["IP_OPTIONS"] = (socket.IPPROTO_IP, socket.IP_OPTIONS, b"\\x01\\x01\\x01\\x00")  # NOPs, EOL
    for level, opt, v in opts.values():
        ls.setsockopt(level, opt, v)
    c = socket.create_connection(ls.getsockname()[:2])
    # After the handshake (the connection is queued), so that its accept
    # does not wait for data (the doorbell carries none).
    opts["TCP_DEFER_ACCEPT"] = (socket.IPPROTO_TCP, 9, 5)
    ls.setsockopt(*opts["TCP_DEFER_ACCEPT"])
    a, _ = ls.accept()
    c.sendall(b"x"); a.recv(1)
    got = {k: (a.getsockopt(l, o, 40).hex() if isinstance(v, bytes) else a.getsockopt(l, o))
           for k, (l, o, v) in opts.items()}
    print(json.dumps({"port": ls.getsockname()[1], **got}), flush=True)
    sys.stdin.read()
""")


@pytest.mark.parametrize("family", ["4", "6"])
def test_listener_options_tcp_does_not_inherit(build, family):
    """An accepted fast-path socket answers, for the options set on its
    listener, what TCP's accepted socket answers (the same script on plain
    TCP is the control): TCP_FASTOPEN and TCP_DEFER_ACCEPT 0 (the queue is
    the listener's), TCP_SAVE_SYN 1, TCP_KEEPIDLE the listener's, and
    IPv4's IP_OPTIONS empty (an accepted socket's come from its SYN).
    Found in review: the claim copied every option the listener recorded
    (connect.c, carry_options), so the accepted socket read the listener's
    TCP_FASTOPEN and IP_OPTIONS; and a listener's TCP_SAVE_SYN was never
    recorded (its set pins, sockopt.c), so the accepted socket read 0."""
    tcp, want = run_held([sys.executable, "-c", NOT_INHERITED, family])
    stop(tcp)
    p, got = run_held([str(LOOPFAST), "run", "--", sys.executable, "-c", NOT_INHERITED, family])
    try:
        assert len(kernel.unix_pairs([p.pid], [p.pid], got["port"])) == 1  # on the fast path, both ends
        want.pop("port"), got.pop("port")
        assert got == want, f"loopfast {got}, TCP {want}"
    finally:
        stop(p)


# NOT_INHERITED's listener and connection in a static C program (argv[1]
# "6": IPv6), which only `loopfast run`'s seccomp supervisor reaches: prints
# the port and, for each option, what the accepted socket reads (IP_OPTIONS:
# its length), then holds the connection until its stdin closes.
NOT_INHERITED_C = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
static void show(int s, int level, int opt)
{
	unsigned char v[40] = { 0 };
	socklen_t l = sizeof(v);
	int r = getsockopt(s, level, opt, v, &l);
	printf(" %d", r ? -1 : level == IPPROTO_IP ? (int)l : *(int *)v);
}
int main(int argc, char **argv)
{
	int six = argc > 1 && argv[1][0] == '6', one = 1, five = 5, idle = 77;
	unsigned char nops[4] = { 1, 1, 1, 0 };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr *a = six ? (void *)&a6 : (void *)&a4;
	socklen_t al = six ? sizeof(a6) : sizeof(a4);
	int ls = socket(a->sa_family, SOCK_STREAM, 0), c = socket(a->sa_family, SOCK_STREAM, 0);
	bind(ls, a, al);
	listen(ls, 8);
	getsockname(ls, a, &al);
	setsockopt(ls, IPPROTO_TCP, TCP_FASTOPEN, &five, sizeof(five));
	setsockopt(ls, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof(one));
	setsockopt(ls, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	if (!six)
		setsockopt(ls, IPPROTO_IP, IP_OPTIONS, nops, sizeof(nops));
	connect(c, a, al);
	setsockopt(ls, IPPROTO_TCP, TCP_DEFER_ACCEPT, &five, sizeof(five)); /* queued: no wait for data */
	int s = accept(ls, NULL, NULL);
	printf("%d", ntohs(six ? a6.sin6_port : a4.sin_port));
	show(s, IPPROTO_TCP, TCP_FASTOPEN);
	show(s, IPPROTO_TCP, TCP_DEFER_ACCEPT);
	show(s, IPPROTO_TCP, TCP_SAVE_SYN);
	show(s, IPPROTO_TCP, TCP_KEEPIDLE);
	if (!six)
		show(s, IPPROTO_IP, IP_OPTIONS);
	printf("\n");
	fflush(stdout);
	char b;
	return read(0, &b, 1) < 0;
}
"""


@pytest.fixture(scope="module")
def not_inherited_static(tmp_path_factory):
    d = tmp_path_factory.mktemp("not_inherited")
    (d / "p.c").write_text(NOT_INHERITED_C)
    subprocess.run(["cc", "-O1", "-static", "-o", str(d / "p"), str(d / "p.c")], check=True, timeout=120)
    return str(d / "p")


@pytest.mark.parametrize("family", ["4", "6"])
def test_listener_options_tcp_does_not_inherit_supervised(build, not_inherited_static, family):
    """The same under `loopfast run`'s seccomp supervisor (a static
    program: the preload cannot reach it), which keeps the sets made on a
    listener and gives them to each connection accepted from it
    (supervise_sockopt.c, svo_inherit): not TCP_FASTOPEN, TCP_DEFER_ACCEPT
    and IP_OPTIONS, which it gave before (the same program without
    loopfast is the control)."""
    answers = answers_plain_and_under([not_inherited_static, family],
                                      [str(LOOPFAST), "run", "--mode", "seccomp", "--"], pairs=1)
    want = ["0", "0", "1", "77"] + (["0"] if family == "4" else [])
    assert answers["tcp"] == want, answers  # the control
    assert answers["lf"] == answers["tcp"], answers
