/* Busy polling keeps every blocking call's semantics: data, timeouts
 * shorter and longer than the spin, signals (EINTR, SA_RESTART),
 * non-blocking mode; and a spin really spins (no voluntary context switch
 * while it waits). The spin budget is 20 s and the upper bounds below are
 * 10 s: they catch a call that waited for the spin or forever, whatever
 * the machine's load; they do not measure speed. The lower bounds are the
 * calls' contract (a timeout never ends early). The fast path of every
 * pair is the kernel's word (test/kernel.h), not loopfast's. */
#include "kernel.h"
#include "runner.h"
#include "loopfast.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define BIG_SPIN 20000000 /* 20 s: far longer than any timeout used here */
#define HANG_S 10.0        /* a call that took this long waited for the spin */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void pair(unsigned spin, int *c, int *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	setenv("LOOPFAST_SPIN_BACKOFF", "0", 1);
	ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	ASSERT_EQ(listen(lfd, 4), 0);
	ASSERT_EQ(lf_enable_fast_path(lfd), 0);
	ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&a, &l), 0);
	*c = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_EQ(lf_enable_fast_path(*c), 0);
	ASSERT_EQ(connect(*c, (struct sockaddr *)&a, sizeof(a)), 0);
	*s = accept(lfd, NULL, NULL);
	ASSERT_GE(*s, 0);
	ASSERT_EQ(k_path(*c, *s), K_FAST);
	ASSERT_EQ(lf_set_spin(*c, spin), 0);
	ASSERT_EQ(lf_set_spin(*s, spin), 0);
	close(lfd);
}

static void *late_writer(void *arg)
{
	usleep(50000);
	ASSERT_EQ(write(*(int *)arg, "late", 4), 4);
	return NULL;
}

static void data_arrives_during_and_after_spin(void)
{
	int c, s;
	char buf[8];
	pthread_t t;

	pair(20, &c, &s); /* short spin: the data comes after it, while blocked */
	pthread_create(&t, NULL, late_writer, &s);
	ASSERT_EQ(read(c, buf, sizeof(buf)), 4);
	pthread_join(t, NULL);
	ASSERT_EQ(write(s, "now", 3), 3);
	ASSERT_EQ(recv(c, buf, sizeof(buf), 0), 3);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	ASSERT_EQ(write(s, "from", 4), 4);
	ASSERT_EQ(recvfrom(c, buf, sizeof(buf), 0, (struct sockaddr *)&ss, &sl), 4);
	ASSERT_EQ(sl, 0); /* a connected TCP socket reports no source */
}

static void poll_timeout_shorter_than_spin(void)
{
	int c, s;
	struct pollfd p;

	pair(BIG_SPIN, &c, &s);
	p = (struct pollfd){ c, POLLIN, 0 };
	double t0 = now();
	ASSERT_EQ(poll(&p, 1, 30), 0);
	ASSERT_LT(now() - t0, HANG_S);
	ASSERT_GE((now() - t0) * 1000, 29);
}

static void epoll_and_select_timeouts(void)
{
	int c, s, ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN }, got;

	pair(BIG_SPIN, &c, &s);
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev), 0);
	double t0 = now();
	ASSERT_EQ(epoll_wait(ep, &got, 1, 30), 0);
	ASSERT_LT(now() - t0, HANG_S);
	ASSERT_GE((now() - t0) * 1000, 29);
	fd_set r;
	FD_ZERO(&r);
	FD_SET(c, &r);
	struct timeval tv = { 0, 30000 };
	t0 = now();
	ASSERT_EQ(select(c + 1, &r, NULL, NULL, &tv), 0);
	ASSERT_LT(now() - t0, HANG_S);
	ASSERT_GE((now() - t0) * 1000, 29);
	ASSERT_EQ(tv.tv_sec, 0);
	ASSERT_EQ(tv.tv_usec, 0);
	/* ... and data is reported at once, set bits intact. */
	ASSERT_EQ(write(s, "x", 1), 1);
	FD_ZERO(&r);
	FD_SET(c, &r);
	tv = (struct timeval){ 5, 0 };
	ASSERT_EQ(select(c + 1, &r, NULL, NULL, &tv), 1);
	ASSERT(FD_ISSET(c, &r));
	ASSERT_EQ(epoll_wait(ep, &got, 1, 5000), 1);
}

/* How many times the handler ran, and how many of those while the test
 * was inside the call under test. */
static atomic_int hits, hits_in_call, in_call;

