"""Stress: 1000 concurrent connects (listen backlog 1100) to a prefork
server under loopfast, while the second user floods its rendezvous with
junk hellos and random workers are killed (SIGKILL). Every connection
completes or fails within 5 s (the bound only catches hangs: none may
hang, none may get another's bytes), and nothing leaks: the clients' and
the surviving workers' descriptor counts return to what they were. What
happened is what the attack should produce: the flood leaves room in the
rendezvous (3000 queued of its 4096), so every client is on the fast path
(the kernel's SO_DOMAIN at the client's end; and at both ends, from
sock_diag and /proc/PID/fd, the connections each killed worker held at the
moment it was killed), and every client is served except those whose
connection a killed worker held, which see what TCP shows (EOF, a reset).
And the load a server of another uid than its clients meets: more of their
hellos waiting for their SYNs than their share of the stash."""
import json
import os
import random
import signal
import time

import pytest

import kernel
from conftest import fast_path_pairs, process_tree, readline, stop
from test_security import (ENDED, as_root, attacker, echo_server, result, run_clients,  # noqa: F401
                           steady_fd_count)

N = 1000
BOUND_S = 5
SYS_ACCEPT4 = {"x86_64": 288, "aarch64": 242}[os.uname().machine]


def fd_targets(pid):
    """{fd: what it is} of a process (for the message when counts differ)."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


def netlink_inodes():
    with open("/proc/net/netlink") as f:
        return {int(line.split()[-1]) for line in list(f)[1:] if line.split()}


def tcp_inodes():
    return set(kernel.tcp_sockets())


def counted_fds(pid, want=None, timeout=30):
    """pid's descriptors less its netlink sockets (loopfast's sock_diag
    socket is made on first use, the first hello that needs the kernel's
    word, and kept for the life of the process: not a leak), once steady
    (or equal to want)."""
    deadline = time.monotonic() + timeout
    while True:
        nl = netlink_inodes()
        n = sum(1 for t in fd_targets(pid).values() if not (t.startswith("socket:[") and int(t[8:-1]) in nl))
        if (want is None and n == counted_fds.last.get(pid)) or n == want or time.monotonic() > deadline:
            counted_fds.last[pid] = n
            return n
        counted_fds.last[pid] = n
        time.sleep(0.2)


counted_fds.last = {}


def kill_outside_the_gap(pid, ino, rnd, look, timeout=10):
    """SIGKILLs a worker at a moment when its accepting thread is blocked in
    accept on the listener (inode ino): stops it, reads what each thread is
    in (/proc/PID/task/TID/syscall), and if that is not so, lets it go on
    for a moment and tries again. A worker killed between its accept and
    its claim leaves its client hanging, a known gap with a test of its own
    (test_security.py::test_worker_killed_between_accept_and_claim, issue
    13: the bell); until the bell lands, this test kills anywhere else.
    look() is called while the worker is stopped, and the kill waits for
    a stop where it is not 0 (the worker holds connections).
    Returns (how many stops it took, what look() returned)."""
    lfd = [fd for fd, t in fd_targets(pid).items() if t == f"socket:[{ino}]"]
    deadline = time.monotonic() + timeout
    tries = 0
    while time.monotonic() < deadline:
        tries += 1
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic() + 2
            while time.monotonic() < stopped:
                tasks = os.listdir(f"/proc/{pid}/task")
                states = [open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] for t in tasks]
                if all(st in "tT" for st in states):
                    break
            calls = [open(f"/proc/{pid}/task/{t}/syscall").read().split() for t in tasks]
            # A stop at the exit of an accept that has returned a connection
            # looks the same in /proc/PID/task/TID/syscall: then that
            # connection, not yet claimed, is a TCP socket in its table
            # (claimed ones are Unix sockets; every client here is fast).
            tcp = tcp_inodes() - {ino}
            unclaimed = [t for t in fd_targets(pid).values() if t.startswith("socket:[") and int(t[8:-1]) in tcp]
            if not unclaimed and any(c[:2] == [str(SYS_ACCEPT4), hex(fd)] for c in calls for fd in lfd):
                seen = look()
                if seen:  # the kill must meet connections it holds (a busy machine may not have any yet)
                    os.kill(pid, signal.SIGKILL)
                    return tries, seen
        except OSError:
            pass
        os.kill(pid, signal.SIGCONT)
        time.sleep(rnd.uniform(0.001, 0.02))
    pytest.fail(f"worker {pid} was never seen waiting in accept while holding connections within {timeout} s")


@pytest.mark.extra  # 15 s: make test-extra's, to keep make test within ten minutes
@pytest.mark.timeout(600)
@pytest.mark.parametrize("fam", ["4", "6"])
def test_thousand_connects_under_flood_with_workers_killed(build, attacker, fam):  # noqa: F811
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    srv, port, ino, _ = echo_server(attacker, fam, "--workers", 6, "--backlog", 1100, debug=True)
    flood = storm = None
    try:
        workers = list(map(int, readline(srv).split()[1:]))
        assert run_clients(attacker, fam, port, 30, "--conc", 10)["outcomes"] == {"ok": 30}
        base = {w: (steady_fd_count(w), counted_fds(w))[1] for w in workers}
        base_fds = {w: fd_targets(w) for w in workers}
        # Never more than 3000 queued: a rendezvous filled to its last place
        # makes the client that takes it wait forever, a known fault with a
        # test of its own (test_security.py::test_rendezvous_filled_to_its_last_place,
        # issue 13); until it is fixed, this flood stays clear of it.
        flood = attacker("flood", fam, port, ino, "--keep", 500, "--rate", 2000, "--max-queued", 3000)
        assert readline(flood, 120).strip() == "ready"
        # Connects spread over 1.5 s, each connection held up to 1 s between
        # two round trips: the kills meet connects in flight and held
        # connections alike.
        storm = as_root(attacker, "storm", fam, port, N, "--bound", BOUND_S, "--spread", 1.5, "--hold", 1)
        assert readline(storm, 60).strip() == "started"
        killed = rnd.sample(workers, 2)
        stops, held = [], []

        def fast_to(w):  # the storm's connections w holds, on the fast path at both ends (kernel state)
            return len(fast_path_pairs(process_tree(storm.pid), [w], port))
        for w in killed:
            time.sleep(rnd.uniform(0.1, 0.6))
            n, seen = kill_outside_the_gap(w, ino, rnd, lambda: fast_to(w))  # counted while w is stopped
            stops.append(n)
            held.append(seen)
        out = json.loads(readline(storm, 120))
        storm.wait(timeout=30)
        got = result(flood, 120)
        survivors = [w for w in workers if w not in killed]
        after = {w: counted_fds(w, base[w]) for w in survivors}
        leaked = {w: {fd: t for fd, t in fd_targets(w).items() if base_fds[w].get(fd) != t}
                  for w in survivors if after[w] != base[w]}
    finally:
        stop(srv, flood, storm)
    print(f"seed {seed}: killed {killed} ({stops} stops, holding {held} fast-path connections); {out['outcomes']}, "
          f"{out['fast']} of {N} on the fast path; "
          f"flood {got}; clients that hung: {out['hung_ports']}")
    if out["hung_ports"]:
        print(srv.errors())
    assert sum(out["outcomes"].values()) == N, out
    assert "hung" not in out["outcomes"] and "mismatch" not in out["outcomes"], (seed, out, srv.errors())
    assert out["fast"] == N, (seed, out)
    assert sum(held) > 0, (seed, held)  # the killed workers held fast-path connections, both ends seen
    assert set(out["outcomes"]) <= ENDED, (seed, out)
    assert N - out["outcomes"].get("ok", 0) <= sum(held), (seed, held, out)  # only those connections failed
    assert got["queued"] > 0, got  # the flood was in place
    assert out["fds_after"] == out["fds_before"], out
    assert after == {w: base[w] for w in survivors}, (base, after, leaked)


def test_late_syns_of_clients_of_another_uid(build, attacker):  # noqa: F811
    # No attack: a server of the second user (as a database runs as its
    # own), and 70 root clients whose hellos are queued but whose SYNs come
    # after another root client's connection (made by hand, to be exact:
    # concurrency makes it happen at random). The accept of that
    # connection meets the 70 hellos first and stashes them; each of the
    # 70 must then be served.
    srv = attacker("echo_server", "4", preload_lib=True)
    slow = None
    try:
        port, ino, _ = map(int, readline(srv).split())
        assert readline(srv).strip() == "listening"
        slow = as_root(attacker, "slow_clients", "4", port, ino, 70, loopfast=False)
        assert readline(slow).split() == ["queued", "70"]
        assert run_clients(attacker, "4", port, 1)["outcomes"] == {"ok": 1}
        slow.stdin.write("go\n")
        slow.stdin.flush()
        out = json.loads(readline(slow, 120))
    finally:
        stop(srv, slow)
    print(f"the late clients: {out}")
    assert out == {"ok": 70}, out
