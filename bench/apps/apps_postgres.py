"""PostgreSQL + pgbench: select-only (-S) and TPC-B-like at several client
counts. PostgreSQL refuses to run as root, so the server runs through
`setpriv` as the postgres user; `loopfast run` wraps setpriv, which execs
postgres with the environment (and so the interposer) intact.

As for MariaDB, two identical servers run side by side from copies of one
initialised data directory: plain ("tcp", "unix") and one under loopfast for
each loopfast path ("fast", "spin").
"""
import glob
import os
import re
import shutil
import signal
import time

from apps_fastpath import loopfast_bin, server_for, wrap
from apps_proc import free_port, log

NAME = "postgres"
PACKAGES = ["postgresql", "postgresql-contrib"]
WORKLOADS = ("select-only", "tpcb-like")
STATEMENTS = {"select-only": 1, "tpcb-like": 7}  # round trips per transaction
DEFAULT_THREADS = (1, 8, 64)
UNIT = "TPS"
SCALE = 10
AS_POSTGRES = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]


def bindir():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    if not dirs:
        raise RuntimeError("no /usr/lib/postgresql/*/bin: install postgresql")
    return dirs[-1]


def _chown(path):
    shutil.chown(path, "postgres", "postgres")


def _preload_copy(d):
    """A copy of libloopfast-preload.so in d (mode 0755), for the postgres
    user: `loopfast run` preloads its library into setpriv, and postgres,
    exec'd as that user, must read it again, which it cannot in a build
    inside a mode-0700 home. The library is found as `loopfast run` finds
    it (LOOPFAST_PRELOAD, else next to the command or in the library
    directory beside it); it needs no other file of the build."""
    src = os.environ.get("LOOPFAST_PRELOAD")
    if not src:
        here = os.path.dirname(os.path.abspath(loopfast_bin()))
        for rel in ("", "../lib", "../lib64", "../lib/x86_64-linux-gnu"):
            src = os.path.normpath(os.path.join(here, rel, "libloopfast-preload.so"))
            if os.path.exists(src):
                break
    dst = os.path.join(d, "libloopfast-preload.so")
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o755)
    return dst