static void on_alarm(int sig)
{
	(void)sig;
	atomic_fetch_add(&hits, 1);
	if (atomic_load(&in_call))
		atomic_fetch_add(&hits_in_call, 1);
}

static void handle(int restart)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = restart ? SA_RESTART : 0 };

	sigemptyset(&sa.sa_mask);
	ASSERT_EQ(sigaction(SIGALRM, &sa, NULL), 0);
}

/* SIGALRM in 50 ms (to the thread under test: any other thread of the
 * process blocks it). */
static void arm(int restart)
{
	struct itimerval it = { .it_value = { 0, 50000 } };

	handle(restart);
	ASSERT_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
}

/* A watchdog for a call that a signal must interrupt: if the call has not
 * returned WATCHDOG_S after it began (the signal comes after 50 ms), the
 * watchdog writes a byte to the peer, so that the call returns data, not
 * EINTR, and the test fails by its assertion with a message saying why,
 * not by the runner's timeout. Its thread blocks every signal, so
 * SIGALRM still reaches the thread under test. */
#define WATCHDOG_S 3

struct watchdog {
	pthread_t t;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int peer;
	bool done, fired;
};

static void *watchdog_run(void *arg)
{
	struct watchdog *w = arg;
	struct timespec end;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += WATCHDOG_S;
	pthread_mutex_lock(&w->lock);
	while (!w->done && pthread_cond_timedwait(&w->cond, &w->lock, &end) != ETIMEDOUT)
		;
	if (!w->done) {
		w->fired = true;
		ASSERT_EQ(write(w->peer, "w", 1), 1);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void watchdog_start(struct watchdog *w, int peer)
{
	pthread_condattr_t ca;
	sigset_t all, old;

	*w = (struct watchdog){ .peer = peer };
	ASSERT_EQ(pthread_mutex_init(&w->lock, NULL), 0);
	ASSERT_EQ(pthread_condattr_init(&ca), 0);
	ASSERT_EQ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC), 0);
	ASSERT_EQ(pthread_cond_init(&w->cond, &ca), 0);
	sigfillset(&all);
	ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &all, &old), 0);
	ASSERT_EQ(pthread_create(&w->t, NULL, watchdog_run, w), 0);
	ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
}

/* Whether the watchdog had to end the call; says so on stderr. */
static bool watchdog_fired(struct watchdog *w, const char *call)
{
	int e = errno;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	ASSERT_EQ(pthread_join(w->t, NULL), 0);
	if (w->fired)
		fprintf(stderr, "%s: no EINTR within %d s of SIGALRM (the handler ran %d times); the watchdog's "
			"byte from the peer ended it\n", call, WATCHDOG_S, atomic_load(&hits));
	errno = e;
	return w->fired;
}

static void signal_interrupts_spinning_read(void)
{
	int c, s;
	char b;
	struct watchdog w;

	pair(BIG_SPIN, &c, &s);
	watchdog_start(&w, s);
	arm(0);
	atomic_store(&in_call, 1);
	ssize_t r = read(c, &b, 1);
	atomic_store(&in_call, 0);
	ASSERT(!watchdog_fired(&w, "read"));
	ASSERT_EQ(r, -1);
	ASSERT_EQ(errno, EINTR);
	ASSERT_EQ(atomic_load(&hits_in_call), 1);
}

static void signal_interrupts_spinning_poll_even_with_restart(void)
{
	int c, s;
	struct pollfd p;
	struct watchdog w;

	pair(BIG_SPIN, &c, &s);
	watchdog_start(&w, s);
	arm(1);
	p = (struct pollfd){ c, POLLIN, 0 };
	atomic_store(&in_call, 1);
	int r = poll(&p, 1, -1);
	atomic_store(&in_call, 0);
	ASSERT(!watchdog_fired(&w, "poll"));
	ASSERT_EQ(r, -1);
	ASSERT_EQ(errno, EINTR);
	ASSERT_EQ(atomic_load(&hits_in_call), 1);
}

struct signal_then_write {
	pthread_t reader;
	int fd;
};

/* Signals the reader once it is in its call (and 20 ms into the spin),
 * then, only after the handler has run, writes the data. */
static void *signal_then_write(void *arg)
{
	struct signal_then_write *a = arg;

	while (!atomic_load(&in_call))
		usleep(1000);
	usleep(20000);
	ASSERT_EQ(pthread_kill(a->reader, SIGALRM), 0);
	for (int i = 0; i < 10000 && !atomic_load(&hits); i++)
		usleep(1000);
	ASSERT_EQ(atomic_load(&hits), 1);
	ASSERT_EQ(write(a->fd, "late", 4), 4);
	return NULL;
}

