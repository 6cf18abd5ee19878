/* `loopfast bench stream`: one connection, a writer sends N bytes in
 * S-byte writes, the reader reads them and checks each byte (byte k of the
 * stream is k mod 251); msg/s, GB/s and CPU seconds per GB, for plain TCP,
 * the fast path (Unix stream), the fast path on the shm tier, and a Unix
 * socket, interleaved round by round (every size and path once per round),
 * each figure the median of the rounds with their spread. The row "shm"
 * is the floor: no socket, the two processes copy through a 256 KiB ring
 * in shared memory (the tier's default size) and busy-poll its positions,
 * with the same writes, reads and checks (what any shared-memory stream
 * could do here; as `loopfast bench latency`'s shm row).
 *
 * Two processes forked for each run, as an application would set them up:
 * lf_enable_fast_path() (and lf_set_tier(LF_TIER_SHM) for fast+shm) on the
 * listener before accept and on the client before connect. Each end asks
 * the kernel, not loopfast, what it got: a Unix stream whose peer the other
 * process holds (kpath_fast_end) for fast and fast+shm, and for fast+shm
 * the tier's memfd in its own /proc/self/maps; a run that did not get its
 * path is reported unavailable, never as that path's figure. The parent
 * waits with a deadline and kills both when it passes. */
#include "cmdline.h"
#include "kpath.h"
#include "loopfast.h"
#include "stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { P_TCP, P_FAST, P_SHM, P_UNIX, P_FLOOR, NPATHS };
static const char *const path_names[NPATHS] = { "tcp", "fast", "fast+shm", "unix", "shm" };
#define MAX_SIZES 16
#define MAX_ROUNDS 20
#define PATTERN 251 /* a prime: a write never lines up with it */

struct result {
	int ok;                 /* 1 measured, 0 unavailable/failed (why) */
	char why[160];
	uint64_t t0, t1;        /* writer's first write, reader's last byte (CLOCK_MONOTONIC ns) */
	double cpu[2];          /* writer, reader: user+system seconds */
	long sleeps[2];         /* writer, reader: voluntary context switches (the kernel's ru_nvcsw) */
	long calls[2];          /* writer, reader: system calls made (the kernel's count; -1: not countable here) */
	uint64_t bad;           /* bytes that were not what was written */
	pid_t writer, reader;
};