class App:
    def __init__(self, reaper, loopfast_kinds):
        self.reaper, self.lf_kinds = reaper, list(loopfast_kinds)
        self.bin = bindir()
        self.dir = reaper.tempdir("loopfast-app-postgres-")
        self.servers = {}  # "plain"/"fast"/"spin" -> (Server, port, socket dir)
        self.logdir = None

    def version(self):
        _, out, _ = self.reaper.run([f"{self.bin}/postgres", "--version"], timeout=30)
        return out.strip()

    def _start(self, kind, data):
        run = os.path.join(self.dir, kind)
        os.makedirs(run, exist_ok=True)
        _chown(run)
        env = None
        if wrap([], kind):  # under `loopfast run`: postgres must read the library
            env = dict(os.environ, LOOPFAST_PRELOAD=_preload_copy(self.dir))
        for attempt in range(3):
            port = free_port()
            argv = AS_POSTGRES + [f"{self.bin}/postgres", "-D", data, "-k", run, "-p", str(port),
                                  "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=600",
                                  "-c", "shared_buffers=256MB", "-c", "synchronous_commit=off",
                                  "-c", "logging_collector=off"]
            srv = self.reaper.start_server(f"postgres ({kind})", wrap(argv, kind), logpath=f"{run}/postgres.log",
                                           stop_signal=signal.SIGINT, pidfile=f"{data}/postmaster.pid", port=port,
                                           env=env)
            ping = [f"{self.bin}/pg_isready", "-q", "-h", run, "-p", str(port), "-U", "postgres"]
            if self.reaper.wait_ready(srv, ping, timeout=60):
                log(f"started postgres ({kind}, pid {srv.pid}) on 127.0.0.1:{port}, socket dir {run}, data {data}")
                self.servers[kind] = (srv, port, run)
                return
            self.reaper.stop_server(srv)
            log(f"postgres ({kind}) did not start on port {port} (attempt {attempt + 1}): {srv.log_tail(3)}")
        raise RuntimeError(f"postgres ({kind}) did not start; see {run}/postgres.log")

    def sql(self, kind, query, tcp=False):
        """Runs SQL as postgres over the socket (or TCP); returns psql -At output."""
        srv, port, sock = self.servers[kind]
        host = "127.0.0.1" if tcp else sock
        _, out, _ = self.reaper.run([f"{self.bin}/psql", "-X", "-At", "-h", host, "-p", str(port), "-U", "postgres",
                                     "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", query], timeout=120)
        return out

    def start_single(self, kind):
        """Initialises a data directory and starts one server; returns the
        data directory."""
        data = os.path.join(self.dir, f"data-{kind}")
        os.mkdir(data, 0o700)
        _chown(data)
        self.reaper.run(AS_POSTGRES + [f"{self.bin}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
                                       "--locale=C", "-E", "UTF8", "--no-sync"], timeout=300)
        self._start(kind, data)
        return data

    def setup(self, threads):
        data = self.start_single("plain")
        t0 = time.monotonic()
        self.reaper.run([f"{self.bin}/pgbench", "-i", "-q", "-s", str(SCALE), *self._conn("tcp")], timeout=600)
        log(f"pgbench -i -s {SCALE} in {time.monotonic() - t0:.1f}s")
        if self.lf_kinds:
            self.reaper.stop_server(self.servers.pop("plain")[0])
            for k in self.lf_kinds:
                self.reaper.run(["cp", "-a", data, os.path.join(self.dir, f"data-{k}")], timeout=300)
            self._start("plain", data)
            for k in self.lf_kinds:
                self._start(k, os.path.join(self.dir, f"data-{k}"))

    def _conn(self, path):
        srv, port, sock = self.servers[server_for(path)]
        return ["-h", sock if path == "unix" else "127.0.0.1", "-p", str(port), "-U", "postgres", "postgres"]

    def warm(self, path, workload):
        if workload == "tpcb-like":
            self.sql(server_for(path), "VACUUM ANALYZE")
        self.reaper.run(wrap([f"{self.bin}/pgbench", "-n", "-S", "-T", "1", "-c", "2", *self._conn(path)], path),
                        timeout=120)

    def port(self, path):
        return self.servers[server_for(path)][1]

    def client(self, path, workload, threads, seconds):
        """(argv, number of connections it opens). Per-transaction logs
        (-l) give the 95th percentile, which pgbench does not print."""
        if self.logdir:
            shutil.rmtree(self.logdir, ignore_errors=True)
        self.logdir = os.path.join(self.dir, "pgbench-log")
        os.makedirs(self.logdir)
        self.workload = workload
        jobs = min(threads, os.cpu_count() or 1)
        argv = [f"{self.bin}/pgbench", "-n", "-M", "prepared", "-b", workload, "-c", str(threads),
                "-j", str(jobs), "-T", str(seconds), "-l", f"--log-prefix={self.logdir}/tx", *self._conn(path)]
        return wrap(argv, path), threads

    def parse(self, out):
        m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
        if not m:
            raise RuntimeError(f"pgbench output has no tps line:\n{out[-1500:]}")
        tps = float(m.group(1))
        lat = []
        for f in glob.glob(f"{self.logdir}/tx*"):
            with open(f) as fh:
                lat.extend(int(line.split()[2]) for line in fh if line.strip())
        shutil.rmtree(self.logdir, ignore_errors=True)
        self.logdir = None
        if not lat:
            raise RuntimeError("pgbench wrote no transaction log")
        lat.sort()
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] / 1000.0
        return {"tps": tps, "qps": tps * STATEMENTS[self.workload], "p95_ms": p95}
