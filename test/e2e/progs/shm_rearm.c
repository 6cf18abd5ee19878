/* Another thread changes an epoll registration of a full tier ring while
 * one waits on it level-triggered (test_shm.py). Both ends of one loopback
 * connection in this process; the accepted end writes until EAGAIN, its
 * reader reads nothing.
 *
 *   shm_rearm spin:  a thread waits (IN|OUT, and a pipe); the main thread
 *     prints the waiter's thread id, reads a line (the test counts the
 *     waiter's system calls meanwhile), re-arms the registration (MOD with
 *     the same events, as an event loop does on each write), reads a
 *     line, wakes the waiter through the pipe and prints what it got.
 *   shm_rearm race ROUNDS: a thread waits over and over (timeout 0) while
 *     the main thread turns EPOLLOUT off and on 20 times, and last off;
 *     the waiter stops; prints the rounds after which the kernel's
 *     registration (/proc/self/fdinfo) was not the last one made.
 *   shm_rearm oneshot: a thread waits (IN|OUT); the main thread changes
 *     the registration to IN|ONESHOT and the peer sends a byte, which the
 *     waiter's wait gets (the one-shot is spent); prints what it got, the
 *     kernel's registration after, and what a second wait gets.
 *   shm_rearm fork N: a thread re-arms the registration (IN|OUT) over and
 *     over while the main thread forks N children, one at a time; each
 *     child waits once (timeout 0); prints the children that got EPOLLOUT.
 *   shm_rearm twosets: the socket is in two sets (IN|OUT, and a pipe each);
 *     a thread waits on each; the main thread wakes the first, then the
 *     second; prints the kernel's registration in each set after.
 *     twosets-late: the second set's ADD comes 200 ms after the first
 *     thread began its wait.
 *   shm_rearm same: a pipe's write end (always writable) registered for
 *     EPOLLOUT with the data of the ring's registration; prints the events
 *     each of 20 waits of 100 ms gets. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int ep, pipefd[2], stop, tid;
static unsigned got;

static void pair(int *c, int *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof sa;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	char b;

	if (bind(s, (void *)&sa, sizeof sa) || listen(s, 8) || getsockname(s, (void *)&sa, &l))
		exit(2);
	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(*c, (void *)&sa, sizeof sa) || (*a = accept(s, NULL, NULL)) < 0)
		exit(2);
	/* the client has the answer: on the tier from here */
	if (write(*c, "0", 1) != 1 || read(*a, &b, 1) != 1 || write(*a, "1", 1) != 1 || read(*c, &b, 1) != 1)
		exit(2);
	close(s);
	static char buf[65536];
	fcntl(*a, F_SETFL, O_NONBLOCK);
	while (write(*a, buf, sizeof buf) > 0)
		;
}

/* The kernel's events mask of fd's registration on ep, or -1. */
static long kmask(int fd)
{
	char p[64], line[256];
	long m = -1;
	snprintf(p, sizeof p, "/proc/self/fdinfo/%d", ep);
	FILE *f = fopen(p, "r");
	while (f && fgets(line, sizeof line, f)) {
		int t;
		unsigned e;
		if (sscanf(line, "tfd: %d events: %x", &t, &e) == 2 && t == fd)
			m = e;
	}
	if (f)
		fclose(f);
	return m;
}

static int sets[2], pipes[2][2];

static void *set_waiter(void *x)
{
	int i = (int)(long)x;
	struct epoll_event ev[8];
	epoll_wait(sets[i], ev, 8, 30000);
	return NULL;
}

static long kmask(int fd);

/* A thread waits on each of two sets that hold fd; woken one after the
 * other; the kernel's masks after, into m. */
static void two_sets(int fd, long m[2], bool late)
{
	struct epoll_event on = { EPOLLIN | EPOLLOUT, { .u32 = 7 } }, pe = { EPOLLIN, { .u32 = 9 } };
	pthread_t t[2];
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); /* two sets: both recorded (shm.c) */
	for (long i = 0; i < 2; i++) {
		sets[i] = epoll_create1(0);
		if (pipe(pipes[i]) || epoll_ctl(sets[i], EPOLL_CTL_ADD, fd, &on) ||
		    epoll_ctl(sets[i], EPOLL_CTL_ADD, pipes[i][0], &pe))
			exit(2);
		pthread_create(&t[i], NULL, set_waiter, (void *)i);
		if (late) /* the second set's ADD after the first wait parked */
			usleep(200000);
	}
	usleep(200000);
	for (int i = 0; i < 2; i++) {
		if (write(pipes[i][1], "!", 1) != 1)
			exit(2);
		pthread_join(t[i], NULL);
	}
	int keep = ep;
	for (int i = 0; i < 2; i++) {
		ep = sets[i];
		m[i] = kmask(fd);
	}
	ep = keep;
}