struct opts {
	unsigned paths;
	size_t sizes[MAX_SIZES];
	unsigned nsizes;
	unsigned long long bytes, max_msgs, idle, burst;
	unsigned rounds;
	const char *json, *plot;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The kernel's count of this thread's system calls: a counting perf
 * event on the raw_syscalls:sys_enter tracepoint, opened on first use
 * (-1: no tracefs, or perf_event_paranoid refuses; the figure is then
 * reported as null). The open and the reads are counted too: a constant. */
static long syscalls(void)
{
	static int fd = -2;
	if (fd == -2) {
		fd = -1;
		FILE *f = fopen("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", "r");
		unsigned long long id;
		if (f && fscanf(f, "%llu", &id) == 1) {
			struct perf_event_attr a = { .type = PERF_TYPE_TRACEPOINT, .size = sizeof(a), .config = id };
			fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
		}
		if (f)
			fclose(f);
	}
	uint64_t n;
	return fd >= 0 && read(fd, &n, sizeof(n)) == sizeof(n) ? (long)n : -1;
}

/* What the kernel counted for this side over its loop: CPU time, sleeps
 * (voluntary context switches, ru_nvcsw) and system calls. */
struct usage {
	double cpu;
	long sleeps, calls;
};

static struct usage usage_now(void)
{
	struct rusage ru;
	long calls = syscalls();
	getrusage(RUSAGE_SELF, &ru);
	return (struct usage){ (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
				       ru.ru_stime.tv_usec / 1e6,
			       ru.ru_nvcsw, calls };
}

/* Side e's (0 writer, 1 reader) counts since u0. */
static void usage_since(struct result *r, int e, struct usage u0)
{
	struct usage u = usage_now();
	r->cpu[e] = u.cpu - u0.cpu;
	r->sleeps[e] = u.sleeps - u0.sleeps;
	r->calls[e] = u0.calls >= 0 && u.calls >= 0 ? u.calls - u0.calls : -1;
}

__attribute__((noreturn, format(printf, 2, 3))) static void fail(struct result *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (!r->why[0]) /* the first end's reason: the other then sees the end */
		vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	r->ok = 0;
	_exit(1);
}

/* The kernel's word on this end: the path the row names, or the run ends.
 * The tier's memfd comes with the server's answer at its accept, which a
 * client reads at its next call: the writer looks at its maps after its
 * writes (tier: true), the reader after its first read. */
/* n + PATTERN bytes of the stream's pattern: pat + (k mod PATTERN) is
 * the stream from byte k on, for n bytes. */
static unsigned char *pattern(size_t n)
{
	unsigned char *pat = malloc(n + PATTERN);
	for (size_t i = 0; pat && i < n + PATTERN; i++)
		pat[i] = (unsigned char)(i % PATTERN);
	return pat;
}

static void check_path(struct result *r, int path, int fd, pid_t peer, const char *who, bool tier)
{
	if (path != P_FAST && path != P_SHM)
		return;
	int k = kpath_fast_end(fd, peer);
	if (k != 1 && !(tier && !strcmp(who, "writer"))) /* the writer's second look: the reader may be done */
		fail(r, "%s: not on the fast path (the kernel shows %s)", who, k < 0 ? strerror(-k) : "plain TCP");
	if (tier && path == P_SHM && !kpath_maps_tier()) /* an answer not read yet: a wait reads it */
		poll(&(struct pollfd){ fd, POLLIN, 0 }, 1, 1000);
	if (tier && path == P_SHM && !kpath_maps_tier())
		fail(r, "%s: no memfd:loopfast-shm in /proc/self/maps (the tier was not taken)", who);
}

static void opt_in(struct result *r, int path, int fd)
{
	int e;
	if (path != P_FAST && path != P_SHM)
		return;
	if ((e = lf_enable_fast_path(fd)) < 0 || (path == P_SHM && (e = lf_set_tier(fd, LF_TIER_SHM)) < 0))
		fail(r, "opt-in: %s", lf_strerror(e));
}

static void unix_name(struct sockaddr_un *a, socklen_t *l)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "loopfast-bench-stream-%d", (int)getppid());
	*l = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* The floor's ring (path shm): mapped shared before the forks. */
#define FLOOR_RING (256u * 1024u)
static struct floor {
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) unsigned char data[FLOOR_RING];
} *floor_ring;

/* A poll of the other end's position: a pause, and every 1024th a yield,
 * so that two ends the scheduler put on one CPU (the bench does not pin)
 * still take turns rather than each spinning out its time slice. */
static void floor_pause(unsigned i)
{
	if (i % 1024 == 1023)
		sched_yield();
	else
		__builtin_ia32_pause();
}

/* The floor's reader: what the socket reader below does, from the ring. */
static void floor_reader(struct result *r, uint64_t bytes, size_t cap, unsigned char *buf, const unsigned char *pat)
{
	uint64_t got = 0, bad = 0;
	struct usage u0 = usage_now();
	while (got < bytes) {
		uint64_t t;
		for (unsigned i = 0; (t = atomic_load_explicit(&floor_ring->tail, memory_order_acquire)) == got; i++)
			floor_pause(i);
		size_t n = t - got < cap ? (size_t)(t - got) : cap, off = got % FLOOR_RING;
		size_t first = FLOOR_RING - off < n ? FLOOR_RING - off : n;
		memcpy(buf, floor_ring->data + off, first);
		memcpy(buf + first, floor_ring->data, n - first);
		atomic_store_explicit(&floor_ring->head, got + n, memory_order_release);
		size_t k = got % PATTERN;
		if (memcmp(buf, pat + k, n))
			for (size_t i = 0; i < n; i++)
				bad += buf[i] != pat[k + i];
		got += n;
	}
	r->t1 = now_ns();
	usage_since(r, 1, u0);
	r->bad = bad;
	_exit(0);
}

static void floor_writer(struct result *r, size_t size, uint64_t bytes, const unsigned char *pat)
{
	struct usage u0 = usage_now();
	r->t0 = now_ns();
	for (uint64_t sent = 0; sent < bytes;) {
		size_t len = bytes - sent < size ? (size_t)(bytes - sent) : size;
		len = len < FLOOR_RING / 4 ? len : FLOOR_RING / 4; /* a large write in pieces the reader can take while the next is copied */
		for (unsigned i = 0; sent + len - atomic_load_explicit(&floor_ring->head, memory_order_acquire) > FLOOR_RING; i++)
			floor_pause(i);
		size_t off = sent % FLOOR_RING, first = FLOOR_RING - off < len ? FLOOR_RING - off : len;
		const unsigned char *src = pat + sent % PATTERN;
		memcpy(floor_ring->data + off, src, first);
		memcpy(floor_ring->data, src + first, len - first);
		sent += len;
		atomic_store_explicit(&floor_ring->tail, sent, memory_order_release);
	}
	usage_since(r, 0, u0);
	_exit(0);
}

