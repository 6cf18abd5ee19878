/* A client for test_supervisor_connect.py, built -static in the test:
 * TCP's connect behaviours, compared without loopfast and under the
 * supervisor. Usage: sv_connect PORT MODE [FAMILY]; FAMILY "4"
 * (127.0.0.1, the default), "6" (::1) or "4m" (::ffff:127.0.0.1 on an
 * AF_INET6 socket). MODE:
 *   block     a blocking connect;
 *   eintr     a blocking connect, SIGALRM's handler (no SA_RESTART) due
 *             after 600 ms (the supervisor has received the call by then);
 *   restart   the same with SA_RESTART;
 *   sndtimeo  a blocking connect with SO_SNDTIMEO 500 ms;
 *   nb        a non-blocking connect;
 *   rcvtimeo  a blocking connect with SO_RCVTIMEO 300 ms set before it:
 *             once connected, a read before anything was sent prints
 *             "read R" (EAGAIN's message over TCP);
 *   epollet, epollet-nb  the socket (blocking, or non-blocking) put in
 *             an epoll set with EPOLLIN | EPOLLOUT | EPOLLET before a
 *             connect, then the server's first bytes waited for by that
 *             registration alone (epoll_wait, 3 s at most each, and
 *             non-blocking reads until EAGAIN): "epoll got 'BYTES'" once
 *             5 bytes have come, or "epoll timeout, got 'BYTES'"; then
 *             "waiting" until a signal ends it (no echo);
 *   epollet-late  first another socket's blocking connect ("first
 *             connect R", kept open), made before the program has any
 *             epoll; then as epollet.
 * Prints "signal" from the handler when it runs, then "connect R" (0, or
 * strerror); after EINTR or EINPROGRESS waits for the handshake with
 * poll and prints "poll E" (SO_ERROR: 0 or strerror). Once connected:
 * "names LOCAL PEER domain D" (getsockname, getpeername, SO_DOMAIN),
 * 100000 bytes sent and read back ("echo OK N" or "echo BAD N"), then
 * "waiting" until a signal ends it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static void on_alarm(int sig)
{
	(void)sig;
	(void)!write(1, "signal\n", 7);
}

static void say(const char *what, int err)
{
	printf("%s %s\n", what, err ? strerror(err) : "0");
	fflush(stdout);
}

static void name(const struct sockaddr_storage *a, char *out, size_t size)
{
	char h[INET6_ADDRSTRLEN] = "?";
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)a;
		inet_ntop(AF_INET, &s->sin_addr, h, sizeof(h));
		snprintf(out, size, "%s:%u", h, ntohs(s->sin_port));
	} else if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)a;
		inet_ntop(AF_INET6, &s->sin6_addr, h, sizeof(h));
		snprintf(out, size, "[%s]:%u", h, ntohs(s->sin6_port));
	} else {
		snprintf(out, size, "family%d", a->ss_family);
	}
}

/* The epollet modes: the server's first 5 bytes, told by the epoll
 * registration made before connect. */
static _Noreturn void epoll_read(int ep, int fd)
{
	char got[6] = "";
	size_t n = 0;
	struct epoll_event ev;

	while (n < 5) {
		if (epoll_wait(ep, &ev, 1, 3000) != 1)
			break;
		ssize_t k;
		while (n < 5 && (k = recv(fd, got + n, 5 - n, MSG_DONTWAIT)) > 0)
			n += (size_t)k;
	}
	printf(n == 5 ? "epoll got '%s'\nwaiting\n" : "epoll timeout, got '%s'\nwaiting\n", got);
	fflush(stdout);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	const char *mode = argv[2], *fam = argc > 3 ? argv[3] : "4";
	unsigned short port = (unsigned short)atoi(argv[1]);
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	if (!strcmp(fam, "4")) {
		struct sockaddr_in *a = (void *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		inet_pton(AF_INET6, strcmp(fam, "6") ? "::ffff:127.0.0.1" : "::1", &a->sin6_addr);
		sl = sizeof(*a);
	}
	int nb = !strcmp(mode, "nb") || !strcmp(mode, "epollet-nb"), ep = -1;
	if (!strcmp(mode, "epollet-late")) {
		int first = socket(ss.ss_family, SOCK_STREAM, 0);
		say("first connect", connect(first, (void *)&ss, sl) ? errno : 0);
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | (nb ? SOCK_NONBLOCK : 0), 0);
	if (!strncmp(mode, "epollet", 7)) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.fd = fd };
		ep = epoll_create1(EPOLL_CLOEXEC);
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
			return 1;
	}
	if (!strcmp(mode, "eintr") || !strcmp(mode, "restart")) {
		struct sigaction act = { .sa_handler = on_alarm, .sa_flags = strcmp(mode, "restart") ? 0 : SA_RESTART };
		struct itimerval t = { .it_value = { 0, 600000 } };
		sigaction(SIGALRM, &act, NULL);
		setitimer(ITIMER_REAL, &t, NULL);
	}
	if (!strcmp(mode, "rcvtimeo")) {
		struct timeval tv = { 0, 300000 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	if (!strcmp(mode, "sndtimeo")) {
		struct timeval tv = { 0, 500000 };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	int r = connect(fd, (void *)&ss, sl), e = r ? errno : 0;
	say("connect", e);
	if (ep >= 0)
		epoll_read(ep, fd);
	if (e == EINTR || e == EINPROGRESS) {
		struct pollfd p = { fd, POLLOUT, 0 };
		socklen_t l = sizeof(e);
		if (poll(&p, 1, 30000) != 1)
			return 1;
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
		say("poll", e);
	}
	if (e)
		return 1;
	fcntl(fd, F_SETFL, 0);
	if (!strcmp(mode, "rcvtimeo")) {
		char b;
		ssize_t k = read(fd, &b, 1);
		say("read", k < 0 ? errno : 0);
	}
	struct sockaddr_storage la, pa;
	socklen_t ll = sizeof(la), pl = sizeof(pa);
	char ls[80], ps[80];
	int dom = -1;
	socklen_t dl = sizeof(dom);
	getsockname(fd, (void *)&la, &ll);
	getpeername(fd, (void *)&pa, &pl);
	getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl);
	name(&la, ls, sizeof(ls));
	name(&pa, ps, sizeof(ps));
	printf("names %s %s domain %d\n", ls, ps, dom);
	enum { N = 100000 };
	static char out[N], in[N];
	ssize_t done = 0, got = 0;
	for (int i = 0; i < N; i++)
		out[i] = (char)(i * 7 + 3);
	while (done < N) {
		ssize_t w = write(fd, out + done, (size_t)(N - done));
		if (w <= 0)
			break;
		done += w;
	}
	while (got < N) {
		ssize_t k = read(fd, in + got, (size_t)(N - got));
		if (k <= 0)
			break;
		got += k;
	}
	printf(got == N && !memcmp(in, out, N) ? "echo OK %zd\nwaiting\n" : "echo BAD %zd\nwaiting\n", got);
	fflush(stdout);
	for (;;)
		pause();
}
