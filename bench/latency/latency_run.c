/* One run of one row of the latency benchmark: two single-threaded
 * processes, forked from the CLI, a sender and an echoer.
 *
 * The echoer listens (TCP on 127.0.0.1 port 0, or an abstract Unix name) and
 * tells the parent through a pipe once it does; the parent then forks the
 * sender, which connects. The fast path is negotiated exactly as an
 * application would: lf_enable_fast_path() on the listening socket before
 * accept and on the client socket before connect. Each process then asks
 * the kernel, not loopfast, whether its end took the fast path
 * (kpath_fast_end: a Unix stream whose live peer the other process holds);
 * a connection that is not on the fast path makes the row unavailable, it
 * is never reported as a fast-path figure. Nothing
 * about a socket is cached across connect/accept (the fast path replaces the
 * file under the fd number).
 *
 * The sender stamps each message with CLOCK_MONOTONIC nanoseconds, waits for
 * the echo and stores now - stamp. Both processes measure their own CPU time
 * (getrusage) over the measured phase, after the warm-up. Results come back
 * in a MAP_SHARED mapping made before fork. The parent waits with a deadline
 * and kills both children when it passes or when one of them fails, so a row
 * can never hang the benchmark.
 */
#include "kpath.h"
#include "latency.h"
#include "loopfast.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { SENDER, ECHOER };

struct run_shared {
	struct lat_side side[2];
	pid_t sender;              /* written by the sender before it connects */
	uint64_t samples[];
};

struct child {
	const struct lat_opts *o;
	enum lat_style style;
	enum lat_transport tr;
	struct run_shared *sh;
	struct lat_side *me;
	void *shm;
	int pipe_w;
	pid_t echoer;
	uint16_t port;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

__attribute__((format(printf, 3, 4), noreturn))
static void child_exit(struct child *c, int status, const char *fmt, ...)
{
	va_list ap;

	c->me->status = status;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(c->me->reason, sizeof(c->me->reason), fmt, ap);
		va_end(ap);
	}
	_exit(status);
}

static bool is_fastpath(enum lat_transport t)
{
	return t == LAT_FASTPATH || t == LAT_FASTPATH_SPIN || t == LAT_FASTPATH_SHM || t == LAT_FASTPATH_SHM_SPIN;
}

static bool is_tier(enum lat_transport t)
{
	return t == LAT_FASTPATH_SHM || t == LAT_FASTPATH_SHM_SPIN;
}

static bool spins(enum lat_transport t)
{
	return t == LAT_FASTPATH_SPIN || t == LAT_FASTPATH_SHM_SPIN;
}

static void uds_name(struct sockaddr_un *a, socklen_t *len, pid_t echoer)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "loopfast-bench-latency-%d", (int)echoer);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void set_nodelay(struct child *c, int fd, bool must)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 && must)
		child_exit(c, LAT_FAILED, "setsockopt(TCP_NODELAY): %s", strerror(errno));
}

/* After connect or accept: the fast-path rows must really be on it, as the
 * kernel shows it, at both ends (each end checks its own). */
static void check_fastpath(struct child *c, int fd, const char *who, pid_t peer)
{
	int a, err;

	if (!is_fastpath(c->tr))
		return;
	a = kpath_fast_end(fd, peer);
	if (a != 1)
		child_exit(c, LAT_UNAVAILABLE, "%s connection is not on the fast path (the kernel shows %s)",
			   who, a < 0 ? strerror(-a) : "no Unix stream to the other process: plain TCP");
	if (spins(c->tr) && (err = lf_set_spin(fd, c->o->spin_us)) < 0)
		child_exit(c, LAT_UNAVAILABLE, "lf_set_spin(%u): %s", c->o->spin_us, lf_strerror(err));
}

