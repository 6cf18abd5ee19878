/* `loopfast bench stream --idle N`: what N idle connections cost, from the
 * kernel. For each path (tcp, fast, fast+shm) a server process accepts N
 * connections from a client process; once both hold them all (and, with
 * --burst B, each connection has carried B bytes each way, every byte
 * checked, and gone idle: each end waits on its connections with epoll,
 * as a server does), the parent reads each process's VmRSS
 * (/proc/PID/status), the Rss and Pss of its mappings of the tier's memfd
 * (/proc/PID/smaps, "memfd:loopfast-shm") and how many there are, and the
 * system's Shmem (/proc/meminfo), and reports them per connection against
 * what each process held before it opened any (docs/shm.md, "Memory").
 *
 * The path is the kernel's word: fast and fast+shm rows check 17
 * connections spread over each end's with kpath_fast_end (each look reads
 * the peer's descriptors: all of them would take minutes), and a fast+shm
 * row needs N mappings of the memfd in the server and in the clients; a row that did not get its path
 * is reported unavailable. RLIMIT_NOFILE is raised to what N needs (up to
 * the hard limit, which root may raise). */
#include "cmdline.h"
#include "kpath.h"
#include "loopfast.h"
#include "stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PATTERN 251
/* The clients: as many as the descriptor limit asks (a fast-path client
 * holds two descriptors a connection). */
#define MAX_ENDS 9

/* What the two processes share with the parent (a MAP_SHARED page). */
struct idle_run {
	uint16_t port;
	int ends;                    /* the server (0) and its clients (1..ends-1) */
	pid_t pid[MAX_ENDS];
	_Atomic int stage[MAX_ENDS]; /* per end: 1 listening/ready, 2 holds all, 3 idle (measure), 4 let go, -1 failed */
	long rss0_kb[MAX_ENDS];      /* VmRSS before any connection */
	long pte0_kb[MAX_ENDS];      /* VmPTE (page tables: kernel memory, not in VmRSS) before */
	_Atomic unsigned long long connects, accepts;
	char why[160];
};

struct mem {
	long vmrss_kb, vmpte_kb, memfd_rss_kb, memfd_pss_kb;
	long maps;
};

static const char *const names[] = { "tcp", "fast", "fast+shm" };

/* The number after "key:" in a /proc file of "Key: N kB" lines, or -1. */
static long file_kb(const char *path, const char *key)
{
	char line[256];
	long v = -1;
	size_t n = strlen(key);
	FILE *f = fopen(path, "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

static long status_kb(pid_t pid, const char *key)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	return file_kb(path, key);
}

/* The process's VmRSS and, over its mappings of the tier's memfd, their
 * number and the sum of their Rss and Pss. */
static void read_mem(pid_t pid, struct mem *m)
{
	char path[64], line[512];
	bool ours = false;

	memset(m, 0, sizeof(*m));
	m->vmrss_kb = status_kb(pid, "VmRSS");
	m->vmpte_kb = status_kb(pid, "VmPTE");
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');
		if (sp && sp > line && memchr(line, '-', (size_t)(sp - line))) { /* a mapping's first line */
			ours = strstr(line, "memfd:loopfast-shm") != NULL;
			m->maps += ours;
		} else if (ours && !strncmp(line, "Rss:", 4)) {
			m->memfd_rss_kb += strtol(line + 4, NULL, 10);
		} else if (ours && !strncmp(line, "Pss:", 4)) {
			m->memfd_pss_kb += strtol(line + 4, NULL, 10);
		}
	}
	if (f)
		fclose(f);
}

__attribute__((noreturn, format(printf, 3, 4))) static void fail(struct idle_run *r, int end, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (!r->why[0])
		vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	r->stage[end] = -1;
	_exit(1);
}

static void nofile(struct idle_run *r, int end, unsigned long long n)
{
	struct rlimit l;
	rlim_t want = (rlim_t)n * 4 + 64; /* a fast-path connect holds a few descriptors for a moment */

	if (getrlimit(RLIMIT_NOFILE, &l))
		fail(r, end, "getrlimit: %s", strerror(errno));
	if (l.rlim_max < want) {
		struct rlimit up = { want, want }; /* CAP_SYS_RESOURCE may raise the hard limit */
		if (!setrlimit(RLIMIT_NOFILE, &up))
			return;
		want = l.rlim_max; /* else what it allows: a connection holds one for good */
	}
	l.rlim_cur = want;
	if (want < (rlim_t)n + 16 || setrlimit(RLIMIT_NOFILE, &l))
		fail(r, end, "RLIMIT_NOFILE %llu: %s (raise the hard limit: ulimit -Hn)", (unsigned long long)want,
		     strerror(errno));
}