static void *rearmer(void *x)
{
	struct epoll_event on = { EPOLLIN | EPOLLOUT, { .u32 = 7 } };
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
		epoll_ctl(ep, EPOLL_CTL_MOD, *(int *)x, &on);
	return NULL;
}

static void *waiter(void *x)
{
	struct epoll_event ev[8];
	tid = gettid();
	if (x) { /* spin, oneshot */
		int n = epoll_wait(ep, ev, 8, 30000);
		for (int i = 0; i < n; i++)
			got |= ev[i].data.u32 == 7 ? ev[i].events : 0;
		return NULL;
	}
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
		epoll_wait(ep, ev, 8, 0);
	return NULL;
}

int main(int argc, char **argv)
{
	int c, a, spin = argc > 1 && !strcmp(argv[1], "spin");
	struct epoll_event on = { EPOLLIN | EPOLLOUT, { .u32 = 7 } }, off = { EPOLLIN, { .u32 = 7 } };
	struct epoll_event pe = { EPOLLIN, { .u32 = 9 } };
	pthread_t t;
	char line[16];

	pair(&c, &a);
	int mapped = 0;
	char m[512];
	FILE *maps = fopen("/proc/self/maps", "r");
	while (maps && fgets(m, sizeof m, maps))
		mapped += strstr(m, "memfd:loopfast-shm") != NULL;
	if (maps)
		fclose(maps);
	ep = epoll_create1(0);
	epoll_ctl(ep, EPOLL_CTL_ADD, a, &on);
	if (spin) {
		if (pipe(pipefd))
			return 2;
		epoll_ctl(ep, EPOLL_CTL_ADD, pipefd[0], &pe);
		pthread_create(&t, NULL, waiter, (void *)1);
		while (!__atomic_load_n(&tid, __ATOMIC_ACQUIRE))
			;
		printf("%d\n", tid);
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 2;
		epoll_ctl(ep, EPOLL_CTL_MOD, a, &on);
		if (!fgets(line, sizeof line, stdin) || write(pipefd[1], "!", 1) != 1)
			return 2;
		pthread_join(t, NULL);
		printf("%x %lx %d\n", got, kmask(a), mapped);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "same")) {
		struct epoll_event w = { EPOLLOUT, { .u32 = 7 } }, ev[8];
		if (pipe(pipefd) || epoll_ctl(ep, EPOLL_CTL_ADD, pipefd[1], &w))
			return 2;
		for (int i = 0; i < 20; i++)
			printf("%d ", epoll_wait(ep, ev, 8, 100));
		printf("%d\n", mapped);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "oneshot")) {
		struct epoll_event o = { EPOLLIN | EPOLLONESHOT, { .u32 = 7 } }, ev[8];
		pthread_create(&t, NULL, waiter, (void *)1);
		usleep(200000);
		epoll_ctl(ep, EPOLL_CTL_MOD, a, &o);
		usleep(100000);
		if (write(c, "x", 1) != 1)
			return 2;
		pthread_join(t, NULL);
		long mask = kmask(a);
		printf("%x %lx %d %d\n", got, mask, epoll_wait(ep, ev, 8, 300), mapped);
		return 0;
	}
	if (argc > 1 && (!strcmp(argv[1], "twosets") || !strcmp(argv[1], "twosets-late"))) {
		long masks[2];
		two_sets(a, masks, !strcmp(argv[1], "twosets-late"));
		printf("%lx %lx %d\n", masks[0], masks[1], mapped);
		return 0;
	}
	if (argc > 2 && !strcmp(argv[1], "fork")) {
		int n = atoi(argv[2]), outs = 0;
		pthread_create(&t, NULL, rearmer, &a);
		for (int i = 0; i < n; i++) {
			pid_t p = fork();
			if (p == 0) {
				struct epoll_event ev[8];
				int k = epoll_wait(ep, ev, 8, 0);
				_exit(k > 0 && (ev[0].events & EPOLLOUT));
			}
			int st;
			if (p < 0 || waitpid(p, &st, 0) != p)
				return 2;
			outs += WIFEXITED(st) && WEXITSTATUS(st) == 1;
		}
		__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		printf("%d %d\n", outs, mapped);
		return 0;
	}
	int rounds = argc > 2 ? atoi(argv[2]) : 1000, bad = 0;
	for (int r = 0; r < rounds; r++) {
		stop = 0;
		pthread_create(&t, NULL, waiter, NULL);
		for (int i = 0; i < 20; i++) {
			epoll_ctl(ep, EPOLL_CTL_MOD, a, &off);
			epoll_ctl(ep, EPOLL_CTL_MOD, a, &on);
		}
		epoll_ctl(ep, EPOLL_CTL_MOD, a, &off);
		__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		bad += kmask(a) != (EPOLLIN | EPOLLERR | EPOLLHUP);
		epoll_ctl(ep, EPOLL_CTL_MOD, a, &on);
	}
	printf("%d %d\n", bad, mapped);
	return 0;
}