/* A handler with SA_RESTART runs during the spin; the read goes on (no
 * EINTR) and returns the data, which was written only after the handler
 * ran, so the signal cannot have come after the read. */
static void sa_restart_read_continues(void)
{
	int c, s;
	char buf[8];
	pthread_t t;

	pair(BIG_SPIN, &c, &s);
	handle(1);
	struct signal_then_write a = { pthread_self(), s };
	pthread_create(&t, NULL, signal_then_write, &a);
	atomic_store(&in_call, 1);
	ssize_t r = read(c, buf, sizeof(buf));
	atomic_store(&in_call, 0);
	ASSERT_EQ(r, 4);
	pthread_join(t, NULL);
	ASSERT_EQ(atomic_load(&hits), 1);
	ASSERT_EQ(atomic_load(&hits_in_call), 1);
	struct sigaction old;
	ASSERT_EQ(sigaction(SIGALRM, NULL, &old), 0);
	ASSERT(old.sa_handler == on_alarm); /* the application sees its own handler */
}

static void nonblocking_does_not_spin(void)
{
	int c, s;
	char b;

	pair(BIG_SPIN, &c, &s);
	ASSERT_EQ(fcntl(c, F_SETFL, O_NONBLOCK), 0);
	double t0 = now();
	ASSERT_EQ(read(c, &b, 1), -1);
	ASSERT_EQ(errno, EAGAIN);
	ASSERT_EQ(recv(s, &b, 1, MSG_DONTWAIT), -1);
	ASSERT_EQ(errno, EAGAIN);
	ASSERT_LT(now() - t0, HANG_S);
}

static void rcvtimeo_is_honoured(void)
{
	int c, s;
	char b;
	struct timeval tv = { 0, 50000 };

	pair(BIG_SPIN, &c, &s);
	ASSERT_EQ(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	double t0 = now();
	ASSERT_EQ(read(c, &b, 1), -1);
	ASSERT_EQ(errno, EAGAIN);
	ASSERT_LT(now() - t0, HANG_S);
	ASSERT_GE((now() - t0) * 1000, 49);
}

/* A write that finds the socket full waits SO_SNDTIMEO, no less. */
static void sndtimeo_is_honoured(void)
{
	int c, s, small = 4096;
	static char chunk[65536];
	struct timeval tv = { 0, 50000 };

	pair(BIG_SPIN, &c, &s);
	ASSERT_EQ(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	ASSERT_EQ(fcntl(c, F_SETFL, O_NONBLOCK), 0);
	while (write(c, chunk, sizeof(chunk)) > 0)
		;
	ASSERT_EQ(errno, EAGAIN);
	ASSERT_EQ(fcntl(c, F_SETFL, 0), 0);
	ASSERT_EQ(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	double t0 = now();
	ASSERT_EQ(write(c, chunk, sizeof(chunk)), -1);
	ASSERT_EQ(errno, EAGAIN);
	ASSERT_GE((now() - t0) * 1000, 49);
}

/* Waits longer than the spin: the blocking call after the spin gets the
 * time that is left, so the whole wait is never shorter than asked. */
static void timeouts_longer_than_spin(void)
{
	int c, s, ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN }, got;
	struct pollfd p;
	fd_set r;
	struct timeval tv = { 0, 80000 };
	struct timespec ts = { 0, 80000000 };

	pair(20000, &c, &s); /* 20 ms */
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev), 0);
	p = (struct pollfd){ c, POLLIN, 0 };
	double t0 = now();
	ASSERT_EQ(poll(&p, 1, 80), 0);
	ASSERT_GE((now() - t0) * 1000, 79);
	t0 = now();
	ASSERT_EQ(ppoll(&p, 1, &ts, NULL), 0);
	ASSERT_GE((now() - t0) * 1000, 79);
	t0 = now();
	ASSERT_EQ(epoll_wait(ep, &got, 1, 80), 0);
	ASSERT_GE((now() - t0) * 1000, 79);
	FD_ZERO(&r);
	FD_SET(c, &r);
	t0 = now();
	ASSERT_EQ(select(c + 1, &r, NULL, NULL, &tv), 0);
	ASSERT_GE((now() - t0) * 1000, 79);
}

static long voluntary_switches(void)
{
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nvcsw;
}

