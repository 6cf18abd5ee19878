"""nginx serving a small file and a 1 MiB file to wrk (keep-alive: each
connection carries request after request) and to ab (a new connection per
request, no keep-alive: what connection setup costs).

Workloads: keepalive-small, keepalive-1m (wrk), newconn-small, newconn-1m
(ab). The "threads" of the other applications are the clients' concurrent
connections here (wrk -c, ab -c).

Paths: nginx listens on 127.0.0.1 and on a Unix socket (plain server, paths
tcp and unix) or on 127.0.0.1 under `loopfast run` (fast, spin). wrk and ab
cannot connect to a Unix socket: on the unix path they run with
libloopfast-unixconnect.so preloaded (bench/apps/unixconnect/), which makes
their connect() to the plain server's 127.0.0.1:PORT a connect() to its Unix
socket under the same fd, and intercepts nothing else. So every path runs
the same unmodified wrk or ab.

Proof of the fast path: wrk holds its connections, so the server must show
as many fast-path connections as wrk opened (as for the other
applications). ab's connections last one request each, so its proof is its
own count (`loopfast status`, the client process's "fast" and "tcp"):
at least one fast-path connection and none on plain TCP.
"""
import json
import os
import re
import signal

from apps_fastpath import loopfast_bin, server_for, wrap
from apps_proc import free_port, log

NAME = "nginx"
PACKAGES = ["nginx", "wrk", "apache2-utils"]
WORKLOADS = ("keepalive-small", "keepalive-1m", "newconn-small", "newconn-1m")
DEFAULT_THREADS = (1, 10, 100, 1000)
UNIT = "req/s"
BODIES = {"small": ("small.html", 612), "1m": ("1m.bin", 1 << 20)}  # 612 B: nginx's own index.html

CONF = """daemon off;
master_process on;
worker_processes 2;
worker_rlimit_nofile 65536;
user {user};
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000000;
    keepalive_timeout 120;
    open_file_cache max=16;
    default_type application/octet-stream;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
{unix}        root {www};
    }}
}}
"""