static int echoer_connect(struct child *c)
{
	int ls, fd, err;

	if (c->tr == LAT_UDS) {
		struct sockaddr_un a;
		socklen_t len;

		uds_name(&a, &len, getpid());
		ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (ls < 0 || bind(ls, (struct sockaddr *)&a, len) < 0 || listen(ls, 4) < 0)
			child_exit(c, LAT_FAILED, "unix listener: %s", strerror(errno));
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(a);

		ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (ls < 0)
			child_exit(c, LAT_FAILED, "socket: %s", strerror(errno));
		set_nodelay(c, ls, true);
		if (bind(ls, (struct sockaddr *)&a, len) < 0 || listen(ls, 4) < 0 ||
		    getsockname(ls, (struct sockaddr *)&a, &len) < 0)
			child_exit(c, LAT_FAILED, "tcp listener: %s", strerror(errno));
		if (is_fastpath(c->tr) && (err = lf_enable_fast_path(ls)) < 0)
			child_exit(c, LAT_UNAVAILABLE, "lf_enable_fast_path(listener): %s", lf_strerror(err));
		if (is_tier(c->tr) && (err = lf_set_tier(ls, LF_TIER_SHM)) < 0)
			child_exit(c, LAT_UNAVAILABLE, "lf_set_tier(listener): %s", lf_strerror(err));
		c->port = ntohs(a.sin_port);
	}
	if (write(c->pipe_w, &c->port, sizeof(c->port)) != sizeof(c->port))
		child_exit(c, LAT_FAILED, "pipe to parent: %s", strerror(errno));
	fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		child_exit(c, LAT_FAILED, "accept: %s", strerror(errno));
	close(ls);
	check_fastpath(c, fd, "accepted", c->sh->sender);
	if (c->tr != LAT_UDS)
		set_nodelay(c, fd, c->tr == LAT_TCP);
	return fd;
}

static int sender_connect(struct child *c)
{
	int fd, err;

	if (c->tr == LAT_UDS) {
		struct sockaddr_un a;
		socklen_t len;

		uds_name(&a, &len, c->echoer);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, len) < 0)
			child_exit(c, LAT_FAILED, "unix connect: %s", strerror(errno));
		return fd;
	}

	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons(c->port) };

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		child_exit(c, LAT_FAILED, "socket: %s", strerror(errno));
	set_nodelay(c, fd, true);
	if (is_fastpath(c->tr) && (err = lf_enable_fast_path(fd)) < 0)
		child_exit(c, LAT_UNAVAILABLE, "lf_enable_fast_path(client): %s", lf_strerror(err));
	if (is_tier(c->tr) && (err = lf_set_tier(fd, LF_TIER_SHM)) < 0)
		child_exit(c, LAT_UNAVAILABLE, "lf_set_tier(client): %s", lf_strerror(err));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		child_exit(c, LAT_FAILED, "connect: %s", strerror(errno));
	check_fastpath(c, fd, "client", c->echoer);
	set_nodelay(c, fd, c->tr == LAT_TCP);
	return fd;
}

static const struct lat_ops *style_ops(enum lat_style s, enum lat_transport t)
{
	if (t == LAT_SHM)
		return lat_shm_ops();
	if (s == LAT_URING || s == LAT_URING_POLL)
		return lat_uring_ops(s == LAT_URING_POLL);
	return lat_socket_ops(s);
}

