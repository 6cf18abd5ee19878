/* `--compare-sockperf`: the same ping-pong measured by a peer tool.
 *
 * sockperf (the Debian package) runs a server and a ping-pong client on
 * loopback with the same message size, pinned like our sender and echoer
 * (client on the sender's CPU, server on the echoer's). With one socket
 * both block in recvfrom(), so the row to compare with is our `block` row.
 * sockperf prints half the round trip unless given --full-rtt; we pass it.
 * sockperf sizes its table of send times by the rate it expects, --mps
 * (600,000 a second unless given) times -t plus 1 s, and stops with
 * "ERROR: _seqN > m_maxSequenceNo" when a run sends more messages than
 * that: an average round trip under 1.1 us in a 2 s run, which the shm
 * tier with spinning makes (docs/shm.md, "Unmodified programs"). So the
 * client gets --mps SP_MPS: room for 12 M messages in a 2 s run (a
 * table of about 190 MB), and its pacing (one send per 250 ns at most)
 * is below any round trip seen here (the fastest, 0.28 us).
 * sockperf warms up for 400 ms of its -t and discards that part. It runs
 * once per repeat, right after the block rows, so that it sees the same
 * moments of a noisy machine as they do; its figures are medians over
 * repeats.
 *
 * TCP uses a free loopback port read back from the kernel; a Unix socket is
 * tried with a path for -i, which sockperf 3.7 rejects ("Invalid address"):
 * that row is then unavailable with sockperf's own words. The third run is
 * TCP with both ends under `loopfast run` (the unmodified-program path of
 * the fast path), compared with our block/fastpath row; while it runs we
 * look at the client's sockets in /proc and report the row unavailable if
 * its connection is still TCP. The fourth is the same under `loopfast run
 * --tier shm --spin-us N` (the shm tier for an unmodified program, both
 * ends spinning N us in their blocking calls), compared with our
 * block/fastpath-shm-spin row; its client must also map the tier's memfd
 * (/proc/PID/maps), or the row is unavailable.
 */
#include "latency.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SP_MPS "4000000" /* sockperf's --mps: its table's room (above) */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Starts argv with stdout+stderr into a pipe (*out) and pinned to cpu. */
static pid_t spawn(char *const argv[], int cpu, int *out)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		if (cpu >= 0) {
			cpu_set_t set;

			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			sched_setaffinity(0, sizeof(set), &set);
		}
		dup2(p[1], 1);
		dup2(p[1], 2);
		setpgid(0, 0);
		execvp(argv[0], argv);
		dprintf(1, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	*out = p[0];
	return pid;
}

/* Reads what fd has until EOF or the deadline; returns false on timeout. */
static bool slurp(int fd, char *buf, size_t len, size_t *used, double deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		double left = deadline - now_s();

		if (left <= 0)
			return false;
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		ssize_t n = read(fd, buf + *used, len - 1 - *used);

		if (n <= 0)
			return true;
		*used += (size_t)n;
		buf[*used] = '\0';
		if (*used >= len - 1)
			return true;
	}
}

static void stop(pid_t pid)
{
	int st;

	if (pid <= 0)
		return;
	kill(-pid, SIGTERM);
	for (int i = 0; i < 100; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return;
		usleep(10000);
	}
	kill(-pid, SIGKILL);
	waitpid(pid, &st, 0);
}

static double find_num(const char *out, const char *key)
{
	const char *p = strstr(out, key);

	return p ? strtod(p + strlen(key), NULL) : NAN;
}

