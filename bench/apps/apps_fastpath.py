"""How a benchmark path is set up, and the proof that the fast path was used.

Paths: "tcp" (plain loopback TCP, no loopfast anywhere), "fast" (server and
client both under `loopfast run`), "unix" (the server's own Unix socket, the
reference the fast path's `uds` tier should match) and, on request, "spin"
(both under `loopfast run --spin-us SPIN_US`: the busy-polling tier),
"shm" (both under `loopfast run --tier shm`: the shared-memory rings) and
"shm-spin" (both under `loopfast run --tier shm --spin-us SPIN_US`).

While a client runs, a Sampler counts, from the kernel, the fast-path
connections the client holds to the server's port: connected Unix stream
pairs (sock_diag's UNIX_DIAG_PEER, `ss -x`) whose client end the client's
process tree holds (/proc/PID/fd), bound to loopfast's client name for that
port, and whose other end another process holds. A fast-path result with
fewer such connections than client connections is invalid: a silent
fallback to TCP is never reported as a fast-path figure, and loopfast's own
report is not taken for it. A client whose connections are too short-lived
to be counted (a new connection per request: conns is None) must have been
seen by the kernel with at least one, and its own counts (`loopfast status`
reads them from the client process) must show none on plain TCP.
`loopfast status` is still sampled, for the record and those counts.
"""
import json
import os
import re
import socket
import struct
import subprocess

from apps_proc import pid_alive
import threading
import time

PATHS = ("tcp", "fast", "unix", "spin", "shm", "shm-spin")
DEFAULT_PATHS = ("tcp", "fast", "unix")
LOOPFAST_PATHS = ("fast", "spin", "shm", "shm-spin")
SHM_PATHS = ("shm", "shm-spin")  # the client must map the rings
LABELS = {"tcp": "plain TCP", "fast": "loopfast", "unix": "Unix socket", "spin": "loopfast + spin",
          "shm": "loopfast + shm", "shm-spin": "loopfast + shm + spin"}
SPIN_US = 50  # the spin path's budget; `--spin-us` sets it


def server_for(path):
    """Which server a path talks to: "plain" (tcp, unix), or the loopfast path's own."""
    return path if path in LOOPFAST_PATHS else "plain"


def loopfast_bin():
    b = os.environ.get("LOOPFAST_BIN")
    if b:
        return b
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "loopfast")  # bench/apps -> the tree's build


def wrap(argv, path):
    """argv as run for a path or server kind (True means "fast"): under
    `loopfast run` for the loopfast paths, unchanged otherwise."""
    if path is True or path == "fast":
        return [loopfast_bin(), "run", "--", *argv]
    if path == "spin":
        return [loopfast_bin(), "run", "--spin-us", str(SPIN_US), "--", *argv]
    if path == "shm":
        return [loopfast_bin(), "run", "--tier", "shm", "--", *argv]
    if path == "shm-spin":
        return [loopfast_bin(), "run", "--tier", "shm", "--spin-us", str(SPIN_US), "--", *argv]
    return list(argv)


def check_run():
    """None when `loopfast run` works here, else the reason it does not."""
    try:
        p = subprocess.run([loopfast_bin(), "run", "--", "true"], capture_output=True, text=True, timeout=20)
    except OSError as e:
        return f"cannot execute {loopfast_bin()}: {e.strerror}"
    except subprocess.TimeoutExpired:
        return "'loopfast run -- true' hung"
    if p.returncode != 0:
        return "'loopfast run -- true' failed: " + (p.stderr.strip() or p.stdout.strip() or f"status {p.returncode}")
    return None


def status():
    """The parsed `loopfast --json status`, or raises RuntimeError."""
    p = subprocess.run([loopfast_bin(), "--json", "status"], capture_output=True, text=True, timeout=10)
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip() or p.stdout.strip() or f"status {p.returncode}"))
    return json.loads(p.stdout)