static void opt_in(struct idle_run *r, int end, int path, int fd)
{
	int e;
	if (path == 0)
		return;
	if ((e = lf_enable_fast_path(fd)) < 0 || (path == 2 && (e = lf_set_tier(fd, LF_TIER_SHM)) < 0))
		fail(r, end, "opt-in: %s", lf_strerror(e));
}

/* Waits (without a deadline: the parent has one) until the stage of ends
 * [from, to) is at least v; leaves if any end failed. */
static void await(struct idle_run *r, int from, int to, int v)
{
	for (int e = from; e < to; e++)
		while (r->stage[e] < v) {
			for (int f = 0; f < r->ends; f++)
				if (r->stage[f] < 0)
					_exit(1);
			usleep(1000);
		}
}

/* Whether fd is the fast path's end towards one of the ends [from, to). */
static bool fast_to(struct idle_run *r, int fd, int from, int to)
{
	for (int e = from; e < to; e++)
		if (kpath_fast_end(fd, r->pid[e]) == 1)
			return true;
	return false;
}

static void io_all(struct idle_run *r, int end, int fd, unsigned long long bytes, bool out)
{
	unsigned char buf[65536];
	unsigned long long done = 0;

	while (done < bytes) {
		size_t len = bytes - done < sizeof(buf) ? (size_t)(bytes - done) : sizeof(buf);
		ssize_t n;
		if (out) {
			for (size_t i = 0; i < len; i++)
				buf[i] = (unsigned char)((done + i) % PATTERN);
			n = write(fd, buf, len);
		} else {
			n = read(fd, buf, len);
			for (ssize_t i = 0; i < n; i++)
				if (buf[i] != (unsigned char)((done + (size_t)i) % PATTERN))
					fail(r, end, "byte %llu was not what was written", done + (unsigned long long)i);
		}
		if (n <= 0)
			fail(r, end, "%s after %llu bytes: %s", out ? "write" : "read", done, n ? strerror(errno) : "EOF");
		done += (unsigned long long)n;
	}
}

/* Idle as a server holds its connections: waiting on them all (epoll),
 * 60 ms before it says it is idle (stage 3: the parent measures; a ring
 * emptied within 10 ms of its last give-back gives its pages back in such
 * a wait, docs/shm.md "Memory"), then until the parent lets go (4). */
static void hold(struct idle_run *r, int end, const int *fds, unsigned long long n)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev[16];

	if (ep < 0)
		fail(r, end, "epoll_create1: %s", strerror(errno));
	for (unsigned long long i = 0; i < n; i++)
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &(struct epoll_event){ .events = EPOLLIN, .data.fd = fds[i] }))
			fail(r, end, "epoll_ctl: %s", strerror(errno));
	for (int waits = 0; r->stage[end] < 4; waits++) {
		if (waits == 3)
			r->stage[end] = 3;
		/* A readable connection must have nothing to read: a byte or
		 * the end fails the run. The shm tier may report one once with
		 * nothing (a token that outlived its bytes, docs/shm.md: epoll,
		 * which the kernel answers alone); the read takes it. */
		int k = epoll_wait(ep, ev, 16, 20);
		for (int i = 0; i < k; i++) {
			char b;
			if (recv(ev[i].data.fd, &b, 1, MSG_DONTWAIT) >= 0 || errno != EAGAIN)
				fail(r, end, "an idle connection became readable");
		}
	}
}

/* One end: the server (end 0) accepts n, each client (1..) its share;
 * both prove the path of each, carry the burst, then hold them until the
 * parent has measured. */
