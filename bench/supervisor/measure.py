"""The cost of a trapped connect under loopfast run's supervisor
(docs/supervisor.md): connections a second of one client doing
connect, 1-byte request, 1-byte response, close, in a loop, against one
blocking server, for four rows measured in interleaved rounds:
  tcp        the client and the server without loopfast
  preload    both under loopfast run, the client dynamically linked (the preload)
  seccomp    the server under loopfast run (preload), the client linked -static
             (the supervisor: connect and getsockname/getpeername trapped)
  seccomp-tcp  the static client under the supervisor against a plain server
             (every connect is trapped, and goes plain)
With --pingpong, the rows give the p50 (ns) of 64-byte round trips on one
connection (the data path: not trapped under the supervisor; the
/preload ratios are then of latencies, lower is better).
With --names, the same rows count getsockname calls a second on one
connection (trapped under the supervisor: answered on the fast path,
continued to the kernel on plain TCP), with --setopt setsockopt(TCP_NODELAY)
calls a second on one connection. With --nodelay, the client sets
TCP_NODELAY on every connection after its connect, as Go does (trapped
under the supervisor: answered by the library on the fast path,
continued on plain TCP). With --before BUILD, two more rows run the
static client under that build's supervisor (seccomp-before,
seccomp-tcp-before), against the same servers: a change's cost in the
same interleaved rounds.
Usage: python3 bench/supervisor/measure.py --build build [--time 2] [--rounds 3] [--names | --nodelay]
       [--before OTHER_BUILD]
Prints each row's rate per round, its median and its ratio to the preload's,
and the median and range of its per-round ratios to the preload's (the
same round: the figure to quote on a shared machine)."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CRR = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static int cmp_long(const void *x, const void *y) { return (*(const long *)x > *(const long *)y) - (*(const long *)x < *(const long *)y); }
int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	char c = 'x';
	if (!strcmp(argv[1], "server")) {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		socklen_t sl = sizeof(sa);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		bind(l, (void *)&sa, sizeof(sa));
		listen(l, 128);
		getsockname(l, (void *)&sa, &sl);
		printf("%d\n", ntohs(sa.sin_port));
		fflush(stdout);
		for (;;) {
			int a = accept(l, NULL, NULL);
			if (a < 0) continue;
			if (read(a, &c, 1) == 1 && c == 'P') { /* a ping-pong: echo 64-byte messages until the end */
				char m[64];
				ssize_t k;
				while ((k = read(a, m, sizeof(m))) > 0)
					if (write(a, m, (size_t)k) != k) break;
			} else if (c != 'P') {
				write(a, &c, 1);
			}
			close(a);
		}
	}
	sa.sin_port = htons((unsigned short)atoi(argv[1]));
	double secs = atof(argv[2]), t0 = now();
	long n = 0;
	int nodelay = argc > 3 && !strcmp(argv[3], "nodelay"), one = 1;
	if (argc > 3 && !strcmp(argv[3], "pingpong")) { /* 64-byte round trips on one connection: the p50 in ns */
		static long ns[4000000];
		char m[64] = { 0 }, p = 'P';
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (void *)&sa, sizeof(sa)) || write(s, &p, 1) != 1) { perror("connect"); return 1; }
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		for (t0 = now(); now() - t0 < secs && n < 4000000; n++) {
			double t = now();
			size_t got = 0;
			if (write(s, m, sizeof(m)) != sizeof(m)) { perror("write"); return 1; }
			while (got < sizeof(m)) {
				ssize_t k = read(s, m + got, sizeof(m) - got);
				if (k <= 0) { perror("read"); return 1; }
				got += (size_t)k;
			}
			ns[n] = (long)((now() - t) * 1e9);
		}
		qsort(ns, (size_t)n, sizeof(*ns), cmp_long);
		printf("%ld\n", ns[n / 2]);
		return 0;
	}
	if (argc > 3 && !strcmp(argv[3], "setopt")) { /* TCP_NODELAY on one connection, in a loop */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (void *)&sa, sizeof(sa))) { perror("connect"); return 1; }
		for (t0 = now(); now() - t0 < secs; n++)
			setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		printf("%.0f\n", n / (now() - t0));
		return 0;
	}
	if (argc > 3 && !nodelay) { /* "names": getsockname on one connection, in a loop */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in la;
		socklen_t ll;
		if (connect(s, (void *)&sa, sizeof(sa))) { perror("connect"); return 1; }
		for (t0 = now(); now() - t0 < secs; n++) {
			ll = sizeof(la);
			getsockname(s, (void *)&la, &ll);
		}
		printf("%.0f\n", n / (now() - t0));
		return la.sin_family == AF_INET ? 0 : 1;
	}
	while (now() - t0 < secs) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (void *)&sa, sizeof(sa))) { perror("connect"); return 1; }
		if (nodelay) /* its answer ignored, as Go does (before the supervisor answered it: EOPNOTSUPP) */
			setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (write(s, &c, 1) != 1 || read(s, &c, 1) != 1) { perror("crr"); return 1; }
		close(s);
		n++;
	}
	printf("%.0f\n", n / (now() - t0));
	return 0;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--time", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--names", action="store_true", help="getsockname calls a second instead of connections")
    ap.add_argument("--nodelay", action="store_true", help="TCP_NODELAY on every connection (as Go)")
    ap.add_argument("--setopt", action="store_true", help="setsockopt(TCP_NODELAY) calls a second on one connection")
    ap.add_argument("--pingpong", action="store_true", help="the p50 (ns) of 64-byte round trips on one connection")
    ap.add_argument("--before", help="another build whose supervisor gets rows too")
    a = ap.parse_args()
    lf = os.path.join(os.path.abspath(a.build), "loopfast")
    load0 = open("/proc/loadavg").read().strip()
    with tempfile.TemporaryDirectory(prefix="lf-svbench-") as d:
        src = os.path.join(d, "crr.c")
        open(src, "w").write(CRR)
        dyn, sta = os.path.join(d, "crr"), os.path.join(d, "crr-static")
        subprocess.run(["cc", "-O2", "-o", dyn, src], check=True)
        subprocess.run(["cc", "-O2", "-static", "-o", sta, src], check=True)
        servers = {}
        for name, cmd in (("lf", [lf, "run", "--", dyn, "server"]), ("plain", [dyn, "server"])):
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            servers[name] = (p, p.stdout.readline().strip())
        rows = {"tcp": ([sta], "plain"), "preload": ([lf, "run", "--", dyn], "lf"),
                "seccomp": ([lf, "run", "--", sta], "lf"), "seccomp-tcp": ([lf, "run", "--", sta], "plain")}
        if a.before:
            old = os.path.join(os.path.abspath(a.before), "loopfast")
            rows.update({"seccomp-before": ([old, "run", "--", sta], "lf"),
                         "seccomp-tcp-before": ([old, "run", "--", sta], "plain")})
        mode = ("names" if a.names else "nodelay" if a.nodelay else "setopt" if a.setopt else
                "pingpong" if a.pingpong else None)
        if mode:
            rows = {r: (*v, mode) for r, v in rows.items()}
        got = {r: [] for r in rows}
        try:
            for _ in range(a.rounds):
                for r, (cmd, srv, *extra) in rows.items():
                    out = subprocess.run([*cmd, servers[srv][1], str(a.time), *extra], capture_output=True, text=True,
                                         timeout=60 + a.time)
                    if out.returncode:
                        sys.exit(f"{r}: {out.stderr}")
                    got[r].append(int(out.stdout.split()[-1]))
        finally:
            for p, _ in servers.values():
                p.kill()
                p.wait()
    base = statistics.median(got["preload"])
    unit = "calls/s" if a.names or a.setopt else "p50 ns" if a.pingpong else "conn/s"
    print(f"{'row':12} {unit:7} per round{'':16} {'median':>8} {'/preload':>9}"
          f"  per round /preload: median (min-max)")
    for r, v in got.items():
        m = statistics.median(v)
        q = [x / p for x, p in zip(v, got["preload"])]
        print(f"{r:12} {' '.join(str(x) for x in v):32} {m:8.0f} {m / base:9.2f}"
              f"  {statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f})")
    for r in [r for r in got if r.endswith("-before")]:
        q = [x / y for x, y in zip(got[r[:-len("-before")]], got[r])]
        print(f"{r[:-len('-before')]} / {r}, per round: median {statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f})")
    print("load average before:", load0, " after:", open("/proc/loadavg").read().strip())


main()