static bool tcp_listening(unsigned port)
{
	char line[256], want[32];
	FILE *f = fopen("/proc/net/tcp", "r");
	bool found = false;

	snprintf(want, sizeof(want), "0100007F:%04X", port);
	while (f && !found && fgets(line, sizeof(line), f)) {
		char local[64], remote[64], state[8];

		if (sscanf(line, "%*s %63s %63s %7s", local, remote, state) == 3 && !strcmp(local, want) &&
		    !strcmp(state, "0A"))
			found = true;
	}
	if (f)
		fclose(f);
	return found;
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, len) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void first_line(char *dst, const char *src, const char *fallback)
{
	const char *p = src;

	/* The most telling line: an error if there is one. */
	const char *e = strstr(src, "Invalid");

	if (!e)
		e = strstr(src, "ERROR");
	if (!e)
		e = strstr(src, "cannot run");
	if (e) {
		while (e > src && e[-1] != '\n')
			e--;
		p = e;
	}
	if (!*p)
		p = fallback;
	snprintf(dst, LAT_REASON_LEN, "%.*s", (int)strcspn(p, "\n"), p);
}

/* Is process pid's connection on the fast path? Returns 1 when it holds a
 * Unix socket and no established TCP socket, 0 when it holds an
 * established TCP socket, -1 when it holds neither (gone, or not connected
 * yet). A fast-path client keeps its doorbell, closed by the server (in
 * CLOSE_WAIT), until its first read or wait on the connection. */
static int uses_unix_socket(pid_t pid)
{
	static const char *const tables[] = { "/proc/net/unix", "/proc/net/tcp", "/proc/net/tcp6" };
	char dir[64], link[64], path[384], line[512];
	bool has_unix = false, has_tcp = false;
	struct dirent *d;
	DIR *fds;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	fds = opendir(dir);
	while (fds && (d = readdir(fds))) {
		unsigned long ino;
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino) != 1)
			continue;
		for (int t = 0; t < 3; t++) {
			FILE *f = fopen(tables[t], "r");
			char want[32];
			bool found = false;

			snprintf(want, sizeof(want), " %lu", ino);
			while (f && !found && fgets(line, sizeof(line), f)) {
				char *hit = strstr(line, want);
				unsigned st = 0;

				found = hit && (hit[strlen(want)] == ' ' || hit[strlen(want)] == '\n');
				/* TCP: "sl: local remote st ...", 01 established */
				if (found && t > 0 && (sscanf(line, "%*s %*s %*s %x", &st) != 1 || st != 1))
					found = false;
			}
			if (f)
				fclose(f);
			if (found) {
				*(t == 0 ? &has_unix : &has_tcp) = true;
				break;
			}
		}
	}
	if (fds)
		closedir(fds);
	return has_tcp ? 0 : has_unix ? 1 : -1;
}

/* Whether pid maps the shm tier's memfd. */
static bool maps_tier(pid_t pid)
{
	char path[64], line[512];
	bool found = false;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, "memfd:loopfast-shm") != NULL;
	if (f)
		fclose(f);
	return found;
}

/* One sockperf run: kind 0 TCP, 1 Unix socket, 2 TCP under `loopfast run`
 * (both ends opted in through the preloaded interposer), 3 the same with
 * the shm tier and spinning. */
