/* epoll_wait's spin on the shm tier (docs/shm.md, "Spinning": an epoll
 * wait looks at the rings). Run plain (TCP: the control) or under
 * `loopfast run --tier shm --spin-us 50`.
 *
 * MODE pingpong ROUNDS: two processes, each waiting in level-triggered
 *   epoll_wait (no timeout) as an event loop does, trade ROUNDS numbered
 *   64-byte messages, the sender working 20 us before each; each checks
 *   every byte. Each counts its own sendto
 *   system calls with the kernel (perf on the syscalls:sys_enter_sendto
 *   tracepoint): TCP makes one per message (the send), the tier one per
 *   token, and none where the writer handed its bytes to a reader that
 *   polls. Prints "maps=N ok sendto=C+S" (N: the tier memfd's mappings in
 *   the sender; C, S: the sender's and the echoer's counts), or the first
 *   odd round.
 * MODE pingpong-poll ROUNDS: the same, each waiting in poll (POLLIN, no
 *   timeout), as a poll loop does; pingpong-select: in select.
 * MODE close ROUNDS: one process; a thread waits in epoll_wait (5 ms at
 *   most, over and over) on a set holding an accepted socket, while the
 *   main thread, in each round, connects, adds the accepted end to the
 *   set, writes to it from the client end, sleeps 1-3 ms and closes both: the wait may
 *   be looking at the ring of a socket another thread closes (run under
 *   valgrind: no invalid access). Odd rounds write to it first (the wait
 *   reports it), even rounds leave its ring empty (the wait spins on it).
 *   Prints "maps=N ok", or " (no event)" after it if the wait saw none.
 * MODE close-poll ROUNDS: the same, the thread waiting in poll on the
 *   round's accepted socket (POLLIN, 5 ms at most). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64

static void die(const char *what)
{
	printf("fail %s: %s\n", what, strerror(errno));
	fflush(stdout);
	_exit(1);
}

static int maps(void)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "memfd:loopfast-shm") != NULL;
	if (f)
		fclose(f);
	return n;
}

/* The kernel's count of this thread's sendto calls from now on. */
static int sendto_counter(void)
{
	char buf[32] = "";
	FILE *f = fopen("/sys/kernel/tracing/events/syscalls/sys_enter_sendto/id", "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		die("the sendto tracepoint's id");
	fclose(f);
	struct perf_event_attr a = { .type = PERF_TYPE_TRACEPOINT, .size = sizeof(a), .config = strtoull(buf, NULL, 10) };
	int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		die("perf_event_open");
	return fd;
}

static uint64_t count(int fd)
{
	uint64_t v = 0;
	if (read(fd, &v, sizeof(v)) != sizeof(v))
		die("read the count");
	return v;
}

static int listener(struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	*sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (l < 0 || bind(l, (struct sockaddr *)sa, sizeof(*sa)) || listen(l, 16) ||
	    getsockname(l, (struct sockaddr *)sa, &len))
		die("listen");
	return l;
}

static int dial(const struct sockaddr_in *sa)
{
	int one = 1, c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (const struct sockaddr *)sa, sizeof(*sa)))
		die("connect");
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return c;
}

/* Waits for EPOLLIN on fd (level-triggered, no timeout; ep -1: poll's
 * POLLIN; -2: select's readable), then reads one whole message, which
 * must be number i. */
static void take(int ep, int fd, uint32_t i)
{
	struct epoll_event ev;
	unsigned char m[MSG];
	size_t got = 0;

	while (got < MSG) {
		struct pollfd p = { fd, POLLIN, 0 };
		fd_set rd;
		FD_ZERO(&rd);
		FD_SET(fd, &rd);
		int n = ep == -2 ? select(fd + 1, &rd, NULL, NULL, NULL) : ep < 0 ? poll(&p, 1, -1) : epoll_wait(ep, &ev, 1, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (ep == -2 ? n != 1 || !FD_ISSET(fd, &rd)
		    : ep < 0 ? n != 1 || !(p.revents & POLLIN)
			     : n != 1 || ev.data.fd != fd || !(ev.events & EPOLLIN))
			die(ep == -2 ? "select" : ep < 0 ? "poll" : "epoll_wait");
		ssize_t r = recv(fd, m + got, MSG - got, MSG_DONTWAIT);
		if (r < 0 && errno == EAGAIN)
			continue; /* level-triggered may say so once after a read elsewhere; never twice in a row here */
		if (r <= 0)
			die("recv");
		got += (size_t)r;
	}
	for (size_t k = 0; k < MSG; k++)
		if (m[k] != (unsigned char)(i + k)) {
			printf("round %u: byte %zu is %u, not %u\n", i, k, m[k], (unsigned char)(i + k));
			fflush(stdout);
			_exit(1);
		}
}

static void give(int fd, uint32_t i)
{
	unsigned char m[MSG];
	for (size_t k = 0; k < MSG; k++)
		m[k] = (unsigned char)(i + k);
	if (send(fd, m, MSG, MSG_NOSIGNAL) != MSG)
		die("send");
}

/* 20 us of work on the CPU before each message: the echoer's wait then
 * spins longer than a writer counts a reader's last word as polling
 * (2 us) after its own write said so. */
static void think(void)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + t.tv_nsec - t0.tv_nsec < 20000);
}