static void end_run(struct idle_run *r, int end, int path, unsigned long long n, unsigned long long burst)
{
	int *fds = calloc(n, sizeof(int));
	int ls = -1;

	if (!fds)
		fail(r, end, "no memory");
	nofile(r, end, n);
	if (end == 0) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t l = sizeof(a);
		ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (ls < 0 || bind(ls, (void *)&a, l) || listen(ls, 4096) || getsockname(ls, (void *)&a, &l))
			fail(r, end, "listener: %s", strerror(errno));
		opt_in(r, end, path, ls);
		r->port = ntohs(a.sin_port);
	}
	r->rss0_kb[end] = status_kb(getpid(), "VmRSS");
	r->pte0_kb[end] = status_kb(getpid(), "VmPTE");
	r->pid[end] = getpid();
	r->stage[end] = 1;
	await(r, 0, r->ends, 1);
	int from = end ? 0 : 1, to = end ? 1 : r->ends; /* the peers */
	for (unsigned long long i = 0; i < n; i++) {
		if (end == 0) {
			fds[i] = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
			r->accepts++;
		} else {
			/* At most 64 connects ahead of the server's accepts: a burst of
			 * thousands overflows the rendezvous' backlog, and a hello that
			 * finds it full goes plain TCP (as it should), not the row's path. */
			while (r->connects - r->accepts >= 64)
				usleep(100);
			r->connects++;
			struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
						 .sin_port = htons(r->port) };
			fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fds[i] >= 0) {
				opt_in(r, end, path, fds[i]);
				if (connect(fds[i], (void *)&a, sizeof(a)))
					fail(r, end, "connect %llu: %s", i, strerror(errno));
			}
		}
		if (fds[i] < 0)
			fail(r, end, "%s %llu: %s", end ? "socket" : "accept", i, strerror(errno));
	}
	r->stage[end] = 2;
	await(r, 0, 1, 2); /* every connection accepted: the answers are on their sockets */
	for (unsigned long long i = 0; i < n && path; i++) {
		if (end > 0) /* the client takes the server's answer (never waits for it) */
			recv(fds[i], &(char){ 0 }, 1, MSG_DONTWAIT);
		bool look = i % (n / 16 + 1) == 0 || i == n - 1; /* 17 of them: each look reads the peer's descriptors */
		if (look && !fast_to(r, fds[i], from, to))
			fail(r, end, "%s: connection %llu is not on the fast path (the kernel's answer)",
			     end ? "client" : "server", i);
	}
	for (unsigned long long i = 0; i < n && burst; i++) { /* B bytes each way, one connection after another */
		io_all(r, end, fds[i], burst, end > 0);
		io_all(r, end, fds[i], burst, end == 0);
	}
	hold(r, end, fds, n); /* idle; the parent measures, then lets go */
	_exit(0);
}