static void reader(struct result *r, int path, size_t size, uint64_t bytes, int pipe_w)
{
	int ls, fd;
	uint16_t port = 0;
	if (path == P_FLOOR) {
		size_t cap = size > 65536 ? size : 65536;
		unsigned char *buf = malloc(cap), *pat = pattern(cap);
		if (!buf || !pat || write(pipe_w, &port, sizeof(port)) != sizeof(port))
			fail(r, "floor: %s", strerror(errno));
		floor_reader(r, bytes, cap, buf, pat);
	}
	if (path == P_UNIX) {
		struct sockaddr_un a;
		socklen_t l;
		unix_name(&a, &l);
		ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (ls < 0 || bind(ls, (void *)&a, l) || listen(ls, 4))
			fail(r, "unix listener: %s", strerror(errno));
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t l = sizeof(a);
		ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (ls < 0 || bind(ls, (void *)&a, l) || listen(ls, 4) || getsockname(ls, (void *)&a, &l))
			fail(r, "tcp listener: %s", strerror(errno));
		opt_in(r, path, ls);
		port = ntohs(a.sin_port);
	}
	if (write(pipe_w, &port, sizeof(port)) != sizeof(port))
		fail(r, "pipe: %s", strerror(errno));
	if ((fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC)) < 0)
		fail(r, "accept: %s", strerror(errno));
	close(ls);
	size_t cap = size > 65536 ? size : 65536;
	unsigned char *buf = malloc(cap), *pat = pattern(cap);
	uint64_t got = 0, bad = 0;
	unsigned k = 0; /* got mod PATTERN */
	bool checked = false;
	struct usage u0 = usage_now();
	while (got < bytes) {
		ssize_t n = read(fd, buf, cap);
		if (n <= 0)
			fail(r, "read after %llu of %llu bytes: %s", (unsigned long long)got, (unsigned long long)bytes,
			     n ? strerror(errno) : "EOF");
		if (!checked) { /* the writer has connected by now */
			check_path(r, path, fd, r->writer, "reader", true);
			checked = true;
		}
		/* Every byte compared, at memcmp's speed, so that the check is
		 * not what the figures measure; byte by byte only to count a
		 * mismatch. */
		if (memcmp(buf, pat + k, (size_t)n))
			for (ssize_t i = 0; i < n; i++)
				bad += buf[i] != pat[k + (size_t)i];
		k = (unsigned)((k + (uint64_t)n) % PATTERN);
		got += (uint64_t)n;
	}
	r->t1 = now_ns();
	usage_since(r, 1, u0);
	r->bad = bad;
	close(fd);
	_exit(0);
}

static void writer(struct result *r, int path, size_t size, uint64_t bytes, uint16_t port)
{
	int fd;
	if (path == P_FLOOR) {
		unsigned char *pat = pattern(size);
		if (!pat)
			fail(r, "floor: no memory");
		floor_writer(r, size, bytes, pat);
	}
	if (path == P_UNIX) {
		struct sockaddr_un a;
		socklen_t l;
		unix_name(&a, &l);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (void *)&a, l))
			fail(r, "unix connect: %s", strerror(errno));
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					 .sin_port = htons(port) };
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			fail(r, "socket: %s", strerror(errno));
		opt_in(r, path, fd);
		if (connect(fd, (void *)&a, sizeof(a)))
			fail(r, "connect: %s", strerror(errno));
		int one = 1; /* small writes go out as written, as a message stream would */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	/* The pattern from every phase: write from pat + (sent mod PATTERN). */
	unsigned char *pat = pattern(size);
	check_path(r, path, fd, r->reader, "writer", false);
	struct usage u0 = usage_now();
	r->t0 = now_ns();
	for (uint64_t sent = 0; sent < bytes;) {
		size_t len = bytes - sent < size ? (size_t)(bytes - sent) : size;
		ssize_t n = write(fd, pat + sent % PATTERN, len);
		if (n <= 0)
			fail(r, "write after %llu bytes: %s", (unsigned long long)sent, strerror(errno));
		sent += (uint64_t)n;
	}
	usage_since(r, 0, u0);
	check_path(r, path, fd, r->reader, "writer", true);
	/* Held open until the reader is done, so that its look at the kernel
	 * finds this end alive. */
	shutdown(fd, SHUT_WR);
	while (read(fd, pat, 1) > 0)
		;
	_exit(0);
}

