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
#include "sv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	int port = atoi(argv[1]), n = atoi(argv[2]);
	int nb = argc > 3 && !strcmp(argv[3], "nb"), wait = argc > 3 && !strcmp(argv[argc - 1], "wait");
	struct sockaddr_storage sa;
	socklen_t sl = sv_loopback(&sa, "4", port);
	if (argc > 3 && !strcmp(argv[3], "late")) {
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			return 2;
	}
	int fd = socket(AF_INET, SOCK_STREAM | (nb ? SOCK_NONBLOCK : 0), 0);
	int r = connect(fd, (void *)&sa, sl);
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
	char names[200];
	sv_names(fd, names, sizeof(names));
	int dom = -1, proto = -1;
	socklen_t dl = sizeof(dom), pl = sizeof(proto);
	getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl);
	getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl);
	printf("names %s domain %d protocol %d\n", names, dom, proto);
	fflush(stdout);
	sv_echo(fd, (size_t)n);
	if (wait) {
		printf("waiting\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	return 0;
}