static void run_one(const struct lat_opts *o, struct lat_sockperf *s, int kind)
{
	char addr[108], port[16], size[24], secs[16], spin[16], srv_out[4096] = "", cli_out[16384] = "";
	size_t srv_used = 0, cli_used = 0;
	int srv_fd = -1, cli_fd = -1, pre = kind == 3 ? 7 : kind == 2 ? 3 : 0;
	bool unix_sock = kind == 1, ready = false;
	pid_t srv, cli = -1;
	double deadline;

	if (unix_sock) {
		snprintf(addr, sizeof(addr), "/tmp/loopfast-sockperf-%d.sock", (int)getpid());
		unlink(addr);
		strcpy(port, "0");
	} else {
		int p = free_port();

		if (p < 0) {
			s->status = LAT_FAILED;
			snprintf(s->reason, sizeof(s->reason), "no free loopback port: %s", strerror(errno));
			return;
		}
		strcpy(addr, "127.0.0.1");
		snprintf(port, sizeof(port), "%d", p);
	}
	snprintf(size, sizeof(size), "%zu", o->size < 14 ? 14 : o->size);
	snprintf(secs, sizeof(secs), "%d", LAT_SP_SECONDS);
	snprintf(spin, sizeof(spin), "%u", o->spin_us);
	char *self = (char *)(o->self_exe ? o->self_exe : "loopfast");
	/* The last pre words of the prefix: `loopfast run --`, or with the tier. */
	char *srv_argv[] = { self, "run", "--tier", "shm", "--spin-us", spin, "--", "sockperf", "server", "--tcp", "-i",
			     addr, "-p", port, NULL };
	char *cli_argv[] = { self, "run", "--tier", "shm", "--spin-us", spin, "--", "sockperf", "ping-pong", "--tcp", "-i",
			     addr, "-p", port, "-m", size, "-t", secs, "--full-rtt", "--mps", SP_MPS, NULL };
	if (kind == 2) { /* loopfast run -- */
		srv_argv[4] = cli_argv[4] = self;
		srv_argv[5] = cli_argv[5] = "run";
	}
	char how[64];
	snprintf(how, sizeof(how), kind == 3 ? "loopfast run --tier shm --spin-us %s -- " : pre ? "loopfast run -- " : "",
		 spin);
	snprintf(s->command, sizeof(s->command),
		 "%ssockperf server --tcp -i %s -p %s & %ssockperf ping-pong --tcp -i %s -p %s -m %s -t %s --full-rtt --mps %s",
		 how, addr, port, how, addr, port, size, secs, SP_MPS);
	srv = spawn(srv_argv + 7 - pre, o->pin ? o->cpu[1] : -1, &srv_fd);
	if (srv < 0) {
		s->status = LAT_UNAVAILABLE;
		snprintf(s->reason, sizeof(s->reason), "cannot start sockperf: %s", strerror(errno));
		return;
	}
	fcntl(srv_fd, F_SETFL, O_NONBLOCK);
	/* Wait until it listens, or dies. */
	deadline = now_s() + 5;
	while (now_s() < deadline) {
		struct stat st;
		int wst;

		ssize_t n = read(srv_fd, srv_out + srv_used, sizeof(srv_out) - 1 - srv_used);

		if (n > 0) {
			srv_used += (size_t)n;
			srv_out[srv_used] = '\0';
		}
		if (unix_sock ? stat(addr, &st) == 0 : tcp_listening((unsigned)atoi(port))) {
			ready = true;
			break;
		}
		if (waitpid(srv, &wst, WNOHANG) == srv) {
			slurp(srv_fd, srv_out, sizeof(srv_out), &srv_used, now_s() + 1);
			srv = -1;
			break;
		}
		usleep(10000);
	}
	if (!ready) {
		s->status = LAT_UNAVAILABLE;
		first_line(s->reason, srv_out, "sockperf server did not start listening within 5 s");
		goto out;
	}
	cli = spawn(cli_argv + 7 - pre, o->pin ? o->cpu[0] : -1, &cli_fd);
	if (cli < 0) {
		s->status = LAT_FAILED;
		snprintf(s->reason, sizeof(s->reason), "cannot start sockperf: %s", strerror(errno));
		goto out;
	}
	if (kind >= 2) {
		/* Under way (past its 400 ms warm-up start): is it on the fast path? */
		slurp(cli_fd, cli_out, sizeof(cli_out), &cli_used, now_s() + 0.7);
		int v = uses_unix_socket(cli);

		if (v == 0) {
			s->status = LAT_UNAVAILABLE;
			snprintf(s->reason, sizeof(s->reason), "sockperf's connection is plain TCP: the fast path was not negotiated");
			goto out;
		}
		if (v < 0 && !strstr(cli_out, "ERROR")) {
			s->status = LAT_UNAVAILABLE;
			snprintf(s->reason, sizeof(s->reason), "cannot tell whether sockperf's connection is on the fast path");
			goto out;
		}
		/* The client maps the rings when it takes the server's answer, at
		 * its first read: sockperf reads once its test starts, up to a
		 * second or so in. */
		bool ended = false;
		for (double until = now_s() + LAT_SP_SECONDS; kind == 3 && !ended && !maps_tier(cli) && now_s() < until;)
			ended = slurp(cli_fd, cli_out, sizeof(cli_out), &cli_used, now_s() + 0.05);
		if (kind == 3 && !maps_tier(cli)) {
			s->status = LAT_UNAVAILABLE;
			snprintf(s->reason, sizeof(s->reason), "sockperf's client does not map the shm tier's rings");
			goto out;
		}
	}
	if (!slurp(cli_fd, cli_out, sizeof(cli_out), &cli_used, now_s() + LAT_SP_SECONDS + 15)) {
		s->status = LAT_UNAVAILABLE;
		snprintf(s->reason, sizeof(s->reason), "sockperf ping-pong timed out");
		goto out;
	}
	double p50 = find_num(cli_out, "percentile 50.000 =");

	if (isnan(p50)) {
		s->status = LAT_FAILED;
		first_line(s->reason, cli_out, "no 'percentile 50.000' in sockperf's output");
	} else {
		s->rep_p50[s->nrep] = p50;
		s->rep_p99[s->nrep] = find_num(cli_out, "percentile 99.000 =");
		s->rep_mean[s->nrep] = find_num(cli_out, "avg-rtt=");
		s->nrep++;
	}
out:
	stop(cli);
	stop(srv);
	if (srv_fd >= 0)
		close(srv_fd);
	if (cli_fd >= 0)
		close(cli_fd);
	if (unix_sock)
		unlink(addr);
}

