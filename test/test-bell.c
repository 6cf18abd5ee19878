/* The bell (src/fastpath/bell.c): a fast-path client whose TCP connection
 * ends before the server claims it must see what TCP's client sees. Each
 * case runs the same code over plain TCP and over the fast path (both
 * ends opted in) and compares what the client saw; the fast-path run's
 * client is a Unix stream by the kernel's word (fstat's inode, sock_diag).
 * The connection ends unclaimed because its listener is closed before any
 * accept (the kernel resets the connections in its queue).
 *
 * Built with the library's sources (not against the shared library), so
 * that a test can reach a socket's once-reported error directly. */
#include "internal.h"
#include "kernel.h"
#include "runner.h"
#include "loopfast.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <stdarg.h>
#include <unistd.h>

/* A client connected to a listener that will never accept it: on the
 * fast path (optin) the kernel must show a Unix stream, else TCP. */
static int unclaimed(int optin, int *l)
{
	int port;
	*l = k_listener(optin, &port);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(port) };
	int c = socket(AF_INET, SOCK_STREAM, 0);
	struct k_sock k;

	ASSERT_GE(c, 0);
	if (optin)
		ASSERT_EQ(lf_enable_fast_path(c), 0);
	ASSERT_EQ(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	k_sock(c, &k);
	ASSERT_EQ(k.domain, optin ? AF_UNIX : AF_INET);
	return c;
}

static const char *pollbits(int ev)
{
	static char s[64];
	snprintf(s, sizeof(s), "%s%s%s%s", ev & POLLIN ? "IN " : "", ev & POLLOUT ? "OUT " : "",
		 ev & POLLERR ? "ERR " : "", ev & POLLHUP ? "HUP" : "");
	return s;
}

static void say(char *buf, size_t room, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t room, const char *fmt, ...)
{
	va_list ap;
	size_t n = strlen(buf);
	va_start(ap, fmt);
	vsnprintf(buf + n, room - n, fmt, ap);
	va_end(ap);
}

/* ---- a reset before the claim: POLLERR until the error is read */

/* What a client sees after its connection was reset unaccepted, asking
 * in the order `how`: poll, then SO_ERROR (or a read), then poll again,
 * and epoll's events. */
static void after_reset(int optin, int how, char *out, size_t room)
{
	int l, c = unclaimed(optin, &l), hold[2];
	bool by_read = how & 1;
	pid_t w = -1;
	char b;

	out[0] = 0;
	if (how & 2) {
		/* Another process keeps the listener's rendezvous (a prefork
		 * worker would), not the listener: the reset reaches the
		 * client by its bell alone. */
		ASSERT_EQ(pipe(hold), 0);
		if ((w = fork()) == 0) {
			syscall(SYS_close, l);
			close(hold[1]);
			(void)!read(hold[0], &b, 1);
			_exit(0);
		}
		ASSERT_GT(w, 0);
		close(hold[0]);
		usleep(100000);
	}
	close(l);
	struct pollfd p = { c, POLLIN | POLLOUT, 0 };
	ASSERT_EQ(poll(&p, 1, 5000), 1);
	say(out, room, "poll: %s; ", pollbits(p.revents));
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 7 };
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev), 0);
	ASSERT_EQ(epoll_wait(ep, &ev, 1, 5000), 1);
	say(out, room, "epoll: %s data %d; ", pollbits((int)ev.events), (int)ev.data.u64);
	if (by_read) {
		ssize_t r = read(c, &b, 1);
		say(out, room, "read: %zd %s; ", r, r < 0 ? strerror(errno) : "");
	} else {
		int e = -1;
		socklen_t el = sizeof(e);
		ASSERT_EQ(getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &el), 0);
		say(out, room, "SO_ERROR: %s; ", strerror(e));
		ASSERT_EQ(getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &el), 0);
		say(out, room, "again: %d; ", e);
	}
	p.revents = 0;
	ASSERT_EQ(poll(&p, 1, 5000), 1);
	say(out, room, "poll: %s; ", pollbits(p.revents));
	ASSERT_EQ(epoll_wait(ep, &ev, 1, 5000), 1);
	say(out, room, "epoll: %s; ", pollbits((int)ev.events));
	ssize_t r = read(c, &b, 1);
	say(out, room, "read: %zd", r);
	close(ep);
	close(c);
	if (w > 0) {
		close(hold[1]);
		ASSERT_EQ(waitpid(w, NULL, 0), w);
	}
}

