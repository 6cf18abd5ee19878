/* A SIGALRM handler dup2s a socket onto descriptor 2 while the main loop
 * reads it (test_shm.py): the server writes for a second, then closes.
 * Every 2 ms the handler, which may interrupt a read inside the tier's
 * read lock, calls dup2(sock, 2): dup2 is async-signal-safe. Prints
 * "bytes N ok K refused R other O" at the end of the stream. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int sock;
static volatile sig_atomic_t ok, refused, other;

static void on_alarm(int sig)
{
	int e = errno;
	(void)sig;
	if (dup2(sock, 2) == 2)
		ok++;
	else if (errno == EOPNOTSUPP)
		refused++;
	else
		other++;
	errno = e;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static char buf[65536];
	long long bytes = 0;

	if (argc < 2)
		return 2;
	sa.sin_port = htons((unsigned short)atoi(argv[1]));
	sock = socket(AF_INET, SOCK_STREAM, 0);
	if (sock < 0 || connect(sock, (void *)&sa, sizeof sa))
		return 2;
	struct sigaction act = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval t = { { 0, 2000 }, { 0, 2000 } };
	sigaction(SIGALRM, &act, NULL);
	setitimer(ITIMER_REAL, &t, NULL);
	for (;;) {
		ssize_t r = read(sock, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		bytes += r;
	}
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	printf("bytes %lld ok %d refused %d other %d\n", bytes, (int)ok, (int)refused, (int)other);
	return 0;
}
