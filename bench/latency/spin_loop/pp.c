/* A plain ping-pong for spin_loop.py: `pp server PORT` echoes one
 * connection; `pp client PORT N SIZE` connects (retrying while the
 * server is not listening yet, as a service's client does), makes N round
 * trips of SIZE bytes and prints the median and the 99th percentile in
 * microseconds, and what its socket is in the kernel ("unix": the fast
 * path; "tcp": plain TCP; found by its inode in /proc/net/unix).
 * Blocking reads and writes only: under `loopfast run --spin-us` the
 * reads are the ones that spin. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int full(int fd, char *b, size_t n, int rd)
{
	for (size_t d = 0; d < n;) {
		ssize_t r = rd ? read(fd, b + d, n - d) : write(fd, b + d, n - d);
		if (r <= 0)
			return -1;
		d += (size_t)r;
	}
	return 0;
}

/* Whether fd's inode is a Unix socket's, in the kernel's own table. */
static const char *kind(int fd)
{
	struct stat st;
	char line[512];
	unsigned long ino;
	FILE *f = fopen("/proc/net/unix", "r");
	const char *k = "tcp";

	if (!f || fstat(fd, &st))
		return "?";
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu", &ino) == 1 && ino == st.st_ino)
			k = "unix";
	fclose(f);
	return k;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;

	if (argc < 3)
		return 2;
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	if (!strcmp(argv[1], "server")) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
			return perror("listen"), 1;
		int s = accept(l, NULL, NULL);
		char b[65536];
		ssize_t r;
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		while ((r = read(s, b, sizeof(b))) > 0)
			if (full(s, b, (size_t)r, 0))
				return 1;
		return 0;
	}
	int n = argc > 3 ? atoi(argv[3]) : 20000, size = argc > 4 ? atoi(argv[4]) : 64, c = -1;
	for (int i = 0; i < 5000; i++) { /* 10 s */
		c = socket(AF_INET, SOCK_STREAM, 0);
		if (!connect(c, (struct sockaddr *)&a, sizeof(a)))
			break;
		close(c);
		c = -1;
		usleep(2000);
	}
	if (c < 0)
		return perror("connect"), 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	char *b = calloc(1, (size_t)size);
	double *rtt = malloc(sizeof(double) * (size_t)n);
	for (int i = 0; i < n; i++) {
		double t0 = now_us();
		if (full(c, b, (size_t)size, 0) || full(c, b, (size_t)size, 1))
			return perror("ping-pong"), 1;
		rtt[i] = now_us() - t0;
	}
	qsort(rtt, (size_t)n, sizeof(double), cmp);
	printf("%.2f %.2f %s\n", rtt[n / 2], rtt[n * 99 / 100], kind(c));
	return 0;
}
