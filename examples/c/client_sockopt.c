/* An echo client that opts in with the socket option, as a program in any
 * language can: no loopfast header or library is needed to build it.
 *
 *   cc -o client_sockopt client_sockopt.c
 *   loopfast run --per-socket -- ./client_sockopt PORT < lines
 *
 * Without loopfast the kernel refuses the option (ENOPROTOOPT) and the
 * client carries on over TCP, like Windows' SIO_LOOPBACK_FAST_PATH on an
 * older system. Each line of stdin is sent and its echo printed. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SOL_LOOPFAST 0x4c46 /* as in <loopfast.h> */
#define LOOPFAST_FAST_PATH 1

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1, on = 0;
	socklen_t l = sizeof(on);
	char line[4096], back[4096];

	if (argc < 2) {
		fprintf(stderr, "usage: client_sockopt PORT\n");
		return 2;
	}
	a.sin_port = htons((unsigned short)atoi(argv[1]));
	if (setsockopt(s, SOL_LOOPFAST, LOOPFAST_FAST_PATH, &one, sizeof(one)) < 0)
		printf("option refused (%s): plain TCP\n", strerror(errno)); /* ENOPROTOOPT: no loopfast */
	if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
		perror("client_sockopt: connect");
		return 1;
	}
	if (getsockopt(s, SOL_LOOPFAST, LOOPFAST_FAST_PATH, &on, &l) < 0)
		on = 0;
	printf("connected: %s\n", on ? "fast path" : "plain TCP");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		size_t n = strlen(line), got = 0;
		if (write(s, line, n) != (ssize_t)n)
			return 1;
		while (got < n) {
			ssize_t r = read(s, back + got, n - got);
			if (r <= 0)
				return 1;
			got += (size_t)r;
		}
		printf("echo: %.*s", (int)got, back);
		fflush(stdout);
	}
	return 0;
}