# wrk's own report as one JSON line (latencies in microseconds).
WRK_LUA = """
done = function(summary, latency, requests)
    local e = summary.errors
    io.write(string.format('LFJSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, ' ..
        '"write": %d, "status": %d, "timeout": %d, "p50_us": %d, "p95_us": %d, "p99_us": %d}\\n',
        summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
        latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


def unixconnect_lib():
    """libloopfast-unixconnect.so next to the loopfast command (build tree)
    or in the library directory beside it (installed)."""
    d = os.path.dirname(os.path.abspath(loopfast_bin()))
    for rel in ("", "../lib", "../lib64", "../lib/x86_64-linux-gnu"):
        p = os.path.normpath(os.path.join(d, rel, "libloopfast-unixconnect.so"))
        if os.path.exists(p):
            return p
    raise RuntimeError(f"libloopfast-unixconnect.so not found next to {loopfast_bin()} (rebuild loopfast)")


class App:
    def __init__(self, reaper, loopfast_kinds):
        self.reaper, self.lf_kinds = reaper, list(loopfast_kinds)
        self.dir = reaper.tempdir("loopfast-app-nginx-")
        self.www = os.path.join(self.dir, "www")
        os.makedirs(self.www)
        for name, size in BODIES.values():
            with open(os.path.join(self.www, name), "wb") as f:
                f.write(os.urandom(size))
        with open(os.path.join(self.dir, "report.lua"), "w") as f:
            f.write(WRK_LUA)
        self.servers = {}  # "plain"/"fast"/"spin" -> (Server, port, socket)
        self.key = None
        self.rate = {}  # (path, workload, conns) -> req/s of the last run: sizes ab's -n
        # The workers run as the clients' user. With workers of another uid
        # (www-data) 2 of about 110,000 fast-path connections of ab's were
        # split (the server's claim finds the hello unvouched and serves the
        # connection as TCP while the client is on the Unix socket: ab counts
        # a receive error; `loopfast status` shows "unvouched"); see
        # docs/apps.md. Same uid: the claim needs no sock_diag lookup.
        import pwd
        self.user = pwd.getpwuid(os.geteuid()).pw_name

    def version(self):
        _, out, err = self.reaper.run(["nginx", "-v"], timeout=30)
        return (err or out).strip()

    def _start(self, kind):
        run = os.path.join(self.dir, kind)
        os.makedirs(run, exist_ok=True)
        sock = os.path.join(run, "nginx.sock")
        for attempt in range(3):
            port = free_port()
            unix = f"        listen unix:{sock} backlog=4096;\n" if kind == "plain" else ""
            conf = os.path.join(run, "nginx.conf")
            with open(conf, "w") as f:
                f.write(CONF.format(run=run, port=port, unix=unix, www=self.www, user=self.user))
            argv = ["nginx", "-p", run, "-c", conf, "-e", os.path.join(run, "error.log")]
            srv = self.reaper.start_server(f"nginx ({kind})", wrap(argv, kind), logpath=f"{run}/nginx.log",
                                           stop_signal=signal.SIGTERM, pidfile=f"{run}/nginx.pid", port=port)
            self.servers[kind] = (srv, port, sock)
            ping = ["ab", "-q", "-n", "1", "-c", "1", f"http://127.0.0.1:{port}/{BODIES['small'][0]}"]
            if self.reaper.wait_ready(srv, ping, timeout=30, interval=0.1, expect="Complete requests:      1"):
                log(f"started nginx ({kind}, pid {srv.pid}) on 127.0.0.1:{port}"
                    + (f", socket {sock}" if kind == "plain" else ""))
                return
            self.servers.pop(kind)
            self.reaper.stop_server(srv)
            log(f"nginx ({kind}) did not start on port {port} (attempt {attempt + 1}): {srv.log_tail(3)}")
        raise RuntimeError(f"nginx ({kind}) did not start; see {run}/error.log")

    def start_single(self, kind):
        self._start(kind)

    def setup(self, threads):
        self._start("plain")
        for k in self.lf_kinds:
            self._start(k)

    def port(self, path):
        return self.servers[server_for(path)][1]

    def url(self, path, workload):
        return f"http://127.0.0.1:{self.port(path)}/{BODIES[workload.split('-')[1]][0]}"

    def _wrap(self, argv, path):
        if path != "unix":
            return wrap(argv, path)
        _, port, sock = self.servers["plain"]
        return ["env", f"LD_PRELOAD={unixconnect_lib()}", f"LOOPFAST_UNIXCONNECT={port}={sock}", *argv]

    def _argv(self, path, workload, conns, seconds):
        url = self.url(path, workload)
        if workload.startswith("keepalive"):
            argv = ["wrk", "-t", str(min(2, conns)), "-c", str(conns), "-d", f"{seconds}s", "--timeout", "30s",
                    "-s", os.path.join(self.dir, "report.lua"), url]
        else:
            # ab keeps 32 bytes per request up to -n (it stops at -t or -n):
            # -n is three times what the last run's rate gives, from 5000 to
            # 4 million (128 MB).
            self.csv = os.path.join(self.dir, f"ab-{os.getpid()}.csv")
            rate = self.rate.get((path, workload, conns), self.rate.get((path, workload, "warm"), 20000))
            n = int(min(4_000_000, max(5000, conns * 2, rate * seconds * 3)))
            argv = ["ab", "-q", "-r", "-s", "30", "-t", str(seconds), "-n", str(n), "-c", str(conns),
                    "-e", self.csv, url]
        return self._wrap(argv, path)

    def warm(self, path, workload):
        self.key = (path, workload, "warm")
        _, out, _ = self.reaper.run(self._argv(path, workload, 4, 1), timeout=120)
        self.parse(out)

    def client(self, path, workload, threads, seconds):
        """wrk's connections last the run (proved by the server's count);
        ab's one request each (proved by the client's own counts: None)."""
        argv = self._argv(path, workload, threads, seconds)
        self.key = (path, workload, threads)
        return argv, threads if workload.startswith("keepalive") else None

    def parse(self, out):
        path, workload, _ = self.key
        size = BODIES[workload.split("-")[1]][1]
        if workload.startswith("keepalive"):
            m = re.search(r"^LFJSON (.*)$", out, re.M)
            if not m:
                raise RuntimeError(f"wrk printed no report:\n{out[-1500:]}")
            r = json.loads(m.group(1))
            if not r["requests"]:
                raise RuntimeError(f"wrk completed no request:\n{out[-1500:]}")
            errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
            if r["status"] or r["bytes"] < r["requests"] * size:
                raise RuntimeError(f"wrong answers: {r['status']} non-2xx, {r['bytes']} bytes for "
                                   f"{r['requests']} responses of {size}")
            rps = r["requests"] / (r["duration_us"] / 1e6)
            return {"tps": rps, "qps": rps, "p50_ms": r["p50_us"] / 1000, "p95_ms": r["p95_us"] / 1000,
                    "p99_ms": r["p99_us"] / 1000, "requests": r["requests"], "errors": errors,
                    "error_detail": {k: r[k] for k in ("connect", "read", "write", "timeout")}}
        got = {}
        for key, pat in (("complete", r"Complete requests:\s+(\d+)"), ("failed", r"Failed requests:\s+(\d+)"),
                         ("non2xx", r"Non-2xx responses:\s+(\d+)"), ("rps", r"Requests per second:\s+([\d.]+)"),
                         ("bytes", r"HTML transferred:\s+(\d+)")):
            m = re.search(pat, out)
            if m:
                got[key] = float(m.group(1))
        if "rps" not in got or not got.get("complete"):
            raise RuntimeError(f"ab printed no result:\n{out[-1500:]}")
        if got.get("failed") or got.get("non2xx") or got.get("bytes", 0) < got["complete"] * size:
            raise RuntimeError(f"wrong answers: {got}")
        pct = {}
        try:
            with open(self.csv) as f:
                for line in f:
                    a, _, b = line.strip().partition(",")
                    if a.isdigit():
                        pct[int(a)] = float(b)
        except OSError:
            pass
        self.rate[self.key] = got["rps"]
        return {"tps": got["rps"], "qps": got["rps"], "p50_ms": pct.get(50, float("nan")),
                "p95_ms": pct.get(95, float("nan")), "p99_ms": pct.get(99, float("nan")),
                "requests": int(got["complete"]), "errors": 0}
