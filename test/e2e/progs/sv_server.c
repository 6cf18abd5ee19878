/* A blocking echo server for test_supervisor.py, built -static in the
 * test: listens on 127.0.0.1:0, prints "listening PORT", then serves one
 * connection at a time with a blocking accept, printing "accepted LOCAL
 * REMOTE" (getsockname, and the address accept wrote) and echoing until
 * EOF. With "eintr", SIGUSR1 has a handler installed without SA_RESTART:
 * an accept it interrupts prints "accept Interrupted system call" and the
 * server goes on; with "restart", the same handler with SA_RESTART (the
 * accept goes on by itself; the handler prints "signal"). With
 * "rcvtimeo", the listener has SO_RCVTIMEO 500 ms: the first accept that
 * times out prints "accept Resource temporarily unavailable", and the
 * timeout is taken off. With "inherit", the listener has SO_KEEPALIVE
 * and SO_RCVTIMEO 300 ms (set before listen; its accepts that time out
 * are made again), which accepted connections inherit: after the
 * "accepted" line the server prints "inherited keepalive K rcvtimeo MS"
 * (the accepted socket's), then its first read's answer ("read N", or
 * "read ERROR": EAGAIN when the client sent nothing within 300 ms), and
 * closes the connection at the client's end (EOF). Any other accept
 * error but ECONNABORTED ends it (status 1): under a supervisor that died,
 * accept fails with ENOSYS for ever, and a retry would spin. SV_HOST in
 * the environment: another address to listen on ("::1", "::": IPv6, a
 * dual-stack listener); IPv6 addresses are printed "[ADDR]:PORT". */
#include "sv.h"

#include <errno.h>
#include <signal.h>
#include <sys/time.h>

static volatile sig_atomic_t caught;

static void on_usr1(int sig)
{
	(void)sig;
	caught = 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage sa = { 0 };
	struct sockaddr_in *v4 = (void *)&sa;
	struct sockaddr_in6 *v6 = (void *)&sa;
	const char *host = getenv("SV_HOST");
	socklen_t sl;
	char buf[65536], ls[64], ps[64];

	if (argc > 1 && (!strcmp(argv[1], "eintr") || !strcmp(argv[1], "restart"))) {
		struct sigaction act = { .sa_handler = on_usr1, .sa_flags = strcmp(argv[1], "restart") ? 0 : SA_RESTART };
		sigaction(SIGUSR1, &act, NULL);
	}
	signal(SIGPIPE, SIG_IGN);
	if (host && strchr(host, ':')) {
		v6->sin6_family = AF_INET6;
		inet_pton(AF_INET6, host, &v6->sin6_addr);
		sl = sizeof(*v6);
	} else {
		v4->sin_family = AF_INET;
		v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof(*v4);
	}
	int l = socket(sa.ss_family, SOCK_STREAM, 0), one = 1;
	int inherit = argc > 1 && !strcmp(argv[1], "inherit");
	if (inherit) { /* before listen, as servers set them */
		struct timeval t3 = { 0, 300000 };
		setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &t3, sizeof(t3));
		setsockopt(l, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	}
	if (l < 0 || bind(l, (void *)&sa, sl) || listen(l, 16) || getsockname(l, (void *)&sa, &sl)) {
		printf("listen %s\n", strerror(errno));
		return 1;
	}
	struct timeval tv = { 0, 500000 };
	int rcvtimeo = argc > 1 && !strcmp(argv[1], "rcvtimeo");
	if (rcvtimeo)
		setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	printf("listening %u\n", ntohs(sa.ss_family == AF_INET6 ? v6->sin6_port : v4->sin_port));
	fflush(stdout);
	for (;;) {
		struct sockaddr_storage la, pa;
		socklen_t ll = sizeof(la), pl = sizeof(pa);
		int c = accept(l, (void *)&pa, &pl);
		if (caught) {
			printf("signal\n");
			caught = 0;
		}
		if (c < 0 && inherit && errno == EAGAIN)
			continue; /* the listener's own SO_RCVTIMEO */
		if (c < 0) {
			int e = errno;
			printf("accept %s\n", strerror(e));
			fflush(stdout);
			if (rcvtimeo && e == EAGAIN) {
				tv.tv_usec = 0;
				setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			}
			if (e == EINTR || e == ECONNABORTED || (rcvtimeo && e == EAGAIN))
				continue;
			return 1; /* ENOSYS (the supervisor is gone) and the rest: never spin */
		}
		getsockname(c, (void *)&la, &ll);
		sv_name(&la, ls, sizeof(ls));
		sv_name(&pa, ps, sizeof(ps));
		printf("accepted %s %s\n", ls, ps);
		fflush(stdout);
		if (inherit) {
			int ka = -1;
			struct timeval t = { 0 };
			socklen_t kl = sizeof(ka), tl = sizeof(t);
			getsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &ka, &kl);
			getsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &t, &tl);
			printf("inherited keepalive %d rcvtimeo %ld\n", ka, (long)(t.tv_sec * 1000 + t.tv_usec / 1000));
			fflush(stdout);
			ssize_t k = read(c, buf, sizeof(buf));
			if (k < 0)
				printf("read %s\n", strerror(errno));
			else
				printf("read %zd\n", k);
			fflush(stdout);
			while ((k = read(c, buf, sizeof(buf))) > 0 || (k < 0 && errno == EAGAIN))
				;
			close(c);
			continue;
		}
		ssize_t n;
		while ((n = read(c, buf, sizeof(buf))) > 0)
			for (ssize_t off = 0, w; off < n; off += w)
				if ((w = write(c, buf + off, (size_t)(n - off))) <= 0)
					break;
		close(c);
	}
}