def count(st, port):
    """(listening, server-side, client-side) fast-path connections for port."""
    addr = f"127.0.0.1:{port}"
    listening = any(l.get("address") == addr for l in st.get("listeners", []))
    srv = sum(1 for c in st.get("connections", []) if c.get("role") == "server" and c.get("local") == addr)
    cli = sum(1 for c in st.get("connections", []) if c.get("role") == "client" and c.get("peer") == addr)
    return listening, srv, cli


def tcp_established(port):
    """Established TCP connections whose remote end is 127.0.0.1:port (the
    clients' side, from /proc/net/tcp): what fell back to plain TCP."""
    n = 0
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[2] == f"0100007F:{port:04X}" and fields[3] == "01":
                    n += 1
    except OSError:
        pass
    return n


def _unix_diag(nl, ino):
    """(name, peer inode or 0) of the Unix socket ino, from sock_diag
    (UDIAG_SHOW_NAME | UDIAG_SHOW_PEER), or None if it is not one."""
    nl.send(struct.pack("=IHHII", 40, 20, 1, 0, 0)  # nlmsghdr: SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST
            + struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, ino, 1 | 4, 0xFFFFFFFF, 0xFFFFFFFF))
    data = nl.recv(65536)
    length, kind = struct.unpack_from("=IH", data)
    if kind != 20:
        return None  # an error reply: no such Unix socket
    name, peer, off = "", 0, 16 + 16  # nlmsghdr, unix_diag_msg
    while off + 4 <= min(length, len(data)):
        alen, atype = struct.unpack_from("=HH", data, off)
        if alen < 4:
            break
        val = data[off + 4:off + alen]
        if atype == 0:  # UNIX_DIAG_NAME: an abstract name starts with NUL
            name = ("@" + val[1:].decode(errors="replace")) if val[:1] == b"\0" else val.decode(errors="replace")
        elif atype == 2:  # UNIX_DIAG_PEER
            peer = struct.unpack_from("=I", val)[0]
        off += (alen + 3) & ~3
    return name, peer


def kernel_fast(port, pid):
    """How many fast-path connections to 127.0.0.1:port the process pid
    holds (`loopfast run` execs the client: it is that process), from the
    kernel (see the module's note)."""
    held = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            held.add(int(t[8:-1]))
    name = re.compile(r"@loopfast/(\d+/)?[CT]/4/127\.0\.0\.1/\d+/127\.0\.0\.1/%d/" % port)
    n = 0
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4) as nl:  # NETLINK_SOCK_DIAG
        for ino in held:
            me = _unix_diag(nl, ino)
            if not me or not me[1] or me[1] in held or not name.match(me[0]):
                continue
            other = _unix_diag(nl, me[1])
            n += bool(other and other[1] == ino)
    return n


