/* lfprobe scenarios: connect's own semantics where the handshake cannot
 * complete at once: a signal during a blocking connect, a non-blocking
 * connect, SO_SNDTIMEO, connect called again. To make the handshake wait
 * deterministically, the listener's accept queue is filled (backlog 0 and
 * one client connected but not accepted): the kernel drops every SYN that
 * arrives while the queue is full, and the client retransmits it about 1 s
 * later, 3 s, 7 s ... So nothing completes before the server accepts, and
 * once it has, the next retransmission gets through. */
#include "probe.h"

#include <sys/time.h>

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* SIGALRM interrupts system calls (no SA_RESTART). */
static void catch_alarm(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
}

/* One SIGALRM after ms milliseconds (0: cancel). */
static void alarm_ms(long ms)
{
	struct itimerval it = { { 0, 0 }, { ms / 1000, (ms % 1000) * 1000 } };
	CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
}

/* A listener whose accept queue is full: backlog 0 (room for one) and one
 * client connected but not accepted (*filler). */
static int full_listener(int *port, int *filler)
{
	int l = listen_socket(0, 0);
	CHECK(listen(l, 0) == 0);
	*port = port_of(l, 0);
	*filler = connect_to(*port);
	return l;
}

/* The server accepts the filler (making room in the queue) and checks it. */
static void accept_filler(int l, int filler)
{
	int s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("filler-client", filler);
	path("filler-server", s);
	out("filler:");
	expect_echo_pair(filler, s);
	close(s);
	close(filler);
}

static void print_so_error(int c)
{
	int err = -1;
	socklen_t el = sizeof(err);
	CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0);
	out("SO_ERROR %s", ename(err));
}

static void print_connect(const char *what, int r, int e)
{
	out("%s: %d %s", what, r, ename(r < 0 ? e : 0));
}

/* connect(c) once, with a SIGALRM after alarm_after ms (0: none), and
 * prints its result as WHAT. A call that has not returned within secs
 * ends the probe ("WHAT: still blocked after N s", see watch()). */
static int try_connect(int c, const struct sockaddr_storage *ss, socklen_t sl, long alarm_after, int secs,
		       const char *what)
{
	watch(what, secs);
	if (alarm_after)
		alarm_ms(alarm_after);
	int r = connect(c, (const void *)ss, sl), e = errno;
	if (alarm_after)
		alarm_ms(0);
	unwatch();
	print_connect(what, r, e);
	return r;
}

/* Waits (at most 10 s: two SYN retransmissions) for c to become writable. */
static void poll_writable(int c)
{
	struct pollfd p = { c, POLLOUT, 0 };
	int n = poll(&p, 1, 10000);
	out("poll: %d POLLOUT %d POLLERR %d POLLHUP %d", n, !!(p.revents & POLLOUT), !!(p.revents & POLLERR),
	    !!(p.revents & POLLHUP));
}

/* The connection c made is accepted and carries bytes both ways; c may be
 * non-blocking. */
static void accept_and_talk(int l, int c)
{
	char b;
	int s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("client", c);
	path("server", s);
	out("server peer port == client local port: %d", port_of(s, 1) == port_of(c, 0));
	write_all(c, "x", 1);
	CHECK(read(s, &b, 1) == 1 && b == 'x');
	write_all(s, "y", 1);
	CHECK(poll(&(struct pollfd){ c, POLLIN, 0 }, 1, 5000) == 1);
	CHECK(read(c, &b, 1) == 1 && b == 'y');
	out("both directions ok");
	close(s);
}

/* A blocking connect that waits for a full accept queue is interrupted by
 * a signal (EINTR), as TCP's is; the connection attempt goes on: a second
 * connect waits for it again (and is interrupted again), and once the
 * server makes room the socket becomes writable and connected. */
void sc_connect_eintr(void)
{
	struct sockaddr_storage ss;
	int port, filler, l = full_listener(&port, &filler);
	socklen_t sl = loopback(&ss, port);

	catch_alarm();
	int c = socket(fam, SOCK_STREAM, 0);
	CHECK(c >= 0);
	try_connect(c, &ss, sl, 100, 5, "blocking connect to a full queue, SIGALRM after 100 ms");
	out("alarm handler ran: %d", alarms == 1);
	try_connect(c, &ss, sl, 100, 5, "connect again, still full, SIGALRM after 100 ms");
	out("alarm handler ran: %d", alarms == 2);
	print_so_error(c);
	accept_filler(l, filler);
	poll_writable(c);
	print_so_error(c);
	try_connect(c, &ss, sl, 0, 5, "connect once writable");
	try_connect(c, &ss, sl, 0, 5, "connect again");
	accept_and_talk(l, c);
}