static void reap(pid_t p, uint64_t deadline)
{
	while (waitpid(p, NULL, WNOHANG) == 0) {
		if (now_ns() > deadline) {
			kill(p, SIGKILL);
			waitpid(p, NULL, 0);
			return;
		}
		usleep(1000);
	}
}

static void run_one(struct result *r, int path, size_t size, uint64_t bytes)
{
	int pfd[2];
	memset(r, 0, sizeof(*r));
	r->ok = 1;
	if (pipe(pfd)) {
		r->ok = 0;
		snprintf(r->why, sizeof(r->why), "pipe: %s", strerror(errno));
		return;
	}
	if (path == P_FLOOR)
		floor_ring->head = floor_ring->tail = 0;
	pid_t rd = fork();
	if (rd == 0) {
		close(pfd[0]);
		reader(r, path, size, bytes, pfd[1]);
	}
	close(pfd[1]);
	r->reader = rd;
	uint16_t port = 0;
	struct pollfd p = { pfd[0], POLLIN, 0 };
	if (poll(&p, 1, 10000) != 1 || read(pfd[0], &port, sizeof(port)) != sizeof(port)) {
		close(pfd[0]);
		kill(rd, SIGKILL);
		waitpid(rd, NULL, 0);
		if (r->ok)
			snprintf(r->why, sizeof(r->why), "the reader never listened");
		r->ok = 0;
		return;
	}
	close(pfd[0]);
	r->writer = getpid(); /* placeholder until the child is forked */
	pid_t wr = fork();
	if (wr == 0) {
		r->writer = getpid();
		writer(r, path, size, bytes, port);
	}
	r->writer = wr;
	uint64_t deadline = now_ns() + 120ull * 1000000000ull;
	reap(wr, deadline);
	reap(rd, deadline);
	if (r->ok && (!r->t1 || r->t1 <= r->t0)) {
		r->ok = 0;
		snprintf(r->why, sizeof(r->why), "did not finish within 120 s");
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct cell {
	int n;
	char why[160];
	double gbps[MAX_ROUNDS], msgs[MAX_ROUNDS], cpu_gb[MAX_ROUNDS];
	double sleeps[2][MAX_ROUNDS]; /* writer, reader: voluntary context switches per 1000 writes */
	double calls[2][MAX_ROUNDS];  /* writer, reader: system calls per 1000 writes (< 0: not counted) */
	double by_round[MAX_ROUNDS];  /* GB/s by round (0: that round failed), for ratios round by round */
	uint64_t bad;
};

static double med(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median, min and max over rounds of a's GB/s over b's, from the
 * rounds both ran (each round runs every path back to back, so the two
 * saw the same machine); false if none. */
static bool ratio_by_round(const struct cell *a, const struct cell *b, unsigned rounds, double out[3])
{
	double v[MAX_ROUNDS];
	int n = 0;

	for (unsigned i = 0; i < rounds; i++)
		if (a->by_round[i] > 0 && b->by_round[i] > 0)
			v[n++] = a->by_round[i] / b->by_round[i];
	if (!n)
		return false;
	out[0] = med(v, n); /* sorts v */
	out[1] = v[0];
	out[2] = v[n - 1];
	return true;
}

/* A figure for the JSON; null for one not counted (< 0). */
static const char *num_or_null(char *buf, size_t n, double v)
{
	if (v < 0)
		return "null";
	snprintf(buf, n, "%.3f", v);
	return buf;
}

static const char usage_text[] =
	"usage: loopfast bench stream [--paths LIST] [--sizes N[,N...]] [--bytes N] [--max-msgs N]\n"
	"         [--rounds N] [--json FILE [--plot FILE.png]]\n"
	"       loopfast bench stream --idle N [--burst BYTES] [--paths LIST] [--json FILE]\n"
	"paths: tcp, fast, fast+shm, unix, shm (the floor: a shared-memory ring, busy-polled; default: all)\n"
	"sizes: bytes per write (default 1,64,1024,65536,1048576)\n"
	"bytes: per run (default 256 MiB), at most max-msgs writes (default 2000000)\n"
	"idle: hold N connections (tcp, fast, fast+shm) and report their memory from the kernel;\n"
	"  burst: bytes each carries each way first (default 0: never used)\n";

int cmd_bench_stream(int argc, char **argv)
{
	struct opts o = { .paths = (1u << NPATHS) - 1, .nsizes = 5, .bytes = 256ull << 20, .max_msgs = 2000000, .rounds = 3 };
	unsigned long long v, list[MAX_SIZES] = { 1, 64, 1024, 65536, 1048576 }; /* --sizes */

	for (int i = 1; i < argc; i++) {
		char a[64];
		const char *val;
		int err = lf_cli_next_opt(argc, argv, &i, usage_text, a, sizeof(a), &val);
		if (err)
			return err < 0 ? 0 : err;
		if (!strcmp(a, "--paths"))
			err = lf_cli_parse_list(a, "path", val, path_names, NPATHS, &o.paths);
		else if (!strcmp(a, "--sizes"))
			err = lf_cli_parse_uints(a, val, 1, 1 << 20, list, MAX_SIZES, &o.nsizes);
		else if (!strcmp(a, "--bytes"))
			err = lf_cli_parse_uint(a, val, 1, 1ull << 40, &o.bytes);
		else if (!strcmp(a, "--max-msgs"))
			err = lf_cli_parse_uint(a, val, 1, 1ull << 32, &o.max_msgs);
		else if (!strcmp(a, "--rounds"))
			err = lf_cli_parse_uint(a, val, 1, MAX_ROUNDS, &v) ?: (o.rounds = (unsigned)v, 0);
		else if (!strcmp(a, "--idle"))
			err = lf_cli_parse_uint(a, val, 1, 1000000, &o.idle);
		else if (!strcmp(a, "--burst"))
			err = lf_cli_parse_uint(a, val, 0, 1ull << 30, &o.burst);
		else if (!strcmp(a, "--json"))
			o.json = val, err = 0;
		else if (!strcmp(a, "--plot"))
			o.plot = val, err = 0;
		else
			return lf_cli_error("unknown option '%s' (try 'loopfast bench stream --help')", a);
		if (err)
			return err;
	}
	for (unsigned k = 0; k < o.nsizes; k++)
		o.sizes[k] = (size_t)list[k];
	if (o.plot && (o.idle || !o.json || !strcmp(o.json, "-")))
		return lf_cli_error("--plot needs --json FILE (the plot is drawn from it), and no --idle");
	if (o.idle)
		return lf_bench_stream_idle(o.paths & 7u, o.idle, o.burst, o.json);
	struct result *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	floor_ring = mmap(NULL, sizeof(*floor_ring), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	static struct cell cells[MAX_SIZES][NPATHS];
	if (r == MAP_FAILED || floor_ring == MAP_FAILED)
		return lf_cli_error("mmap: %s", strerror(errno));
	memset(cells, 0, sizeof(cells));
	for (unsigned round = 0; round < o.rounds; round++) {
		for (unsigned s = 0; s < o.nsizes; s++) {
			uint64_t bytes = o.bytes;
			if (bytes / o.sizes[s] > o.max_msgs)
				bytes = o.max_msgs * o.sizes[s];
			for (int p = 0; p < NPATHS; p++) {
				if (!(o.paths & (1u << p)))
					continue;
				struct cell *c = &cells[s][p];
				run_one(r, p, o.sizes[s], bytes);
				if (!r->ok) {
					snprintf(c->why, sizeof(c->why), "%s", r->why[0] ? r->why : "failed");
					fprintf(stderr, "bench stream: size %zu %s, round %u: %s\n", o.sizes[s], path_names[p],
						round + 1, c->why);
					continue;
				}
				double secs = (double)(r->t1 - r->t0) / 1e9;
				c->gbps[c->n] = (double)bytes / secs / 1e9;
				c->by_round[round] = c->gbps[c->n];
				c->msgs[c->n] = (double)((bytes + o.sizes[s] - 1) / o.sizes[s]) / secs;
				c->cpu_gb[c->n] = (r->cpu[0] + r->cpu[1]) / ((double)bytes / 1e9);
				double kmsgs = (double)((bytes + o.sizes[s] - 1) / o.sizes[s]) / 1000.0;
				for (int e = 0; e < 2; e++) {
					c->sleeps[e][c->n] = (double)r->sleeps[e] / kmsgs;
					c->calls[e][c->n] = r->calls[e] < 0 ? -1 : (double)r->calls[e] / kmsgs;
				}
				c->bad += r->bad;
				c->n++;
			}
		}
	}
	FILE *js = o.json ? fopen(o.json, "w") : NULL;
	if (o.json && !js)
		return lf_cli_error("cannot write %s: %s", o.json, strerror(errno));
	if (js)
		fprintf(js, "{\"bench\": \"stream\", \"rounds\": %u, \"bytes\": %llu, \"rows\": [", o.rounds, o.bytes);
	printf("%-9s %-8s %12s %12s %10s %10s %12s %s\n", "size", "path", "msg/s", "GB/s", "GB/s min", "GB/s max",
	       "CPU s/GB", "vs tcp");
	bool first = true;
	int bad = 0;
	for (unsigned s = 0; s < o.nsizes; s++) {
		double tcp = cells[s][P_TCP].n ? med(cells[s][P_TCP].msgs, cells[s][P_TCP].n) : 0;
		for (int p = 0; p < NPATHS; p++) {
			struct cell *c = &cells[s][p];
			if (!(o.paths & (1u << p)))
				continue;
			if (c->bad)
				bad = 1;
			if (!c->n) {
				printf("%-9zu %-8s unavailable: %s\n", o.sizes[s], path_names[p], c->why);
				if (js)
					fprintf(js, "%s\n {\"size\": %zu, \"path\": \"%s\", \"unavailable\": \"%s\"}", first ? "" : ",",
						o.sizes[s], path_names[p], c->why);
				first = false;
				continue;
			}
			double lo = c->gbps[0], hi = c->gbps[0];
			for (int i = 1; i < c->n; i++) {
				lo = c->gbps[i] < lo ? c->gbps[i] : lo;
				hi = c->gbps[i] > hi ? c->gbps[i] : hi;
			}
			double m = med(c->msgs, c->n), g = med(c->gbps, c->n), cpu = med(c->cpu_gb, c->n);
			char w[32], rd[32];
			printf("%-9zu %-8s %12.0f %12.3f %10.3f %10.3f %12.3f %6.2fx%s\n", o.sizes[s], path_names[p], m, g, lo,
			       hi, cpu, tcp ? m / tcp : 0, c->bad ? "  BAD BYTES" : "");
			if (js)
				fprintf(js,
					"%s\n {\"size\": %zu, \"path\": \"%s\", \"runs\": %d, \"msgs_per_s\": %.0f, \"gb_per_s\": %.4f, "
					"\"gb_per_s_min\": %.4f, \"gb_per_s_max\": %.4f, \"cpu_s_per_gb\": %.4f, \"vs_tcp\": %.3f, "
					"\"bad_bytes\": %llu, \"writer_sleeps_per_kmsg\": %.3f, \"reader_sleeps_per_kmsg\": %.3f, "
					"\"writer_syscalls_per_kmsg\": %s, \"reader_syscalls_per_kmsg\": %s",
					first ? "" : ",", o.sizes[s], path_names[p], c->n, m, g, lo, hi, cpu, tcp ? m / tcp : 0,
					(unsigned long long)c->bad, med(c->sleeps[0], c->n), med(c->sleeps[1], c->n),
					num_or_null(w, sizeof(w), med(c->calls[0], c->n)),
					num_or_null(rd, sizeof(rd), med(c->calls[1], c->n)));
			double rt[3];
			if (js && p != P_FAST && ratio_by_round(c, &cells[s][P_FAST], o.rounds, rt))
				fprintf(js, ", \"vs_fast\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}", rt[0], rt[1], rt[2]);
			if (js)
				fputc('}', js);
			first = false;
		}
	}
	bool head = false;
	for (unsigned s = 0; s < o.nsizes; s++)
		for (int p = P_SHM; p <= P_FLOOR; p += P_FLOOR - P_SHM) {
			double rt[3];
			if (!(o.paths & (1u << p)) || !ratio_by_round(&cells[s][p], &cells[s][P_FAST], o.rounds, rt))
				continue;
			if (!head)
				printf("\nagainst fast (the Unix-stream fast path), round by round: GB/s median ratio [min-max]\n");
			head = true;
			printf("%-9zu %-8s %.2f [%.2f-%.2f]\n", o.sizes[s], path_names[p], rt[0], rt[1], rt[2]);
		}
	if (js) {
		fprintf(js, "\n]}\n");
		fclose(js);
	}
	munmap(r, sizeof(*r));
	munmap(floor_ring, sizeof(*floor_ring));
	if (bad)
		return lf_cli_error("the reader found bytes that were not written (see BAD BYTES)");
	return o.plot ? lf_cli_run_script("stream/plot_stream.py", o.json, o.plot) : 0;
}
