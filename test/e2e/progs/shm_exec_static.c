/* Built static (test_shm.py): a program exec'd with a tier socket that
 * cannot load loopfast. It waits for a line on stdin (the test looks at
 * /proc meanwhile; not with argv[2] "nowait": the socket is its stdin),
 * reads the socket (argv[1]) to its end (or argv[3] bytes: "end count"),
 * writes a byte, and says what it saw: "read N end
 * EOF|timeout|count|ERRNO write ok|ERRNO". */
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
	long n = 0, want = argc > 3 ? atol(argv[3]) : -1;
	ssize_t r;

	signal(SIGPIPE, SIG_IGN);
	printf("static %d\n", (int)getpid());
	fflush(stdout);
	if (argc < 3 || strcmp(argv[2], "nowait"))
		(void)getchar();
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (n == want) {
			printf("read %ld end count", n);
			break;
		}
		if (poll(&p, 1, 5000) <= 0) {
			printf("read %ld end timeout", n);
			break;
		}
		r = read(fd, b, want < 0 || want - n > (long)sizeof(b) ? sizeof(b) : (size_t)(want - n));
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