/* A blocking connect that waits for a full accept queue and is interrupted
 * is finished by a second, blocking connect that waits for the handshake
 * (the server makes room in the meantime, from another thread). */
static void *accept_later(void *arg)
{
	int *a = arg;
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	int s = accept(a[0], NULL, NULL);
	CHECK(s >= 0);
	close(s);
	return NULL;
}

void sc_connect_eintr_reconnect(void)
{
	struct sockaddr_storage ss;
	int port, filler, l = full_listener(&port, &filler);
	socklen_t sl = loopback(&ss, port);
	pthread_t t;

	catch_alarm();
	int c = socket(fam, SOCK_STREAM, 0);
	CHECK(c >= 0);
	try_connect(c, &ss, sl, 100, 5, "blocking connect to a full queue, SIGALRM after 100 ms");
	int arg[1] = { l };
	CHECK(pthread_create(&t, NULL, accept_later, arg) == 0);
	/* Blocks until a retransmitted SYN gets through (after the accept,
	 * 1 or 3 s after the first SYN). */
	try_connect(c, &ss, sl, 0, 20, "blocking connect again while the server makes room");
	CHECK(pthread_join(t, NULL) == 0);
	close(filler);
	print_so_error(c);
	try_connect(c, &ss, sl, 0, 5, "connect again");
	accept_and_talk(l, c);
}

enum waiter { BY_POLL, BY_EPOLL, BY_SELECT };

/* A non-blocking connect to a full queue returns EINPROGRESS at once (the
 * 5 s alarm would interrupt a connect that blocked, the 10 s watchdog one
 * that no signal ends), is not writable
 * while the queue stays full, and completes once the server makes room;
 * the application learns it by poll, epoll (registered after connect) or
 * select. */
static void nonblock_full(enum waiter how)
{
	struct sockaddr_storage ss;
	int port, filler, l = full_listener(&port, &filler), n, r;
	socklen_t sl = loopback(&ss, port);
	struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = 42 }, got;
	int ep = -1;

	catch_alarm();
	int c = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0);
	CHECK(c >= 0);
	try_connect(c, &ss, sl, 5000, 10, "non-blocking connect to a full queue");
	out("returned before the 5 s watchdog: %d", alarms == 0);
	if (how == BY_POLL) {
		struct pollfd p = { c, POLLOUT, 0 };
		out("poll(0) while full: %d", poll(&p, 1, 0));
	} else if (how == BY_EPOLL) {
		ep = epoll_create1(EPOLL_CLOEXEC);
		CHECK(ep >= 0);
		CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
		out("epoll_wait(0) while full: %d", epoll_wait(ep, &got, 1, 0));
	} else {
		fd_set w;
		FD_ZERO(&w);
		FD_SET(c, &w);
		struct timeval tv = { 0, 0 };
		out("select(0) while full: %d", select(c + 1, NULL, &w, NULL, &tv));
	}
	try_connect(c, &ss, sl, 0, 5, "connect again while full");
	accept_filler(l, filler);
	if (how == BY_POLL) {
		poll_writable(c);
	} else if (how == BY_EPOLL) {
		n = epoll_wait(ep, &got, 1, 10000);
		out("epoll_wait: %d EPOLLOUT %d EPOLLERR %d data %llu", n, n == 1 && (got.events & EPOLLOUT),
		    n == 1 && (got.events & EPOLLERR), n == 1 ? (unsigned long long)got.data.u64 : 0ull);
	} else {
		fd_set w, x;
		FD_ZERO(&w);
		FD_ZERO(&x);
		FD_SET(c, &w);
		FD_SET(c, &x);
		struct timeval tv = { 10, 0 };
		n = select(c + 1, NULL, &w, &x, &tv);
		out("select: %d writable %d except %d", n, FD_ISSET(c, &w) != 0, FD_ISSET(c, &x) != 0);
	}
	print_so_error(c);
	out("still non-blocking: %d", !!(fcntl(c, F_GETFL) & O_NONBLOCK));
	accept_and_talk(l, c);
	if (how == BY_EPOLL) {
		/* The registration made while the connect was in progress still
		 * reports the connection's events: here the server's close. */
		char b;
		ev.events = EPOLLIN;
		CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0);
		n = epoll_wait(ep, &got, 1, 5000);
		out("after the server closed: %d EPOLLIN %d data %llu", n, n == 1 && (got.events & EPOLLIN),
		    n == 1 ? (unsigned long long)got.data.u64 : 0ull);
		r = (int)read(c, &b, 1);
		out("read: %d %s", r, ename(r < 0 ? errno : 0));
		close(ep);
	}
	close(c);
}

