/* 64-byte ping-pong whose server is an event loop of the common shape
 * (libuv, nginx, redis): epoll_wait (level-triggered), read until EAGAIN,
 * answer, epoll_wait again. The client: blocking send, blocking recv.
 * Standalone (not built by CMake; docs/shm.md, "Spinning", its figures):
 *   cc -O2 -o epoll_drain_pp bench/latency/standalone/epoll_drain_pp.c
 *   build/loopfast run --tier shm -- ./epoll_drain_pp 4000 400
 * usage: epoll_drain_pp N WARMUP  (prints p50 p90 p99 in us, whether the
 * client maps the shm tier's memfd, and whether the server did) */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int maps_memfd(void)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f))
		n += strstr(line, "memfd:loopfast-shm") != NULL;
	if (f)
		fclose(f);
	return n;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 5000, warm = argc > 2 ? atoi(argv[2]) : 500, one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(ls, (void *)&a, sizeof(a)) || listen(ls, 1) || getsockname(ls, (void *)&a, &l))
		return perror("listen"), 1;
	pid_t pid = fork();
	if (pid == 0) { /* server */
		int s = accept(ls, NULL, NULL), ep = epoll_create1(0);
		struct epoll_event ev = { .events = EPOLLIN };
		char buf[4096], out[64] = { 0 };
		size_t have = 0;
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fcntl(s, F_SETFL, O_NONBLOCK);
		epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
		for (;;) {
			if (epoll_wait(ep, &ev, 1, -1) < 0)
				continue;
			for (;;) { /* read until EAGAIN, answering each whole message */
				ssize_t r = recv(s, buf + have, sizeof(buf) - have, 0);
				if (r == 0)
					_exit(maps_memfd() ? 0 : 3);
				if (r < 0) {
					if (errno == EAGAIN)
						break;
					_exit(2);
				}
				have += (size_t)r;
				for (; have >= 64; have -= 64) {
					memmove(buf, buf + 64, have - 64);
					if (send(s, out, 64, 0) != 64)
						_exit(2);
				}
			}
		}
	}
	int c = socket(AF_INET, SOCK_STREAM, 0);
	char m[64] = { 1 };
	double *rtt = malloc(sizeof(double) * n);
	if (connect(c, (void *)&a, sizeof(a)))
		return perror("connect"), 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = -warm; i < n; i++) {
		double t0 = now_us();
		if (send(c, m, 64, 0) != 64 || recv(c, m, 64, MSG_WAITALL) != 64)
			return perror("pingpong"), 1;
		if (i >= 0)
			rtt[i] = now_us() - t0;
	}
	int mapped = maps_memfd();
	close(c);
	int st;
	waitpid(pid, &st, 0);
	qsort(rtt, n, sizeof(double), cmp);
	printf("p50 %.2f p90 %.2f p99 %.2f client_memfd %d server_ok %d\n", rtt[n / 2], rtt[n * 9 / 10], rtt[n * 99 / 100],
	       mapped, WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return 0;
}
