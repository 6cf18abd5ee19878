"""The seccomp supervisor (docs/supervisor.md) attacked as a second uid
would, and used as an unlucky user would: a program in a network
namespace of its own, one connect that waits, a privilege drop, a setuid
exec, a server of another uid that sends descriptors, a socket closed
by another thread while its connect is trapped. Each outcome is
compared with the same program without loopfast in the same test; paths
are proved from the kernel at both ends (the program's own descriptors,
not the supervisor's). The supervised client is progs/sv_sec.c, built
-static here; the attacker's server is attack/sv_evil.py, run as the
second user (`lfattacker`, created by test_security's fixture)."""
import json
import os
import pathlib
import pwd
import queue
import shutil
import signal
import subprocess
import tempfile
import textwrap
import threading
import time

import pytest

import kernel
from conftest import LOOPFAST, echo_server, readline, stop
from test_security import USER, attacker  # noqa: F401 (the fixture)
from test_supervisor import reaped  # noqa: F401 (the fixture: every program's group killed at the end)

PROGS = pathlib.Path(__file__).resolve().parent / "progs"
SUPERVISED = [str(LOOPFAST), "run", "--mode", "seccomp", "--"]
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")


@pytest.fixture(scope="module")
def svsec():
    """The directory (readable by every user) holding sv_sec built -static
    (path: d/svsec), checked to have no program interpreter."""
    d = tempfile.mkdtemp(prefix="lf-svsec-")
    os.chmod(d, 0o755)
    exe = os.path.join(d, "svsec")
    out = subprocess.run(["cc", "-O2", "-static", "-pthread", "-o", exe, str(PROGS / "sv_sec.c")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ph = subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True, timeout=30).stdout
    assert "INTERP" not in ph
    yield d
    shutil.rmtree(d)


def first_line(proc, timeout):
    """proc's next line, or None if none came within timeout (the test
    decides; readline() would fail it)."""
    box = queue.Queue()
    threading.Thread(target=lambda: box.put(proc.stdout.readline()), daemon=True).start()
    try:
        return box.get(timeout=timeout).strip()
    except queue.Empty:
        return None


def end_tree(proc):
    """Kills proc and every process under it (a supervisor's program is
    its child, not ours)."""
    for pid in reversed(kernel.process_tree(proc.pid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stop(proc)


# Runs in a network namespace of its own (unshare -n): brings its loopback
# up, listens on 127.0.0.1:PORT (the port the attacker holds outside),
# runs the client given (its port appended) and prints what each end got.
INNER = textwrap.dedent("""
    import json, socket, subprocess, sys
    port, client = int(sys.argv[1]), sys.argv[2:]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen(4)
    c = subprocess.Popen(client + [str(port)], stdout=subprocess.PIPE, text=True)
    s.settimeout(15)
    got = b""
    try:
        a, _ = s.accept(); a.settimeout(3)
        got = a.recv(100)
        if got:
            a.sendall(b"inner")
    except OSError:
        pass
    out = c.communicate(timeout=30)[0]
    print(json.dumps({"inner_got": got.decode(errors="replace"), "client": out.strip()}), flush=True)
""")


def test_program_in_its_own_network_namespace_keeps_its_connection(build, attacker, svsec):  # noqa: F811
    """A supervised tree with a network namespace of its own (unshare -n,
    a rootless container, a test harness): its client connects to its own
    namespace's 127.0.0.1:P. A process of another uid outside holds a
    listener on 127.0.0.1:P with a rendezvous. Without loopfast the inner
    server gets the request and the outsider nothing; under the supervisor
    the same must hold (loopback and abstract names are per namespace).
    Today the supervisor looks the listener up (sock_diag) and queues the
    hello in *its* namespace while the doorbell connects in the program's:
    the outsider reads "secret" and its "pwned" is the client's reply."""
    outcomes = []
    for cmd in ([], SUPERVISED):
        evil = attacker("sv_evil", "take")
        try:
            port = int(readline(evil))
            run = subprocess.run([*cmd, "unshare", "-n", PY, "-c", INNER, str(port), os.path.join(svsec, "svsec"),
                                  "secret"], capture_output=True, text=True, timeout=90)
            inner = json.loads(run.stdout.splitlines()[-1]) if run.stdout else run.stderr
            evil.stdin.close()  # it stops waiting for a hello
            outcomes.append((inner, json.loads(readline(evil, 60))))
        finally:
            stop(evil)
    plain, sup = outcomes
    assert plain == ({"inner_got": "secret", "client": "reply inner"}, {"got": ""}), plain  # the control
    assert sup == plain


# Listens with a full accept queue (backlog 0, two connections queued and
# never accepted: a further SYN is dropped and retried), and beside it a
# healthy listener; prints both ports, then holds them until killed.
FULL = textwrap.dedent("""
    import socket, time
    f = socket.socket(); f.bind(("127.0.0.1", 0)); f.listen(0)
    held = []
    for _ in range(2):
        q = socket.socket(); q.setblocking(False); q.connect_ex(f.getsockname()); held.append(q)
    ok = socket.socket(); ok.bind(("127.0.0.1", 0)); ok.listen(8)
    print(f.getsockname()[1], ok.getsockname()[1], flush=True)
    time.sleep(3600)
""")


def test_a_waiting_connect_does_not_hold_up_the_others(build, svsec):
    """One thread of a supervised program connects (blocking) to a server
    whose accept queue is full: TCP retries its SYN for as long as the
    queue stays full. Another thread then connects to a healthy server:
    over plain TCP that connect is done at once, while the first still
    waits. Under the supervisor it must be too (issue 21: "a supervisor
    that is slow or stuck on one connection never holds up the program's
    other calls"); today it waits until the first connect ends."""
    firsts = []
    for cmd in ([], SUPERVISED):
        srv = subprocess.Popen([PY, "-c", FULL], stdout=subprocess.PIPE, text=True)
        try:
            full, ok = readline(srv).split()
            c = subprocess.Popen([*cmd, os.path.join(svsec, "svsec"), "stall", full, ok], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            try:
                firsts.append(first_line(c, 10))
            finally:
                end_tree(c)
        finally:
            stop(srv)
    assert firsts[0] == "ok connected", firsts  # the control: plain TCP
    assert firsts[1] == "ok connected", firsts


def test_setuid_exec_in_the_tree_is_not_silent(build, svsec):
    """A setuid program in the supervised tree (here a copy of id(1),
    owned by nobody, mode 4755, run by root): without loopfast it runs as
    its owner. Under the supervisor, no_new_privs (which seccomp needs
    without CAP_SYS_ADMIN) would drop the set-uid; issue 21 asks for root
    to use its privilege instead of no_new_privs: root's supervisor
    installs the filter without it, and the set-uid takes effect, as
    without loopfast."""
    exe = os.path.join(svsec, "suid-id")
    shutil.copy("/usr/bin/id", exe)
    nobody = pwd.getpwnam("nobody")
    os.chown(exe, nobody.pw_uid, nobody.pw_gid)
    os.chmod(exe, 0o4755)
    plain = subprocess.run([exe, "-u"], capture_output=True, text=True, timeout=30)
    assert plain.stdout.strip() == str(nobody.pw_uid), plain  # the control: the set-uid took effect
    sup = subprocess.run([*SUPERVISED, exe, "-u"], capture_output=True, text=True, timeout=60)
    assert sup.returncode == 0 and sup.stdout == plain.stdout, (sup.stdout, sup.stderr)


def test_setuid_exec_under_a_user_supervisor_is_said(build, attacker, svsec, shared_build):  # noqa: F811
    """The same set-uid copy of id(1) run by the second user: without
    loopfast it runs as nobody. A user's supervisor must set no_new_privs
    (seccomp's rule without CAP_SYS_ADMIN), so the set-uid is lost; that
    must be said on stderr, naming the program, not happen silently (issue
    21). A plain exec in the same tree says nothing."""
    exe = os.path.join(svsec, "suid-id2")
    shutil.copy("/usr/bin/id", exe)
    nobody, user = pwd.getpwnam("nobody"), pwd.getpwnam(USER)
    os.chown(exe, nobody.pw_uid, nobody.pw_gid)
    os.chmod(exe, 0o4755)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    plain = subprocess.run([*as_user, exe, "-u"], capture_output=True, text=True, timeout=30)
    assert plain.stdout.strip() == str(nobody.pw_uid), plain  # the control: the set-uid took effect
    # the second user runs the shared copy of the build: this one may be in a
    # directory only root can enter (a clone in root's home)
    sup = subprocess.run([*as_user, str(shared_build / "loopfast"), *SUPERVISED[1:], "/bin/sh", "-c",
                          f"/usr/bin/id -u; {exe} -u"],
                         capture_output=True, text=True, timeout=60)
    assert sup.stdout.split() == [str(user.pw_uid)] * 2, (sup.stdout, sup.stderr)  # lost, as under no_new_privs
    said = [line for line in sup.stderr.splitlines() if "set-uid" in line]
    assert len(said) == 1 and exe in said[0] and "WITHOUT its privilege" in said[0], sup.stderr


# A loopfast server that accepts late: a full accept queue (backlog 0, two
# connections of its own queued) for its first two seconds, then accepts
# (and claims) everything; prints its port.
LATE = textwrap.dedent("""
    import socket, time
    f = socket.socket(); f.bind(("127.0.0.1", 0)); f.listen(0)
    held = []
    for _ in range(2):
        q = socket.socket(); q.setblocking(False); q.connect_ex(f.getsockname()); held.append(q)
    print(f.getsockname()[1], flush=True)
    time.sleep(2)
    conns = []
    while True:
        conns.append(f.accept()[0])
""")


def test_socket_closed_during_its_connect_leaves_the_new_file_alone(build, svsec):
    """A watchdog thread aborts a connect by closing its socket, and the
    number is taken by the next open (/dev/null here). Over TCP the connect
    ends on the closed socket's file and the number stays /dev/null. Under
    the supervisor the connect is performed on its copy (the server is
    under loopfast, so it is negotiated and switched), and ADDFD with SETFD
    puts the fast-path socket at that number: the program's /dev/null is
    closed behind its back and its number is now a socket."""
    ends = []
    for cmd in ([], SUPERVISED):
        srv = subprocess.Popen([str(LOOPFAST), "run", "--", PY, "-c", LATE], stdout=subprocess.PIPE, text=True)
        try:
            port = readline(srv).strip()
            out = subprocess.run([*cmd, os.path.join(svsec, "svsec"), "reuse", port], capture_output=True, text=True,
                                 timeout=60)
            ends.append(out.stdout.split("\n")[-2])
        finally:
            stop(srv)
    assert ends[0] == "fd file", ends  # the control: plain TCP
    assert ends[1] == "fd file", ends


def test_option_the_fast_path_cannot_keep_stays_tcp(build, svsec):
    """A supervised program sets SO_ZEROCOPY before it connects to a
    server under loopfast and sends with MSG_ZEROCOPY: over TCP the
    completion reaches its error queue; the preload keeps such a socket on
    plain TCP (sockopt.c's pinned options), and so must the supervisor
    (the kernel answers SO_ZEROCOPY, TCP_INQ, the timestamps and the rest
    to a getsockopt on its copy). Today it is switched to the fast path
    and the completion a program waits for before it reuses its buffer
    never comes."""
    srv = subprocess.Popen([str(LOOPFAST), "run", "--", PY, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = readline(srv).strip()
        outs = [subprocess.run([*cmd, os.path.join(svsec, "svsec"), "zerocopy", port], capture_output=True,
                               text=True, timeout=60).stdout.strip() for cmd in ([], SUPERVISED)]
    finally:
        stop(srv)
    assert outs[0] == "completion yes", outs  # the control: plain TCP
    assert outs[1] == "completion yes", outs


ECHO = echo_server()


def test_program_that_drops_its_uid_announces_nothing_as_root(build, attacker, svsec):  # noqa: F811
    """A root supervisor over a program that drops to another uid (the
    second user) before it makes its socket, then connects to a root
    server under loopfast. The hello must never carry the supervisor's
    identity for that uid's socket: the connection is plain TCP at both
    ends, or on the fast path with the client's Unix socket the program's
    uid's; and its bytes come back, as they do without loopfast in the
    same test. (Announced as root, the server, which asks sock_diag who
    owns the client's TCP socket, would find the second user and reset.)"""
    uid = pwd.getpwnam(USER).pw_uid
    srv = subprocess.Popen([str(LOOPFAST), "run", "--", PY, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = int(readline(srv))
        for cmd in ([], SUPERVISED):
            c = subprocess.Popen([*cmd, os.path.join(svsec, "svsec"), "drop", str(uid), str(port)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                assert readline(c).strip() == f"echo OK uid {uid}", cmd
                assert readline(c).strip() == "waiting"
                prog, servers = kernel.process_tree(c.pid), kernel.process_tree(srv.pid)
                tcp, fast = kernel.tcp_pairs(prog, servers, port), kernel.unix_pairs(prog, servers, port)
                if cmd:
                    assert len(tcp) + len(fast) == 1, (tcp, fast)
                    for p in fast:
                        owners = {os.stat(f"/proc/{pid}/fd/{fd}").st_uid for pid in prog
                                  for fd in os.listdir(f"/proc/{pid}/fd")
                                  if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{p.client_ino}]"}
                        assert owners == {uid}, owners
                else:
                    assert len(tcp) == 1 and not fast, (tcp, fast)
            finally:
                end_tree(c)
    finally:
        stop(srv)


def test_server_of_another_uid_passes_no_descriptor_to_a_supervised_client(build, attacker, svsec):  # noqa: F811
    """The attacker's server (a rendezvous made by hand, the doorbell
    claimed as loopfast's server does) sends a supervised client "hi" with
    one of its descriptors. The supervised program reads with recvmsg and
    room for SCM_RIGHTS, past any interposer: no descriptor arrives (the
    fast path's Unix socket refuses them, SO_PASSRIGHTS), as none can over
    plain TCP (the control, in the same test); the bytes do. The attack
    was in place: the client's connection is on the fast path to the
    attacker's process, from the kernel."""
    got = {}
    for cmd in ([], SUPERVISED):
        evil = attacker("sv_evil", "sendfd")
        try:
            port = int(readline(evil))
            c = subprocess.Popen([*cmd, os.path.join(svsec, "svsec"), "recvfd", str(port)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            try:
                line = readline(c).strip()
                assert readline(c).strip() == "waiting"
                fast = kernel.unix_pairs(kernel.process_tree(c.pid), [evil.pid], port)
                got[bool(cmd)] = (line, json.loads(readline(evil)), len(fast))
            finally:
                end_tree(c)
        finally:
            stop(evil)
    assert got[False] == ("got 2 fds 0", {"fast": False, "sendfds": got[False][1]["sendfds"]}, 0), got
    assert got[True][0] == "got 2 fds 0" and got[True][1]["fast"] and got[True][2] == 1, got
    assert got[True][1]["sendfds"] != "sent", got  # refused to the sender (SO_PASSRIGHTS off on 6.16 and later)


def test_answers_are_never_written_where_the_program_could_not_write(build, svsec):
    """getsockname, getpeername and getsockopt(SO_DOMAIN) on a supervised
    fast-path socket, asked to write into the program's read-only memory:
    the kernel says EFAULT over plain TCP (the control), and the
    supervisor, which writes the answers into the program, must too
    (process_vm_writev honours the page's protection; /proc/PID/mem, which
    the supervisor's privileges could open, would write through it: tried,
    all three then said yes). The connection is on the fast path, from the
    kernel, while the program asks."""
    srv = subprocess.Popen([str(LOOPFAST), "run", "--", PY, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = int(readline(srv))
        for cmd in ([], SUPERVISED):
            c = subprocess.Popen([*cmd, os.path.join(svsec, "svsec"), "rodata", str(port)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            try:
                assert readline(c).strip() == "names EFAULT EFAULT EFAULT ro intact", cmd
                assert readline(c).strip() == "waiting"
                deadline = time.monotonic() + 20  # the server's accept may come later than the answers
                while True:
                    fast = kernel.unix_pairs(kernel.process_tree(c.pid), kernel.process_tree(srv.pid), port)
                    if len(fast) == (1 if cmd else 0) or time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                assert len(fast) == (1 if cmd else 0), fast
            finally:
                end_tree(c)
    finally:
        stop(srv)
