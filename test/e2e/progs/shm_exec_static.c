/* Built static (test_shm.py): a program exec'd with a tier socket that
 * cannot load loopfast. It waits for a line on stdin (the test looks at
 * /proc meanwhile), reads the socket (argv[1]) to its end, writes a byte,
 * and says what it saw: "read N end EOF|timeout|ERRNO write ok|ERRNO". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strerrorname_np; the build defines it already */
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int fd = argc > 1 ? atoi(argv[1]) : -1;
	static char b[65536];
	long n = 0;
	ssize_t r;

	signal(SIGPIPE, SIG_IGN);
	printf("static %d\n", (int)getpid());
	fflush(stdout);
	(void)getchar();
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, 5000) <= 0) {
			printf("read %ld end timeout", n);
			break;
		}
		r = read(fd, b, sizeof(b));
		if (r <= 0) {
			printf("read %ld end %s", n, r == 0 ? "EOF" : strerrorname_np(errno));
			break;
		}
		n += r;
	}
	r = write(fd, "x", 1);
	printf(" write %s\n", r == 1 ? "ok" : strerrorname_np(errno));
	return 0;
}
