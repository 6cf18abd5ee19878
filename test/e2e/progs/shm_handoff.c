/* The shm tier's hand-off (docs/shm.md, "Spinning"), both ends of one
 * loopback connection in this one process and thread, so that a write
 * follows a read by well under the microsecond in which a writer takes its
 * reader for a polling one. Run plain (TCP: the control) or under
 * `loopfast run --tier shm`. Each of ROUNDS rounds writes one byte to the
 * accepted end, which sleeps in level-triggered epoll_wait (5 s at most),
 * and prints nothing unless the round differs from TCP's; at the end one
 * line: "maps=N" (the mappings of the tier's memfd: 2 on the tier) and
 * "ok" or the first odd round as EVENTS/QUEUED/READ/QUEUED (QUEUED: the
 * kernel's FIONREAD of the socket, past loopfast; 1/1/1/0 as on TCP).
 * MODE:
 *   at-once   the reader's read says EAGAIN (its poll of the empty ring),
 *             then at once the write: the writer waits a moment for a
 *             reader that cannot come, and must still ring
 *   scribble  the word where the reader says when it polled (its
 *             `awake`, written by the peer) is set, as a peer may, to the
 *             time now before each write (and to 0xffffffff or 1 in every
 *             tenth round): the writer's wait is bounded by its own clock,
 *             and it rings
 *   partial   the writer is a forked child, and the reader polls for the
 *             first 10 of its 100 bytes (non-blocking reads of 10 bytes):
 *             a read that takes only part of the ring is no hand-off, and
 *             once the write returned the token must be on the socket
 *   peek      the same, the reader polling with MSG_PEEK for all 100: a
 *             peek takes nothing, so the token must be there too
 *   In these two the line is "maps=N ok" or the first odd round as
 *   QUEUED/EVENTS/REST/QUEUED (QUEUED: the kernel's FIONREAD once the
 *   write returned, at least 1, then 0 once all 100 bytes are read;
 *   EVENTS: a level-triggered epoll_wait that does not wait, 1; REST:
 *   the bytes read after, 90 or 100). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* src/protocol/ring.h: the page's header, then a 320-byte struct
 * lf_ring_hdr per direction ([0] client to server); awake at 128. */
#define AWAKE_C2S (64 + 128)

static int kernel_queue(int fd)
{
	int n = -1;
	syscall(SYS_ioctl, fd, FIONREAD, &n);
	return n;
}

static char *memfd_page(int *maps)
{
	char line[512];
	unsigned long lo;
	char *page = NULL;
	FILE *f = fopen("/proc/self/maps", "r");

	*maps = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "memfd:loopfast-shm") && sscanf(line, "%lx-", &lo) == 1) {
			++*maps;
			page = (char *)lo;
		}
	if (f)
		fclose(f);
	return page;
}

/* The partial and peek modes: the reader (this process, the accepted end
 * a) polls while a forked child writes 100 bytes to c. The two wait for
 * each other by spinning on words of a shared page, each pinned to a CPU
 * of its own where there are two, so that both run while the write's
 * hand-off waits (a pipe's wake-up, or one CPU for both, would leave the
 * writer waiting for a reader that is not running, and it rings). */
static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set); /* best effort */
}

static int polled(int a, int c, int ep, int rounds, bool peek, int maps)
{
	_Atomic int *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char buf[100];

	if (w == MAP_FAILED)
		return perror("mmap"), 1;
	w[0] = w[1] = 0; /* w[0]: rounds the reader started; w[1]: writes that returned */
	int cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	pid_t pid = fork();
	if (pid == 0) {
		if (cpus > 1)
			pin(1);
		memset(buf, 'y', sizeof(buf));
		for (int i = 1; i <= rounds; i++) {
			while (atomic_load(&w[0]) < i)
				if (getppid() == 1)
					_exit(1);
			if (send(c, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf))
				_exit(1);
			atomic_store(&w[1], i);
		}
		_exit(0);
	}
	if (cpus > 1)
		pin(0);
	for (int i = 1; i <= rounds; i++) {
		ssize_t got = -1;
		atomic_store(&w[0], i);
		while (got < (peek ? 100 : 10)) /* polls: the writer takes it for a polling reader */
			got = recv(a, buf, peek ? 100 : 10, MSG_DONTWAIT | (peek ? MSG_PEEK : 0));
		while (atomic_load(&w[1]) < i) /* the write returned */
			if (waitpid(pid, NULL, WNOHANG) == pid)
				return fprintf(stderr, "round %d: the writer died\n", i), 1;
		int q0 = kernel_queue(a), events = epoll_wait(ep, &(struct epoll_event){ 0 }, 1, 0), rest = 0;
		while (rest < (peek ? 100 : 90)) {
			ssize_t n = recv(a, buf, sizeof(buf), MSG_DONTWAIT);
			if (n > 0)
				rest += (int)n;
			else if (n == 0 || errno != EAGAIN)
				break;
		}
		int q1 = kernel_queue(a);
		if (q0 < 1 || events != 1 || rest != (peek ? 100 : 90) || q1 != 0) {
			printf("maps=%d %d/%d/%d/%d\n", maps, q0, events, rest, q1);
			kill(pid, SIGKILL);
			return 0;
		}
	}
	waitpid(pid, NULL, 0);
	printf("maps=%d ok\n", maps);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int rounds = argc > 2 ? atoi(argv[2]) : 100, scribble = argc > 1 && !strcmp(argv[1], "scribble");
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), a, ep, maps;
	struct epoll_event ev = { .events = EPOLLIN };
	char b;

	if (bind(l, (void *)&sa, sizeof(sa)) || listen(l, 1) || getsockname(l, (void *)&sa, &sl) ||
	    connect(c, (void *)&sa, sizeof(sa)) || (a = accept(l, NULL, NULL)) < 0)
		return perror("connect"), 1;
	/* a round trip: the client has the server's answer, both ends are on the tier */
	if (send(c, "0", 1, 0) != 1 || recv(a, &b, 1, 0) != 1 || send(a, "1", 1, 0) != 1 || recv(c, &b, 1, 0) != 1)
		return perror("round trip"), 1;
	char *page = memfd_page(&maps);
	volatile uint32_t *awake = page ? (volatile uint32_t *)(page + AWAKE_C2S) : NULL;
	if ((ep = epoll_create1(0)) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev))
		return perror("epoll"), 1;
	if (argc > 1 && (!strcmp(argv[1], "partial") || !strcmp(argv[1], "peek")))
		return polled(a, c, ep, rounds, !strcmp(argv[1], "peek"), maps);
	for (int i = 0; i < rounds; i++) {
		if (recv(a, &b, 1, MSG_DONTWAIT) != -1) /* the reader's poll: EAGAIN */
			return fprintf(stderr, "round %d: a byte before the write\n", i), 1;
		if (scribble && awake) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			uint32_t now = (uint32_t)(((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) >> 8);
			*awake = i % 10 ? (now ? now : 1) : i % 20 ? 0xffffffffu : 1;
		}
		if (send(c, "x", 1, 0) != 1)
			return perror("send"), 1;
		int events = epoll_wait(ep, &ev, 1, 5000);
		int q0 = kernel_queue(a);
		int got = (int)recv(a, &b, 1, MSG_DONTWAIT);
		int q1 = kernel_queue(a);
		if (events != 1 || q0 != 1 || got != 1 || b != 'x' || q1 != 0) {
			printf("maps=%d %d/%d/%d/%d\n", maps, events, q0, got, q1);
			return 0;
		}
	}
	printf("maps=%d ok\n", maps);
	return 0;
}