static void same_as_tcp(void (*fn)(int, int, char *, size_t), int arg)
{
	char tcp[512], fast[512];

	fn(0, arg, tcp, sizeof(tcp));
	fn(1, arg, fast, sizeof(fast));
	fprintf(stderr, "tcp:  %s\nfast: %s\n", tcp, fast);
	ASSERT_STREQ(fast, tcp);
}

static void reset_pollerr_until_so_error(void) { same_as_tcp(after_reset, 0); }
static void reset_pollerr_until_read(void) { same_as_tcp(after_reset, 1); }
static void reset_by_bell_pollerr_until_so_error(void) { same_as_tcp(after_reset, 2); }
static void reset_by_bell_pollerr_until_read(void) { same_as_tcp(after_reset, 3); }

/* ---- after fork: two processes waiting on one epoll set */

/* Is the task blocked in an epoll wait? The kernel's word
 * (/proc/PID/task/TID/syscall), not a sleep that guesses it. */
static bool in_epoll_wait(pid_t pid, pid_t tid)
{
	char path[64], buf[64] = "";
	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool got = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	long nr = got ? strtol(buf, NULL, 10) : -1;
	return nr == SYS_epoll_wait || nr == SYS_epoll_pwait || nr == SYS_epoll_pwait2;
}

static void wait_in_epoll(pid_t pid, pid_t tid)
{
	for (int i = 0; !in_epoll_wait(pid, tid); i++) {
		ASSERT_LT(i, 10000); /* 10 s */
		usleep(1000);
	}
}

/* The order of the two waits is what decides which of them the kernel
 * wakes for a one-shot event (the last to wait, as a rule): the parent
 * waits first, then the child, then the listener is closed. */
struct order {
	int l, go;
	pid_t parent, child;
};

static void *close_later(void *arg)
{
	struct order *o = arg;

	wait_in_epoll(getpid(), o->parent);
	ASSERT_EQ(write(o->go, "g", 1), 1);
	wait_in_epoll(o->child, o->child);
	close(o->l);
	return NULL;
}

static void woke(char *out, size_t room, const char *who, int ep)
{
	struct epoll_event ev[4];
	int n = epoll_wait(ep, ev, 4, 5000);
	say(out, room, "%s: %d", who, n);
	for (int i = 0; i < n; i++)
		say(out, room, " data %d%s%s", (int)ev[i].data.u64, ev[i].events & EPOLLIN ? " IN" : "",
		    ev[i].events & EPOLLHUP ? " HUP" : "");
	say(out, room, "; ");
}

/* Parent and child wait on the epoll set they share, which holds the
 * client; its connection ends unclaimed. Over TCP both wake. `how` 1: the
 * child closed its copy of the client first (it still waits on the set,
 * where the registration lives on while the parent holds the socket). */