/* Runs in the child: pins, connects, runs the loop, exits. */
__attribute__((noreturn))
static void child_main(struct child *c, int role)
{
	const struct lat_opts *o = c->o;
	const struct lat_ops *ops = style_ops(c->style, c->tr);
	struct lat_chan ch = { .fd = -1, .size = o->size };
	void *ctx = NULL, *tx = NULL, *rx = NULL;
	unsigned total = o->warmup + o->count;
	double cpu0 = 0, wall0 = 0;
	int err;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_IGN);
	c->me = &c->sh->side[role];
	if (role == SENDER)
		c->sh->sender = getpid();
	if (o->pin && o->cpu[role] >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(o->cpu[role], &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0)
			snprintf(c->me->note, sizeof(c->me->note), "not pinned: %s", strerror(errno));
	}
	/* loopfast's spin back-off is the library's policy; the benchmark can
	 * turn it off with the library's own knob, read at the first spin. */
	if (spins(c->tr) && !o->spin_backoff)
		setenv("LOOPFAST_SPIN_BACKOFF", "0", 1);
	if (c->tr == LAT_SHM) {
		struct lat_shm_ring *a, *b;

		a = (struct lat_shm_ring *)c->shm; /* set up by the parent */
		b = (struct lat_shm_ring *)((char *)c->shm + lat_shm_bytes(o->size) / 2);
		ch.tx = role == SENDER ? a : b;
		ch.rx = role == SENDER ? b : a;
		if (role == ECHOER && write(c->pipe_w, &c->port, sizeof(c->port)) != sizeof(c->port))
			child_exit(c, LAT_FAILED, "pipe to parent: %s", strerror(errno));
	} else {
		ch.fd = role == SENDER ? sender_connect(c) : echoer_connect(c);
	}

	err = ops->init(&ctx, &ch, c->me->reason, c->me->note);
	if (err > 0)
		child_exit(c, LAT_UNAVAILABLE, NULL);
	if (err < 0)
		child_exit(c, LAT_FAILED, "%s: %s", lat_style_names[c->style], strerror(-err));
	if (ops->bufs)
		ops->bufs(ctx, &tx, &rx);
	if (!tx && !(tx = calloc(1, o->size)))
		child_exit(c, LAT_FAILED, "out of memory");
	if (!rx && !(rx = calloc(1, o->size)))
		child_exit(c, LAT_FAILED, "out of memory");
	for (size_t i = 8; i < o->size; i++)
		((unsigned char *)tx)[i] = (unsigned char)i;

	/* For the test that a stuck row cannot hang the benchmark. */
	const char *stall = getenv("LOOPFAST_BENCH_LATENCY_STALL");

	if (stall && !strcmp(stall, role == SENDER ? "sender" : "echoer"))
		pause();
	for (unsigned i = 0; i < total; i++) {
		if (i == o->warmup) {
			cpu0 = cpu_s();
			wall0 = (double)mono_ns() / 1e9;
		}
		if (role == ECHOER) {
			if ((err = ops->recv(ctx, rx, o->size)) || (err = ops->send(ctx, rx, o->size)))
				child_exit(c, LAT_FAILED, "echoer message %u: %s", i, strerror(-err));
			continue;
		}
		uint64_t t0 = mono_ns(), stamp;

		memcpy(tx, &t0, sizeof(t0));
		if ((err = ops->send(ctx, tx, o->size)) || (err = ops->recv(ctx, rx, o->size)))
			child_exit(c, LAT_FAILED, "sender message %u: %s", i, strerror(-err));
		uint64_t t1 = mono_ns();

		memcpy(&stamp, rx, sizeof(stamp));
		if (stamp != t0)
			child_exit(c, LAT_FAILED, "echo %u carries a wrong timestamp", i);
		if (i >= o->warmup)
			c->sh->samples[i - o->warmup] = t1 - stamp;
	}
	c->me->cpu_s = cpu_s() - cpu0;
	c->me->wall_s = (double)mono_ns() / 1e9 - wall0;
	if (is_tier(c->tr) && !kpath_maps_tier())
		child_exit(c, LAT_UNAVAILABLE, "the shm tier was not taken (no memfd:loopfast-shm in /proc/self/maps)");
	ops->fini(ctx);
	_exit(0);
}

static pid_t spawn(struct child *c, int role, const sigset_t *old)
{
	pid_t pid = fork();

	if (pid == 0) {
		sigprocmask(SIG_SETMASK, old, NULL);
		child_main(c, role);
	}
	return pid;
}

static double now_s(void)
{
	return (double)mono_ns() / 1e9;
}

/* Waits for SIGCHLD until the deadline; returns false when it passed. */
static bool wait_chld(double deadline)
{
	sigset_t set;
	double left = deadline - now_s();

	if (left <= 0)
		return false;
	struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	return sigtimedwait(&set, NULL, &ts) >= 0 || errno != EAGAIN;
}

/* Reaps whatever exited. Returns the number of children still running. */
static int reap(pid_t pid[2], int st[2])
{
	int alive = 0;

	for (int i = 0; i < 2; i++) {
		if (pid[i] <= 0)
			continue;
		if (waitpid(pid[i], &st[i], WNOHANG) == pid[i])
			pid[i] = 0;
		else
			alive++;
	}
	return alive;
}

static void kill_all(pid_t pid[2], int st[2], bool killed[2])
{
	for (int i = 0; i < 2; i++)
		if (pid[i] > 0) {
			kill(pid[i], SIGKILL);
			waitpid(pid[i], &st[i], 0);
			pid[i] = 0;
			killed[i] = true;
		}
}

static int side_status(int wstatus)
{
	if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) <= LAT_FAILED)
		return WEXITSTATUS(wstatus);
	return LAT_FAILED;
}

