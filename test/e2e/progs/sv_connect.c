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
 *   keepopts  a blocking connect (SOCK_CLOEXEC: "cloexec 1" once
 *             connected, from F_GETFD), then for TCP_NODELAY, TCP_KEEPIDLE,
 *             TCP_KEEPINTVL and TCP_KEEPCNT: a set of 7 twice, of 0, of
 *             40000 and of 7 with an optlen of 2, then a get: "opt N
 *             set R R R R R get V" (R: 0 or strerror);
 * Prints "signal" from the handler when it runs, then "connect R" (0, or
 * strerror); after EINTR or EINPROGRESS waits for the handshake with
 * poll and prints "poll E" (SO_ERROR: 0 or strerror). Once connected:
 * "names LOCAL PEER domain D" (getsockname, getpeername, SO_DOMAIN),
 * 100000 bytes sent and read back ("echo OK N" or "echo BAD N"), then
 * "waiting" until a signal ends it. */
#include "sv.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/time.h>

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

/* The four options whose sets the supervisor answers from the values it
 * saw accepted (supervise_sockopt.c, pure_set): valid and invalid values. */
static void keep_opts(int fd)
{
	static const int opts[] = { TCP_NODELAY, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT };
	static const int vals[] = { 7, 7, 0, 40000 };

	for (unsigned i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		int v = -1;
		socklen_t l = sizeof(v);
		printf("opt %d set", opts[i]);
		for (unsigned k = 0; k < sizeof(vals) / sizeof(vals[0]); k++)
			printf(" %s", setsockopt(fd, IPPROTO_TCP, opts[i], &vals[k], sizeof(int)) ? strerror(errno) : "0");
		printf(" %s", setsockopt(fd, IPPROTO_TCP, opts[i], &vals[0], 2) ? strerror(errno) : "0");
		getsockopt(fd, IPPROTO_TCP, opts[i], &v, &l);
		printf(" get %d\n", v);
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	const char *mode = argv[2], *fam = argc > 3 ? argv[3] : "4";
	struct sockaddr_storage ss;
	socklen_t sl = sv_loopback(&ss, fam, atoi(argv[1]));
	int nb = !strcmp(mode, "nb") || !strcmp(mode, "epollet-nb"), ep = -1;
	if (!strcmp(mode, "epollet-late")) {
		int first = socket(ss.ss_family, SOCK_STREAM, 0);
		say("first connect", connect(first, (void *)&ss, sl) ? errno : 0);
	}
	int keep = !strcmp(mode, "keepopts");
	int fd = socket(ss.ss_family, SOCK_STREAM | (nb ? SOCK_NONBLOCK : 0) | (keep ? SOCK_CLOEXEC : 0), 0);
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
	if (keep) {
		printf("cloexec %d\n", !!(fcntl(fd, F_GETFD) & FD_CLOEXEC));
		keep_opts(fd);
	}
	if (!strcmp(mode, "rcvtimeo")) {
		char b;
		ssize_t k = read(fd, &b, 1);
		say("read", k < 0 ? errno : 0);
	}
	char names[200];
	int dom = -1;
	socklen_t dl = sizeof(dom);
	sv_names(fd, names, sizeof(names));
	getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl);
	printf("names %s domain %d\n", names, dom);
	sv_echo(fd, 100000);
	printf("waiting\n");
	fflush(stdout);
	for (;;)
		pause();
}