void sc_connect_full_poll(void) { nonblock_full(BY_POLL); }
void sc_connect_full_epoll(void) { nonblock_full(BY_EPOLL); }
void sc_connect_full_select(void) { nonblock_full(BY_SELECT); }

/* SO_SNDTIMEO bounds a blocking connect: when it expires with the
 * handshake not done, connect returns EINPROGRESS and the attempt goes on. */
void sc_connect_sndtimeo(void)
{
	struct sockaddr_storage ss;
	int port, filler, l = full_listener(&port, &filler);
	socklen_t sl = loopback(&ss, port);
	struct timeval tv = { 0, 200000 };

	catch_alarm();
	int c = socket(fam, SOCK_STREAM, 0);
	CHECK(c >= 0);
	CHECK(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0);
	uint64_t t0 = now_us();
	try_connect(c, &ss, sl, 5000, 10, "blocking connect with SO_SNDTIMEO 200 ms to a full queue");
	out("after >= 200 ms: %s", at_least(t0, 200));
	out("returned before the 5 s watchdog: %d", alarms == 0);
	try_connect(c, &ss, sl, 5000, 10, "connect again, still full");
	out("returned before the 5 s watchdog: %d", alarms == 0);
	accept_filler(l, filler);
	poll_writable(c);
	print_so_error(c);
	out("still blocking: %d", !(fcntl(c, F_GETFL) & O_NONBLOCK));
	accept_and_talk(l, c);
}

/* connect again after EINPROGRESS: EALREADY while the handshake is in
 * progress, 0 once it has completed, EISCONN after that. The program
 * learns completion from connect alone (no poll), as some do. */
void sc_connect_again(void)
{
	struct sockaddr_storage ss;
	int port, filler, l = full_listener(&port, &filler);
	socklen_t sl = loopback(&ss, port);

	int c = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0);
	CHECK(c >= 0);
	try_connect(c, &ss, sl, 0, 5, "non-blocking connect to a full queue");
	try_connect(c, &ss, sl, 0, 5, "connect again");
	try_connect(c, &ss, sl, 0, 5, "and again");
	accept_filler(l, filler);
	/* Every 10 ms until the answer changes (at most 10 s). */
	const char *first = "connect after the server made room, first answer other than EALREADY";
	int tries = 0, r, e;
	watch(first, 20);
	for (;;) {
		r = connect(c, (void *)&ss, sl), e = errno;
		if (!(r < 0 && e == EALREADY) || ++tries == 1000)
			break;
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	}
	unwatch();
	out("# %d times EALREADY", tries);
	print_connect(first, r, e);
	try_connect(c, &ss, sl, 0, 5, "connect again");
	try_connect(c, &ss, sl, 0, 5, "and again");
	print_so_error(c);
	accept_and_talk(l, c);
}

/* Under SA_RESTART a signal does not end a blocking connect: the kernel
 * restarts it, and it returns once the handshake completes (the server
 * makes room from another thread). */
void sc_connect_restart(void)
{
	struct sockaddr_storage ss;
	int port, filler, l = full_listener(&port, &filler);
	socklen_t sl = loopback(&ss, port);
	struct sigaction sa;
	pthread_t t;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
	int c = socket(fam, SOCK_STREAM, 0);
	CHECK(c >= 0);
	int arg[1] = { l };
	CHECK(pthread_create(&t, NULL, accept_later, arg) == 0);
	/* Returns once a retransmitted SYN gets through (after the accept). */
	try_connect(c, &ss, sl, 100, 20, "blocking connect to a full queue, SA_RESTART SIGALRM after 100 ms");
	out("alarm handler ran: %d", alarms == 1);
	CHECK(pthread_join(t, NULL) == 0);
	close(filler);
	print_so_error(c);
	try_connect(c, &ss, sl, 0, 5, "connect again");
	accept_and_talk(l, c);
}