static void fork_epoll(int optin, int how, char *out, size_t room)
{
	int l, c = unclaimed(optin, &l), ready[2], res[2], go[2];
	pthread_t t;
	char child[256] = "";

	out[0] = 0;
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = 9 };
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev), 0);
	ASSERT_EQ(pipe(ready), 0);
	ASSERT_EQ(pipe(res), 0);
	ASSERT_EQ(pipe(go), 0);
	pid_t w = fork();
	if (w == 0) {
		/* Not the listener (its close resets the connection), but
		 * its rendezvous, kept as by a worker: the end reaches the
		 * client by its bell alone. */
		syscall(SYS_close, l);
		if (how & 1)
			close(c);
		ASSERT_EQ(write(ready[1], "r", 1), 1);
		char g;
		ASSERT_EQ(read(go[0], &g, 1), 1); /* the parent waits first */
		woke(child, sizeof(child), "child", ep);
		ASSERT_EQ(write(res[1], child, strlen(child)), (ssize_t)strlen(child));
		_exit(0);
	}
	ASSERT_GT(w, 0);
	close(res[1]);
	ASSERT_EQ(read(ready[0], child, 1), 1);
	struct order o = { .l = l, .go = go[1], .parent = (pid_t)syscall(SYS_gettid), .child = w };
	ASSERT_EQ(pthread_create(&t, NULL, close_later, &o), 0);
	woke(out, room, "parent", ep);
	pthread_join(t, NULL);
	ssize_t n = read(res[0], child, sizeof(child) - 1);
	child[n > 0 ? n : 0] = 0;
	say(out, room, "%s", child);
	ASSERT_EQ(waitpid(w, NULL, 0), w);
	close(ready[0]), close(ready[1]), close(res[0]), close(go[0]), close(go[1]), close(ep), close(c);
}

/* Which of the two the kernel wakes for the bell's event is its choice
 * (the last to wait, as a rule; close_later orders them): a few rounds. */
static void fork_epoll_both_hold(void)
{
	for (int i = 0; i < 4; i++)
		same_as_tcp(fork_epoll, 0);
}

static void fork_epoll_child_closed(void)
{
	for (int i = 0; i < 4; i++)
		same_as_tcp(fork_epoll, 1);
}

/* ---- the error reported once: two threads asking get it once */

static struct {
	int fd;
	unsigned rounds, twice;
	atomic_uint count, gen, got;
} race;

/* Both threads leave it together (within a cache line's transfer). */
static void barrier(void)
{
	unsigned gen = atomic_load(&race.gen);
	if (atomic_fetch_add(&race.count, 1) == 1) {
		atomic_store(&race.count, 0);
		atomic_fetch_add(&race.gen, 1);
		return;
	}
	for (unsigned spins = 0; atomic_load(&race.gen) == gen; spins++)
		if (spins > 2000)
			sched_yield();
}

static void *ask(void *arg)
{
	bool first = arg != NULL;
	for (unsigned r = 0; r < race.rounds; r++) {
		if (first) {
			atomic_store(&race.got, 0);
			__atomic_store_n(&lf__fd(race.fd)->pend_err, ECONNRESET, __ATOMIC_RELEASE);
		}
		barrier();
		int e = 0;
		socklen_t l = sizeof(e);
		if (getsockopt(race.fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e == ECONNRESET)
			atomic_fetch_add(&race.got, 1);
		barrier();
		if (first) {
			ASSERT_GE(atomic_load(&race.got), 1);
			race.twice += atomic_load(&race.got) > 1;
		}
	}
	return NULL;
}

/* SO_ERROR from two threads at once on a socket with an error to report
 * once (as a reset before the claim leaves it): one of them gets it, in
 * every round, as TCP's sock_error() exchanges it. */
static void error_taken_once(void)
{
	int sv[2];
	pthread_t t;

	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	race.fd = sv[0];
	race.rounds = 1000000;
	ASSERT_EQ(pthread_create(&t, NULL, ask, NULL), 0);
	ask(&race);
	pthread_join(t, NULL);
	fprintf(stderr, "%u of %u rounds reported the error twice\n", race.twice, race.rounds);
	ASSERT_EQ(race.twice, 0);
	close(sv[0]);
	close(sv[1]);
}

static const struct lf_test tests[] = {
	{ "error_taken_once", error_taken_once, 60 },
	{ "fork_epoll_both_hold", fork_epoll_both_hold, 0 },
	{ "fork_epoll_child_closed", fork_epoll_child_closed, 0 },
	{ "reset_pollerr_until_so_error", reset_pollerr_until_so_error, 0 },
	{ "reset_pollerr_until_read", reset_pollerr_until_read, 0 },
	{ "reset_by_bell_pollerr_until_so_error", reset_by_bell_pollerr_until_so_error, 0 },
	{ "reset_by_bell_pollerr_until_read", reset_by_bell_pollerr_until_read, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
