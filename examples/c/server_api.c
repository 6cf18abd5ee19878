/* An echo server that opts its listener in with the C call.
 *
 *   cc -o server_api server_api.c $(pkg-config --cflags --libs loopfast)
 *   ./server_api [PORT]        (0 or none: any free port, printed)
 *
 * Linking libloopfast is enough: no `loopfast run`. Connections from
 * clients that opted in take the fast path; the others are plain TCP. */
#include <loopfast.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1, r;

	a.sin_port = htons(argc > 1 ? (unsigned short)atoi(argv[1]) : 0);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 16) ||
	    getsockname(ls, (struct sockaddr *)&a, &l)) {
		perror("server_api");
		return 1;
	}
	if ((r = lf_enable_fast_path(ls)) < 0) /* before or after listen */
		fprintf(stderr, "server_api: no fast path (%s): plain TCP\n", lf_strerror(r));
	printf("listening on %u\n", ntohs(a.sin_port));
	fflush(stdout);
	for (;;) {
		int c = accept(ls, NULL, NULL);
		char buf[4096];
		ssize_t n;

		if (c < 0)
			continue;
		printf("accepted: %s\n", lf_fast_path_active(c) == 1 ? "fast path" : "plain TCP");
		fflush(stdout);
		while ((n = read(c, buf, sizeof(buf))) > 0)
			if (write(c, buf, (size_t)n) != n)
				break;
		close(c);
	}
}