static int pingpong(unsigned rounds, int wait) /* 0: epoll, -1: poll, -2: select */
{
	struct sockaddr_in sa;
	int l = listener(&sa), tube[2];

	if (pipe(tube))
		die("pipe");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) { /* the echoer */
		int a = accept(l, NULL, NULL), ep = wait ? wait : epoll_create1(0), cnt = sendto_counter();
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = a };
		if (a < 0 || (!wait && (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev))))
			die("echoer");
		uint64_t c0 = count(cnt);
		for (uint32_t i = 0; i < rounds; i++) {
			take(ep, a, i);
			give(a, i + 1);
		}
		uint64_t n = count(cnt) - c0;
		if (write(tube[1], &n, sizeof(n)) != sizeof(n))
			die("write");
		_exit(0);
	}
	int c = dial(&sa), ep = wait ? wait : epoll_create1(0), cnt = sendto_counter();
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = c };
	if (!wait && (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev)))
		die("sender");
	uint64_t c0 = count(cnt);
	for (uint32_t i = 0; i < rounds; i++) {
		think();
		give(c, i);
		take(ep, c, i + 1);
	}
	uint64_t mine = count(cnt) - c0, theirs = 0;
	int st;
	if (read(tube[0], &theirs, sizeof(theirs)) != sizeof(theirs) || waitpid(pid, &st, 0) != pid || st)
		die("the echoer");
	printf("maps=%d ok sendto=%llu+%llu\n", maps(), (unsigned long long)mine, (unsigned long long)theirs);
	return 0;
}

static int ep_shared; /* -1: the waiter polls the descriptor in polled */
static atomic_int polled = -1;
static atomic_bool stop;
static atomic_ulong events;

static void *waiter(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct epoll_event ev[4];
		struct pollfd p = { atomic_load(&polled), POLLIN, 0 };
		int n = ep_shared < 0 ? poll(&p, 1, 5) : epoll_wait(ep_shared, ev, 4, 5);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		atomic_fetch_add(&events, n > 0 ? (unsigned long)n : 0);
	}
	return NULL;
}

static int closing(unsigned rounds, bool use_poll)
{
	struct sockaddr_in sa;
	int l = listener(&sa), mapped = 0;
	pthread_t t;

	ep_shared = use_poll ? -1 : epoll_create1(0);
	if ((!use_poll && ep_shared < 0) || pthread_create(&t, NULL, waiter, NULL))
		die("the waiter");
	for (unsigned i = 0; i < rounds; i++) {
		int c = dial(&sa), a = accept(l, NULL, NULL);
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = a };
		if (a < 0 || (!use_poll && epoll_ctl(ep_shared, EPOLL_CTL_ADD, a, &ev)))
			die("add");
		atomic_store(&polled, a);
		if (i % 2) /* bytes in the ring; else an empty ring, which the wait spins on */
			give(c, i);
		if (i == 1)
			mapped = maps();
		usleep(1000 + 100 * (i % 20)); /* the wait comes round, sees it, and spins */
		close(a);
		close(c);
	}
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	printf("maps=%d ok%s\n", mapped, atomic_load(&events) ? "" : " (no event)");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return fprintf(stderr, "usage: shm_epoll_spin pingpong|pingpong-poll|pingpong-select|close|close-poll ROUNDS\n"), 2;
	unsigned rounds = (unsigned)strtoul(argv[2], NULL, 10);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "pingpong"))
		return pingpong(rounds, 0);
	if (!strcmp(argv[1], "pingpong-poll"))
		return pingpong(rounds, -1);
	if (!strcmp(argv[1], "pingpong-select"))
		return pingpong(rounds, -2);
	if (!strcmp(argv[1], "close") || !strcmp(argv[1], "close-poll"))
		return closing(rounds, !strcmp(argv[1], "close-poll"));
	return fprintf(stderr, "unknown mode %s\n", argv[1]), 2;
}