/* Whether a read that waits ~50 ms for its data slept (blocked) or spun. */
static bool read_slept(int c, int s)
{
	char buf[8];
	pthread_t t;

	pthread_create(&t, NULL, late_writer, &s);
	long v0 = voluntary_switches();
	ASSERT_EQ(read(c, buf, sizeof(buf)), 4);
	long v1 = voluntary_switches();
	pthread_join(t, NULL);
	return v1 > v0;
}

struct late {
	int fd;
	unsigned ms;
};

static void *write_after(void *arg)
{
	struct late *l = arg;

	usleep(l->ms * 1000);
	ASSERT_EQ(write(l->fd, "late", 4), 4);
	return NULL;
}

/* Reads data written `ms` after the call starts; returns how many
 * voluntary context switches the reader made during the read. */
static long switches_reading_data_late(int c, int s, unsigned ms)
{
	struct late l = { s, ms };
	char buf[8];
	pthread_t t;
	double t0 = now();

	ASSERT_EQ(pthread_create(&t, NULL, write_after, &l), 0);
	long v0 = voluntary_switches();
	ASSERT_EQ(read(c, buf, sizeof(buf)), 4);
	long v1 = voluntary_switches();
	ASSERT_GE((now() - t0) * 1000, ms); /* the read did wait for the data */
	pthread_join(t, NULL);
	return v1 - v0;
}

/* A 200 ms budget, the data written 100 ms into the read: the read returns
 * it without one voluntary context switch, so it spun all that time. A
 * read that blocked, or a spin that gave up early, sleeps at least once. */
static void spin_outlasts_a_write_at_half_its_budget(void)
{
	int c, s;

	pair(200000, &c, &s);
	ASSERT_EQ(switches_reading_data_late(c, s, 100), 0);
}

/* ... and it does give up at its budget: with 20 ms, data written at
 * 100 ms finds the reader asleep. */
static void spin_gives_up_at_its_budget(void)
{
	int c, s;

	pair(20000, &c, &s);
	ASSERT_GT(switches_reading_data_late(c, s, 100), 0);
}

static void spinning_read_does_not_sleep(void)
{
	int c, s;

	pair(BIG_SPIN, &c, &s);
	ASSERT(!read_slept(c, s));
	ASSERT_EQ(lf_set_spin(c, 0), 0); /* control: without spin it blocks */
	ASSERT(read_slept(c, s));
}

/* A budget set before connect survives the switch to the fast path. */
static void spin_set_before_connect(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);

	setenv("LOOPFAST_SPIN_BACKOFF", "0", 1);
	ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	ASSERT_EQ(listen(lfd, 4), 0);
	ASSERT_EQ(lf_enable_fast_path(lfd), 0);
	ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&a, &l), 0);
	ASSERT_EQ(lf_enable_fast_path(c), 0);
	ASSERT_EQ(lf_set_spin(c, BIG_SPIN), 0);
	ASSERT_EQ(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	int s = accept(lfd, NULL, NULL);
	ASSERT_EQ(k_path(c, s), K_FAST);
	ASSERT(!read_slept(c, s));
}

static const struct lf_test tests[] = {
	{ "spinning_read_does_not_sleep", spinning_read_does_not_sleep, 0 },
	{ "spin_set_before_connect", spin_set_before_connect, 0 },
	{ "data_arrives_during_and_after_spin", data_arrives_during_and_after_spin, 0 },
	{ "poll_timeout_shorter_than_spin", poll_timeout_shorter_than_spin, 0 },
	{ "epoll_and_select_timeouts", epoll_and_select_timeouts, 0 },
	{ "signal_interrupts_spinning_read", signal_interrupts_spinning_read, 0 },
	{ "signal_interrupts_spinning_poll_even_with_restart", signal_interrupts_spinning_poll_even_with_restart, 0 },
	{ "sa_restart_read_continues", sa_restart_read_continues, 0 },
	{ "nonblocking_does_not_spin", nonblocking_does_not_spin, 0 },
	{ "rcvtimeo_is_honoured", rcvtimeo_is_honoured, 0 },
	{ "sndtimeo_is_honoured", sndtimeo_is_honoured, 0 },
	{ "timeouts_longer_than_spin", timeouts_longer_than_spin, 0 },
	{ "spin_outlasts_a_write_at_half_its_budget", spin_outlasts_a_write_at_half_its_budget, 0 },
	{ "spin_gives_up_at_its_budget", spin_gives_up_at_its_budget, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