struct idle_row {
	bool ok;
	char why[160];
	unsigned long long n;
	int clients;     /* client processes (their figures summed) */
	struct mem m[2]; /* the server, the clients */
	long rss0_kb[2], pte0_kb[2], shmem_kb;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How many client processes n connections need: a fast-path client holds
 * two descriptors a connection, and the hard limit may be below 2n. */
static int clients_for(unsigned long long n)
{
	struct rlimit l;
	unsigned long long per = 0;

	if (!getrlimit(RLIMIT_NOFILE, &l) && l.rlim_max != RLIM_INFINITY && l.rlim_max > 256)
		per = (l.rlim_max - 128) / 2;
	if (!per || n <= per)
		return 1;
	unsigned long long k = (n + per - 1) / per;
	return k < MAX_ENDS - 1 ? (int)k : MAX_ENDS - 1;
}

static void add_mem(struct mem *sum, const struct mem *m)
{
	sum->vmrss_kb += m->vmrss_kb;
	sum->vmpte_kb += m->vmpte_kb;
	sum->memfd_rss_kb += m->memfd_rss_kb;
	sum->memfd_pss_kb += m->memfd_pss_kb;
	sum->maps += m->maps;
}

static void run_path(struct idle_run *r, int path, unsigned long long n, unsigned long long burst, struct idle_row *row)
{
	pid_t pid[MAX_ENDS] = { 0 };
	long shmem0 = file_kb("/proc/meminfo", "Shmem");
	uint64_t deadline = now_ns() + 600ull * 1000000000ull;
	int k = clients_for(n);

	memset(r, 0, sizeof(*r));
	memset(row, 0, sizeof(*row));
	r->ends = 1 + k;
	row->n = n;
	row->clients = k;
	for (int end = 0; end < r->ends; end++) {
		unsigned long long share = end == 0 ? n : n / (unsigned)k + ((unsigned)(end - 1) < n % (unsigned)k);
		pid_t p = fork();
		if (p == 0)
			end_run(r, end, path, share, burst);
		pid[end] = p;
	}
	bool ok = true;
	for (int end = 0; ok && end < r->ends; end++)
		while (ok && r->stage[end] < 3) {
			for (int e = 0; e < r->ends; e++)
				ok = ok && r->stage[e] >= 0;
			ok = ok && now_ns() < deadline;
			usleep(2000);
		}
	if (ok) {
		struct mem m;
		for (int end = 0; end < r->ends; end++) {
			read_mem(pid[end], &m);
			add_mem(&row->m[end > 0], &m);
			row->rss0_kb[end > 0] += r->rss0_kb[end];
			row->pte0_kb[end > 0] += r->pte0_kb[end];
		}
		row->shmem_kb = file_kb("/proc/meminfo", "Shmem") - shmem0;
		if (path == 2 && (row->m[0].maps != (long)n || row->m[1].maps != (long)n)) {
			ok = false;
			snprintf(r->why, sizeof(r->why), "%ld and %ld mappings of memfd:loopfast-shm, not %llu each",
				 row->m[0].maps, row->m[1].maps, n);
		}
	} else if (!r->why[0]) {
		snprintf(r->why, sizeof(r->why), "did not finish within 600 s");
	}
	for (int end = 0; end < r->ends; end++)
		r->stage[end] = 4;
	for (int end = 0; end < r->ends; end++) {
		if (!ok)
			kill(pid[end], SIGKILL);
		waitpid(pid[end], NULL, 0);
	}
	row->ok = ok;
	snprintf(row->why, sizeof(row->why), "%s", r->why);
}

static double per(long kb_after, long kb_before, unsigned long long n)
{
	return (double)(kb_after - kb_before) * 1024.0 / (double)n;
}

int lf_bench_stream_idle(unsigned paths, unsigned long long n, unsigned long long burst, const char *json)
{
	struct idle_run *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct idle_row rows[3];
	FILE *js = NULL;
	int bad = 0;

	if (r == MAP_FAILED)
		return lf_cli_error("mmap: %s", strerror(errno));
	for (int p = 0; p < 3; p++)
		if (paths & (1u << p)) {
			run_path(r, p, n, burst, &rows[p]);
			if (!rows[p].ok)
				fprintf(stderr, "bench stream --idle: %s: %s\n", names[p], rows[p].why);
		}
	munmap(r, sizeof(*r));
	if (json && !(js = fopen(json, "w")))
		return lf_cli_error("cannot write %s: %s", json, strerror(errno));
	if (js)
		fprintf(js, "{\"bench\": \"stream-idle\", \"conns\": %llu, \"burst\": %llu, \"rows\": [", n, burst);
	printf("%llu idle connections%s (bytes per connection; memfd: the tier's rings, in each process)\n", n,
	       burst ? " after a burst each way" : ", never used");
	printf("%-9s %14s %14s %14s %14s %14s %14s %12s\n", "path", "server VmRSS", "client VmRSS", "server memfd",
	       "client memfd", "server memfd", "client memfd", "Shmem");
	printf("%-9s %14s %14s %14s %14s %14s %14s %12s\n", "", "", "", "Rss", "Rss", "Pss", "Pss", "");
	bool first = true;
	for (int p = 0; p < 3; p++) {
		if (!(paths & (1u << p)))
			continue;
		struct idle_row *w = &rows[p];
		if (!w->ok) {
			bad = 1;
			printf("%-9s unavailable: %s\n", names[p], w->why);
			if (js)
				fprintf(js, "%s\n {\"path\": \"%s\", \"unavailable\": \"%s\"}", first ? "" : ",", names[p], w->why);
			first = false;
			continue;
		}
		double v[7] = { per(w->m[0].vmrss_kb, w->rss0_kb[0], n), per(w->m[1].vmrss_kb, w->rss0_kb[1], n),
				per(w->m[0].memfd_rss_kb, 0, n),		 per(w->m[1].memfd_rss_kb, 0, n),
				per(w->m[0].memfd_pss_kb, 0, n),		 per(w->m[1].memfd_pss_kb, 0, n),
				per(w->shmem_kb, 0, n) };
		printf("%-9s %14.0f %14.0f %14.0f %14.0f %14.0f %14.0f %12.0f\n", names[p], v[0], v[1], v[2], v[3], v[4],
		       v[5], v[6]);
		if (js)
			fprintf(js,
				"%s\n {\"path\": \"%s\", \"conns\": %llu, \"clients\": %d, \"memfd_maps\": [%ld, %ld], "
				"\"vmrss_kb\": [%ld, %ld], \"vmrss_before_kb\": [%ld, %ld], \"memfd_rss_kb\": [%ld, %ld], "
				"\"memfd_pss_kb\": [%ld, %ld], \"shmem_kb\": %ld, \"vmrss_per_conn\": [%.0f, %.0f], "
				"\"memfd_rss_per_conn\": [%.0f, %.0f], \"memfd_pss_per_conn\": [%.0f, %.0f], "
				"\"shmem_per_conn\": %.0f, \"vmpte_per_conn\": [%.0f, %.0f]}",
				first ? "" : ",", names[p], n, w->clients, w->m[0].maps, w->m[1].maps, w->m[0].vmrss_kb, w->m[1].vmrss_kb,
				w->rss0_kb[0], w->rss0_kb[1], w->m[0].memfd_rss_kb, w->m[1].memfd_rss_kb, w->m[0].memfd_pss_kb,
				w->m[1].memfd_pss_kb, w->shmem_kb, v[0], v[1], v[2], v[3], v[4], v[5], v[6],
				per(w->m[0].vmpte_kb, w->pte0_kb[0], n), per(w->m[1].vmpte_kb, w->pte0_kb[1], n));
		first = false;
	}
	printf("(page tables, VmPTE, per connection in the JSON: vmpte_per_conn)\n");
	printf("(server, clients: [0], [1] in the JSON; the clients' figures are summed over their processes, as\n"
	       " many as the descriptor limit needs; Shmem: /proc/meminfo's growth over the run)\n");
	if (js) {
		fprintf(js, "\n]}\n");
		fclose(js);
	}
	return bad ? lf_cli_error("a path was unavailable (see above)") : 0;
}
