"""Redis + redis-benchmark: GET and SET at several client counts (-c 1 is
the latency case), no pipelining. redis-benchmark counts requests, not
seconds, so the request count is sized from the rate of the previous run of
the same path, workload and client count to last about --time seconds.

Redis keeps no data worth copying, so the plain ("tcp", "unix") and the
loopfast ("fast", "spin") servers simply start empty.
"""
import csv
import io
import os
import signal

from apps_fastpath import server_for, wrap
from apps_proc import free_port, log

NAME = "redis"
PACKAGES = ["redis-server", "redis-tools"]
WORKLOADS = ("get", "set")
DEFAULT_THREADS = (1, 10, 50)
UNIT = "req/s"


class App:
    def __init__(self, reaper, loopfast_kinds):
        self.reaper, self.lf_kinds = reaper, list(loopfast_kinds)
        self.dir = reaper.tempdir("loopfast-app-redis-")
        self.servers = {}  # "plain"/"fast"/"spin" -> (Server, port, socket)
        self.rate = {}

    def version(self):
        _, out, _ = self.reaper.run(["redis-server", "--version"], timeout=30)
        return out.strip()

    def _start(self, kind):
        run = os.path.join(self.dir, kind)
        os.makedirs(run, exist_ok=True)
        sock = os.path.join(run, "redis.sock")
        for attempt in range(3):
            port = free_port()
            argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--unixsocket", sock,
                    "--unixsocketperm", "700", "--dir", run, "--save", "", "--appendonly", "no",
                    "--daemonize", "no", "--pidfile", f"{run}/redis.pid", "--protected-mode", "no",
                    "--maxclients", "10000", "--logfile", ""]
            srv = self.reaper.start_server(f"redis-server ({kind})", wrap(argv, kind), logpath=f"{run}/redis.log",
                                           stop_signal=signal.SIGTERM, pidfile=f"{run}/redis.pid", port=port)
            self.servers[kind] = (srv, port, sock)
            if self.reaper.wait_ready(srv, ["redis-cli", "-s", sock, "ping"], timeout=30, interval=0.1, expect="PONG"):
                log(f"started redis-server ({kind}, pid {srv.pid}) on 127.0.0.1:{port}, socket {sock}")
                return
            self.servers.pop(kind)
            self.reaper.stop_server(srv)
            log(f"redis-server ({kind}) did not start on port {port} (attempt {attempt + 1}): {srv.log_tail(3)}")
        raise RuntimeError(f"redis-server ({kind}) did not start; see {run}/redis.log")

    def cli(self, path, *args):
        """Runs one redis-cli command over path; returns its output."""
        srv, port, sock = self.servers[server_for(path)]
        conn = ["-s", sock] if path == "unix" else ["-h", "127.0.0.1", "-p", str(port)]
        _, out, _ = self.reaper.run(wrap(["redis-cli", *conn, *args], path), timeout=30)
        return out

    def start_single(self, kind):
        self._start(kind)

    def setup(self, threads):
        self._start("plain")
        for k in self.lf_kinds:
            self._start(k)

    def _bench(self, path, workload, clients, requests):
        srv, port, sock = self.servers[server_for(path)]
        conn = ["-s", sock] if path == "unix" else ["-h", "127.0.0.1", "-p", str(port)]
        return wrap(["redis-benchmark", *conn, "-t", workload, "-c", str(clients), "-n", str(requests), "--csv"],
                    path)

    def warm(self, path, workload):
        """A short run that also gives the first guess of the rate (a longer
        run than --time is harmless; a shorter one may end before the fast
        path is sampled)."""
        _, out, _ = self.reaper.run(self._bench(path, workload, 4, 20000), timeout=120)
        self.key = (path, workload, "warm")
        self.parse(out)

    def port(self, path):
        return self.servers[server_for(path)][1]

    def client(self, path, workload, threads, seconds):
        self.key = (path, workload, threads)  # the spin path can be several times faster
        guess = self.rate.get((path, workload, "warm"), 60000) * min(threads, 4) / 4  # warm-up: 4 clients
        n = max(2000, int(self.rate.get(self.key, guess) * seconds))
        return self._bench(path, workload, threads, n), threads

    def parse(self, out):
        rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] not in ("test", "")]
        if not rows:
            raise RuntimeError(f"redis-benchmark printed no CSV row:\n{out[-1500:]}")
        r = rows[-1]
        rps = float(r[1])
        self.rate[self.key] = rps
        return {"tps": rps, "qps": rps, "p50_ms": float(r[4]), "p95_ms": float(r[5]), "p99_ms": float(r[6])}
