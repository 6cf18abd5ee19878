/* A client for test_supervisor.py, built -static in the test: connects to
 * 127.0.0.1:PORT (non-blocking with "nb": EINPROGRESS, then poll), prints
 * "names LOCAL PEER" (getsockname, getpeername, as the kernel answers
 * them to this program) and "domain D protocol P" (SO_DOMAIN,
 * SO_PROTOCOL), sends N bytes and reads them back, prints
 * "echo OK N" or "echo BAD", then with "wait" prints "waiting" and
 * sleeps until a signal ends it. With "late", waits for a line on stdin
 * before it connects. SIGPIPE is ignored, as Go does for
 * sockets: a write to a connection already ended fails (docs/supervisor.md:
 * under the supervisor a write after the bell's verdict fails at once). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void name(const struct sockaddr_in *a, char *out)
{
	if (a->sin_family != AF_INET) {
		sprintf(out, "family%d", a->sin_family);
		return;
	}
	sprintf(out, "%s:%u", inet_ntoa(a->sin_addr), ntohs(a->sin_port));
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	int port = atoi(argv[1]), n = atoi(argv[2]);
	int nb = argc > 3 && !strcmp(argv[3], "nb"), wait = argc > 3 && !strcmp(argv[argc - 1], "wait");
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (argc > 3 && !strcmp(argv[3], "late")) {
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			return 2;
	}
	int fd = socket(AF_INET, SOCK_STREAM | (nb ? SOCK_NONBLOCK : 0), 0);
	int r = connect(fd, (void *)&sa, sizeof(sa));
	if (r && errno == EINPROGRESS) {
		struct pollfd p = { fd, POLLOUT, 0 };
		int err = 0;
		socklen_t l = sizeof(err);
		poll(&p, 1, 10000);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
		r = err ? -1 : 0;
		errno = err;
		fcntl(fd, F_SETFL, 0);
	}
	if (r) {
		printf("connect %s\n", strerror(errno));
		return 1;
	}
	struct sockaddr_in la, pa;
	socklen_t ll = sizeof(la), pl = sizeof(pa);
	char ls[64], ps[64];
	getsockname(fd, (void *)&la, &ll);
	getpeername(fd, (void *)&pa, &pl);
	name(&la, ls);
	name(&pa, ps);
	int dom = -1, proto = -1;
	socklen_t dl = sizeof(dom), pl2 = sizeof(proto);
	getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl);
	getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl2);
	printf("names %s %s domain %d protocol %d\n", ls, ps, dom, proto);
	fflush(stdout);
	char *out = malloc((size_t)n), *in = malloc((size_t)n);
	for (int i = 0; i < n; i++)
		out[i] = (char)(i * 7 + 3);
	ssize_t done = 0, got = 0;
	while (done < n) {
		ssize_t w = write(fd, out + done, (size_t)(n - done));
		if (w <= 0)
			break;
		done += w;
	}
	while (got < n) {
		ssize_t k = read(fd, in + got, (size_t)(n - got));
		if (k <= 0)
			break;
		got += k;
	}
	printf(got == n && !memcmp(in, out, (size_t)n) ? "echo OK %zd\n" : "echo BAD %zd\n", got);
	fflush(stdout);
	if (wait) {
		printf("waiting\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	return 0;
}
