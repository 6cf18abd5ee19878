"""How a benchmark path is set up, and the proof that the fast path was used.

Paths: "tcp" (plain loopback TCP, no loopfast anywhere), "fast" (server and
client both under `loopfast run`), "unix" (the server's own Unix socket, the
reference the fast path's `uds` tier should match) and, on request, "spin"
(both under `loopfast run --spin-us SPIN_US`: the busy-polling tier).

While a client runs, a Sampler polls `loopfast --json status` and counts the
fast-path connections to the server's port. A fast-path result with fewer
server-side fast-path connections than client connections is invalid: a
silent fallback to TCP is never reported as a fast-path figure. A client
whose connections are too short-lived to be seen (a new connection per
request: conns is None) is judged by its own counts instead, which status
reads from the client process: at least one connection on the fast path and
none on plain TCP.
"""
import json
import os
import subprocess

from apps_proc import pid_alive
import threading
import time

PATHS = ("tcp", "fast", "unix", "spin")
DEFAULT_PATHS = ("tcp", "fast", "unix")
LOOPFAST_PATHS = ("fast", "spin")
LABELS = {"tcp": "plain TCP", "fast": "loopfast", "unix": "Unix socket", "spin": "loopfast + spin"}
SPIN_US = 50  # the spin path's budget; `--spin-us` sets it


def server_for(path):
    """Which server a path talks to: "plain" (tcp, unix), "fast" or "spin"."""
    return path if path in LOOPFAST_PATHS else "plain"


def loopfast_bin():
    b = os.environ.get("LOOPFAST_BIN")
    if b:
        return b
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "build", "loopfast")


def wrap(argv, path):
    """argv as run for a path or server kind (True means "fast"): under
    `loopfast run` for the loopfast paths, unchanged otherwise."""
    if path is True or path == "fast":
        return [loopfast_bin(), "run", "--", *argv]
    if path == "spin":
        return [loopfast_bin(), "run", "--spin-us", str(SPIN_US), "--", *argv]
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


class Sampler:
    """Samples `loopfast status` in a thread while a client runs: first
    after `first` seconds, then every `every` seconds, until the block ends.
    Set .pid to the client's PID: a sample that completes after the client
    has exited proves nothing and is counted as late instead."""

    def __init__(self, port, first=0.3, every=1.0, enabled=True):
        self.port, self.first, self.every, self.enabled = port, first, every, enabled
        self.samples, self.listening, self.server, self.client, self.tcp = 0, False, 0, 0, 0
        self.client_fast, self.client_tcp, self.client_why = 0, 0, {}
        self.error, self.pid, self.late = None, None, 0
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
        wait = self.first
        while not self._stop.wait(wait):
            wait = self.every
            self.tcp = max(self.tcp, tcp_established(self.port))
            try:
                st = status()
                listening, srv, cli = count(st, self.port)
            except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
                self.error = str(e)[:200]
                continue
            if self.pid is not None and not pid_alive(self.pid):
                self.late += 1
                continue
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
                "client_fast": self.client_fast, "client_tcp": self.client_tcp, "client_tcp_why": self.client_why}


def verdict(path, proof, conns, fast_error=None):
    """(valid, reason) for one measurement given its Sampler record."""
    if path not in LOOPFAST_PATHS:
        if proof["server_conns"] or proof["client_conns"]:
            return False, f"{proof['server_conns']} fast-path connections on a plain-TCP path"
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
        if not proof.get("client_fast"):
            return False, "no fast-path connection counted for the client"
        return True, ""
    if proof["server_conns"] < conns:
        return False, (f"only {proof['server_conns']} of {conns} connections seen on the fast path, "
                       f"{proof.get('tcp_conns', 0)} on plain TCP")
    return True, ""


def samples_for(seconds):
    """(first, every): a fixed schedule, the same for every path so that
    sampling perturbs them alike: after 0.25 s, then every quarter of the
    run (at most every 0.5 s) until the client ends."""
    return 0.25, min(0.5, max(0.3, seconds / 4.0))