static const struct lat_row *find_row(const struct lat_report *rep, enum lat_style s, enum lat_transport t)
{
	for (unsigned i = 0; i < rep->nrows; i++)
		if (rep->rows[i].style == s && rep->rows[i].transport == t && rep->rows[i].status == LAT_OK)
			return &rep->rows[i];
	return NULL;
}

void lat_sockperf_init(struct lat_report *rep)
{
	rep->nsp = 4;
	rep->sp[0] = (struct lat_sockperf){ .transport = "tcp", .status = LAT_OK };
	rep->sp[1] = (struct lat_sockperf){ .transport = "unix", .status = LAT_OK };
	rep->sp[2] = (struct lat_sockperf){ .transport = "fastpath", .status = LAT_OK };
	rep->sp[3] = (struct lat_sockperf){ .transport = "fastpath-shm-spin", .status = LAT_OK };
}

void lat_sockperf_run(const struct lat_opts *o, struct lat_report *rep)
{
	fprintf(stderr, "bench latency: sockperf ping-pong over TCP, a Unix socket, TCP under loopfast run, and under "
			"loopfast run --tier shm --spin-us, %d s each\n", LAT_SP_SECONDS);
	for (unsigned i = 0; i < rep->nsp; i++)
		if (rep->sp[i].status == LAT_OK && rep->sp[i].nrep < LAT_MAX_REPEAT)
			run_one(o, &rep->sp[i], (int)i);
}

void lat_sockperf_finish(struct lat_report *rep)
{
	for (unsigned i = 0; i < rep->nsp; i++) {
		struct lat_sockperf *s = &rep->sp[i];

		static const enum lat_transport ours[] = { LAT_TCP, LAT_UDS, LAT_FASTPATH, LAT_FASTPATH_SHM_SPIN };
		s->ours = find_row(rep, LAT_BLOCK, ours[i]);
		if (s->status != LAT_OK)
			continue;
		s->p99 = lat_median(s->rep_p99, s->nrep);
		s->mean = lat_median(s->rep_mean, s->nrep);
		s->p50 = lat_median(s->rep_p50, s->nrep);
		s->p50_lo = s->rep_p50[0];
		s->p50_hi = s->rep_p50[s->nrep - 1];
	}
}
