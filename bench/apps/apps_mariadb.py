"""MariaDB + sysbench: the seed 001 experiment (oltp_read_write and
oltp_point_select at a list of thread counts).

Two identical servers run side by side from copies of one prepared data
directory: a plain one (paths "tcp" and "unix") and one under `loopfast run`
for each loopfast path ("fast", "spin"). Only the one being measured is busy.
"""
import os
import re
import shutil
import signal
import time

from apps_fastpath import server_for, wrap
from apps_proc import free_port, log

NAME = "mariadb"
PACKAGES = ["mariadb-server", "mariadb-client", "sysbench"]
WORKLOADS = ("oltp_read_write", "oltp_point_select")
DEFAULT_THREADS = (1, 8, 64)
UNIT = "TPS"
TABLES, TABLE_SIZE = 4, 10000
USER = PASSWORD = DB = "sbtest"


def _bin(name):
    for d in ("/usr/sbin", "/usr/bin"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return name


class App:
    def __init__(self, reaper, loopfast_kinds):
        self.reaper, self.lf_kinds = reaper, list(loopfast_kinds)
        self.dir = reaper.tempdir("loopfast-app-mariadb-")
        self.servers = {}  # "plain"/"fast"/"spin" -> (Server, port, socket)

    def version(self):
        _, out, _ = self.reaper.run([_bin("mariadbd"), "--version"], timeout=30)
        return out.strip()

    def _start(self, kind, datadir):
        run = os.path.join(self.dir, kind)
        os.makedirs(run, exist_ok=True)
        sock = os.path.join(run, "mysqld.sock")
        for attempt in range(3):
            port = free_port()
            argv = [_bin("mariadbd"), "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
                    f"--port={port}", "--bind-address=127.0.0.1", "--user=root",
                    f"--pid-file={run}/mariadbd.pid", f"--log-error={run}/mariadbd.err",
                    "--skip-name-resolve", "--max-connections=1100", "--max-prepared-stmt-count=200000",
                    "--innodb-buffer-pool-size=256M", "--innodb-flush-log-at-trx-commit=2",
                    "--table-open-cache=4000", "--thread-cache-size=600"]
            srv = self.reaper.start_server(f"mariadbd ({kind})", wrap(argv, kind), logpath=f"{run}/stdout.log",
                                           stop_signal=signal.SIGTERM, pidfile=f"{run}/mariadbd.pid", port=port)
            srv.logpath = f"{run}/mariadbd.err"
            ping = [_bin("mariadb-admin"), "--no-defaults", "-S", sock, "-uroot", "ping"]
            if self.reaper.wait_ready(srv, ping, timeout=60):
                log(f"started mariadbd ({kind}, pid {srv.pid}) on 127.0.0.1:{port}, socket {sock}, data {datadir}")
                self.servers[kind] = (srv, port, sock)
                return
            self.reaper.stop_server(srv)
            log(f"mariadbd ({kind}) did not start on port {port} (attempt {attempt + 1}): {srv.log_tail(3)}")
        raise RuntimeError(f"mariadbd ({kind}) did not start; see {run}/mariadbd.err")

    def sql(self, kind, query, tcp=False):
        """Runs SQL as root over the socket (or as the benchmark user over
        TCP) and returns the tab-separated output."""
        srv, port, sock = self.servers[kind]
        if tcp:
            argv = [_bin("mariadb"), "--no-defaults", "-h127.0.0.1", f"-P{port}", f"-u{USER}", f"-p{PASSWORD}", DB]
        else:
            argv = [_bin("mariadb"), "--no-defaults", "-S", sock, "-uroot"]
        _, out, _ = self.reaper.run(argv + ["-N", "-B", "-e", query], timeout=60)
        return out

    def start_single(self, kind):
        """Initialises a data directory and starts one server with the
        benchmark database and user; returns the data directory."""
        data = os.path.join(self.dir, f"data-{kind}")
        self.reaper.run([_bin("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
                         "--auth-root-authentication-method=normal", "--skip-test-db"], timeout=300)
        self._start(kind, data)
        self.sql(kind, f"CREATE DATABASE {DB}; "
                 + "".join(f"CREATE USER '{USER}'@'{h}' IDENTIFIED BY '{PASSWORD}'; "
                           f"GRANT ALL ON {DB}.* TO '{USER}'@'{h}'; " for h in ("127.0.0.1", "localhost")))
        return data

    def setup(self, threads):
        data = self.start_single("plain")
        t0 = time.monotonic()
        for wl in ("oltp_read_write",):
            self.reaper.run(self._sysbench(wl, "tcp", 2, 0) + ["prepare"], timeout=600)
        log(f"sysbench prepare: {TABLES} tables x {TABLE_SIZE} rows in {time.monotonic() - t0:.1f}s")
        if self.lf_kinds:
            self.reaper.stop_server(self.servers.pop("plain")[0])
            for k in self.lf_kinds:
                shutil.copytree(data, os.path.join(self.dir, f"data-{k}"), symlinks=True)
            self._start("plain", data)
            for k in self.lf_kinds:
                self._start(k, os.path.join(self.dir, f"data-{k}"))

    def _sysbench(self, workload, path, threads, seconds):
        srv, port, sock = self.servers[server_for(path)]
        conn = [f"--mysql-socket={sock}"] if path == "unix" else ["--mysql-host=127.0.0.1", f"--mysql-port={port}"]
        argv = ["sysbench", workload, "--db-driver=mysql", *conn, f"--mysql-user={USER}",
                f"--mysql-password={PASSWORD}", f"--mysql-db={DB}", f"--tables={TABLES}",
                f"--table-size={TABLE_SIZE}", f"--threads={threads}", "--percentile=95"]
        if seconds:
            argv += [f"--time={seconds}", "--events=0", "--report-interval=0"]
        return wrap(argv, path)

    def warm(self, path, workload):
        """A short run so that the buffer pool and the thread cache are warm."""
        self.reaper.run(self._sysbench(workload, path, 4, 1) + ["run"], timeout=120)

    def port(self, path):
        return self.servers[server_for(path)][1]

    def client(self, path, workload, threads, seconds):
        """(argv, number of connections it opens)."""
        return self._sysbench(workload, path, threads, seconds) + ["run"], threads

    @staticmethod
    def parse(out):
        def num(pattern):
            m = re.search(pattern, out)
            if not m:
                raise RuntimeError(f"sysbench output has no '{pattern}':\n{out[-1500:]}")
            return float(m.group(1))
        return {"tps": num(r"transactions:\s+\d+\s+\(([\d.]+) per sec"),
                "qps": num(r"queries:\s+\d+\s+\(([\d.]+) per sec"),
                "p95_ms": num(r"95th percentile:\s+([\d.]+)"),
                "errors": num(r"ignored errors:\s+(\d+)")}