def kernel_shm(pid):
    """How many shared-memory rings (one mapping of loopfast's memfd per
    connection end on the tier) the process pid maps, from its
    /proc/PID/maps."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return sum("memfd:loopfast-shm" in line for line in f)
    except OSError:
        return 0


class Sampler:
    """Samples, in a thread while a client runs, the kernel (kernel_fast,
    every 5 ms or more, at most 5% of a CPU) and `loopfast status` (first after `first`
    seconds, then every `every` seconds), until the block ends. Set .pid to
    the client's PID: a sample that completes after the client has exited
    proves nothing and is counted as late instead."""

    def __init__(self, port, first=0.3, every=1.0, enabled=True):
        self.port, self.first, self.every, self.enabled = port, first, every, enabled
        self.samples, self.listening, self.server, self.client, self.tcp = 0, False, 0, 0, 0
        self.client_fast, self.client_tcp, self.client_why = 0, 0, {}
        self.error, self.pid, self.late = None, None, 0
        self.kernel_fast = self.kernel_shm = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        if self.enabled:
            self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.enabled:
            self._t.join()

    def _loop(self):
        # A benchmark that saturates the CPUs must not starve the sampler
        # past the end of the run: as root, this thread (and the status
        # processes it starts) run at a higher priority.
        if os.geteuid() == 0:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
            except OSError:
                pass
        # The kernel is looked at often (a client that opens a connection
        # per request holds each briefly), at most 5% of a CPU; status on
        # its fixed schedule, which the kernel's samples do not delay.
        start, due, next_k = time.monotonic(), self.first, 0.0
        while not self._stop.wait(max(0.0, min(due, next_k) - (time.monotonic() - start))):
            if time.monotonic() - start >= next_k:
                next_k = self._kernel(time.monotonic() - start)
            if time.monotonic() - start >= due:
                due += self.every
                self._status()

    def _kernel(self, now):
        """One kernel sample; returns when the next is due."""
        if self.pid is None:
            return now + 0.05
        t = time.monotonic()
        try:
            k = kernel_fast(self.port, self.pid)
        except OSError as e:
            self.error, k = f"sock_diag: {e}"[:200], 0
        shm = kernel_shm(self.pid)
        if pid_alive(self.pid):
            self.kernel_fast, self.kernel_shm = max(self.kernel_fast, k), max(self.kernel_shm, shm)
        return now + max(0.005, 20 * (time.monotonic() - t))

    def _status(self):
        self.tcp = max(self.tcp, tcp_established(self.port))
        try:
            st = status()
            listening, srv, cli = count(st, self.port)
        except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
            self.error = str(e)[:200]
            return
        if self.pid is not None and not pid_alive(self.pid):
            self.late += 1
            return
        self.samples += 1
        for p in st.get("processes", []):  # the client's own counts (newer loopfast)
            if p.get("pid") == self.pid:
                self.client_fast, self.client_tcp = max(self.client_fast, p["fast"]), max(self.client_tcp, p["tcp"])
                self.client_why = {k: v for k, v in p["counts"].items() if v and not k.startswith("fast")}
        self.listening |= listening
        self.server, self.client = max(self.server, srv), max(self.client, cli)

    def record(self):
        return {"samples": self.samples, "listening": self.listening, "server_conns": self.server,
                "client_conns": self.client, "tcp_conns": self.tcp, "late": self.late, "error": self.error,
                "client_fast": self.client_fast, "client_tcp": self.client_tcp, "client_tcp_why": self.client_why,
                "kernel_fast": self.kernel_fast, "kernel_shm": self.kernel_shm}


def verdict(path, proof, conns, fast_error=None):
    """(valid, reason) for one measurement given its Sampler record."""
    if path not in LOOPFAST_PATHS:
        if proof["kernel_fast"] or proof["server_conns"] or proof["client_conns"]:
            return False, f"{proof['kernel_fast']} fast-path connections on a plain-TCP path"
        return True, ""
    if fast_error:
        return False, fast_error
    if proof["samples"] == 0:
        return False, "no 'loopfast status' sample while the client ran: " + (
            proof["error"] or f"{proof.get('late', 0)} came too late (machine too busy?)")
    if conns is None:  # judged by the client's own counts
        if proof.get("client_tcp"):
            return False, (f"{proof['client_tcp']} of {proof['client_tcp'] + proof['client_fast']} connections "
                           f"took plain TCP: {proof.get('client_tcp_why')}")
        if not proof["kernel_fast"]:
            return False, "the kernel never showed the client on the fast path"
        if path in SHM_PATHS and not proof.get("kernel_shm"):
            return False, "the client never mapped a shared-memory ring"
        return True, ""
    if proof["kernel_fast"] < conns:
        return False, (f"only {proof['kernel_fast']} of {conns} connections seen on the fast path, "
                       f"{proof.get('tcp_conns', 0)} on plain TCP")
    if path in SHM_PATHS and proof.get("kernel_shm", 0) < conns:
        return False, f"only {proof.get('kernel_shm', 0)} of {conns} connections' rings mapped by the client"
    return True, ""


def samples_for(seconds):
    """(first, every): a fixed schedule, the same for every path so that
    sampling perturbs them alike: after 0.25 s, then every quarter of the
    run (at most every 0.5 s) until the client ends."""
    return 0.25, min(0.5, max(0.3, seconds / 4.0))