int lat_run_row(const struct lat_opts *o, enum lat_style s, enum lat_transport t,
		uint64_t *samples, struct lat_side side[2], char *reason, char *note)
{
	bool killed[2] = { false, false };
	size_t bytes = sizeof(struct run_shared) + (size_t)o->count * sizeof(uint64_t);
	struct child c = { .o = o, .style = s, .tr = t };
	double deadline = now_s() + o->timeout_s;
	pid_t pid[2] = { 0, 0 };
	int st[2] = { 0, 0 }, pfd[2] = { -1, -1 }, status = LAT_FAILED;
	bool timed_out = false;
	sigset_t chld, old;

	memset(side, 0, 2 * sizeof(*side));
	c.sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c.sh == MAP_FAILED) {
		snprintf(reason, LAT_REASON_LEN, "mmap: %s", strerror(errno));
		return LAT_FAILED;
	}
	if (t == LAT_SHM) {
		struct lat_shm_ring *a, *b;

		c.shm = mmap(NULL, lat_shm_bytes(o->size), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (c.shm == MAP_FAILED) {
			snprintf(reason, LAT_REASON_LEN, "mmap: %s", strerror(errno));
			munmap(c.sh, bytes);
			return LAT_FAILED;
		}
		lat_shm_setup(c.shm, o->size, &a, &b);
	}
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		snprintf(reason, LAT_REASON_LEN, "pipe: %s", strerror(errno));
		goto out;
	}
	c.pipe_w = pfd[1];
	fflush(NULL);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);

	pid[ECHOER] = spawn(&c, ECHOER, &old);
	close(pfd[1]);
	if (pid[ECHOER] < 0) {
		snprintf(c.sh->side[ECHOER].reason, LAT_REASON_LEN, "fork: %s", strerror(errno));
		pid[ECHOER] = 0;
		st[ECHOER] = LAT_FAILED << 8;
		goto done;
	}
	/* Wait until the echoer listens (or fails). */
	struct pollfd p = { .fd = pfd[0], .events = POLLIN };
	double left = deadline - now_s();
	int ready = poll(&p, 1, left > 0 ? (int)(left * 1000) : 0);

	if (ready <= 0 || read(pfd[0], &c.port, sizeof(c.port)) != sizeof(c.port)) {
		if (ready == 0)
			timed_out = true;
		goto finish;
	}
	c.echoer = pid[ECHOER];
	pid[SENDER] = spawn(&c, SENDER, &old);
	if (pid[SENDER] < 0) {
		snprintf(c.sh->side[SENDER].reason, LAT_REASON_LEN, "fork: %s", strerror(errno));
		pid[SENDER] = 0;
		st[SENDER] = LAT_FAILED << 8;
	}

finish:
	while (reap(pid, st) > 0) {
		/* One side gone with an error: the other would wait forever. */
		bool failed = false;

		for (int i = 0; i < 2; i++)
			if (pid[i] == 0 && side_status(st[i]) != LAT_OK)
				failed = true;
		if (failed) {
			kill_all(pid, st, killed);
			break;
		}
		if (!wait_chld(deadline)) {
			if (reap(pid, st) > 0) {
				timed_out = true;
				kill_all(pid, st, killed);
			}
			break;
		}
	}
done:
	sigprocmask(SIG_SETMASK, &old, NULL);
	memcpy(side, c.sh->side, 2 * sizeof(*side));
	status = LAT_OK;
	for (int i = 0; i < 2; i++) {
		int si = side_status(st[i]);

		if (killed[i])
			si = LAT_OK; /* killed by us: the other side says why */
		else if (si != LAT_OK && side[i].reason[0] == '\0') {
			if (WIFSIGNALED(st[i]))
				snprintf(side[i].reason, LAT_REASON_LEN, "%s killed by signal %d",
					 i == SENDER ? "sender" : "echoer", WTERMSIG(st[i]));
			else
				snprintf(side[i].reason, LAT_REASON_LEN, "%s exited with %d",
					 i == SENDER ? "sender" : "echoer", WEXITSTATUS(st[i]));
		}
		side[i].status = si;
	}
	/* Unavailable beats failed: a side that could not run explains why the
	 * other side was killed. */
	for (int i = 0; i < 2; i++)
		if (side[i].status == LAT_UNAVAILABLE)
			status = LAT_UNAVAILABLE;
	if (status == LAT_OK)
		for (int i = 0; i < 2; i++)
			if (side[i].status != LAT_OK)
				status = LAT_FAILED;
	reason[0] = note[0] = '\0';
	for (int i = 0; i < 2; i++)
		if (!reason[0] && side[i].status == status && side[i].reason[0])
			snprintf(reason, LAT_REASON_LEN, "%s", side[i].reason);
	for (int i = 0; i < 2; i++)
		if (!note[0] && side[i].note[0])
			snprintf(note, LAT_REASON_LEN, "%s", side[i].note);
	if (timed_out) {
		status = LAT_UNAVAILABLE;
		snprintf(reason, LAT_REASON_LEN, "timed out after %u s (--timeout)", o->timeout_s);
	}
	if (status != LAT_OK && !reason[0])
		snprintf(reason, LAT_REASON_LEN, "no reason reported");
	if (status == LAT_OK)
		memcpy(samples, c.sh->samples, (size_t)o->count * sizeof(uint64_t));
out:
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (c.shm && c.shm != MAP_FAILED)
		munmap(c.shm, lat_shm_bytes(o->size));
	munmap(c.sh, bytes);
	return status;
}
