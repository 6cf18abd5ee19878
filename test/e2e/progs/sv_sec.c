/* A client for test_supervisor_security.py, built -static in the test (so
 * that `loopfast run` supervises it). Each mode prints one line per
 * outcome and flushes it; every wait is bounded.
 *
 *   secret PORT        connects to 127.0.0.1:PORT, writes "secret", prints
 *                      "reply TEXT" (what came back within 10 s) or
 *                      "reply none ERRNO-TEXT".
 *   stall FULL OK      a second thread connects (blocking) to 127.0.0.1:FULL,
 *                      whose accept queue is full, and prints "full ERR" when
 *                      its connect ends; once it has started (0.5 s) the main
 *                      thread connects to 127.0.0.1:OK and prints
 *                      "ok connected"; then waits for stdin to close.
 *   drop UID PORT      drops to UID (groups, gid, uid) before it makes its
 *                      socket, connects to 127.0.0.1:PORT, sends 5 bytes and
 *                      prints "echo OK uid U" or "echo BAD ..." for what
 *                      comes back, then "waiting"; waits for stdin to close.
 *   recvfd PORT        connects, reads with recvmsg and room for SCM_RIGHTS,
 *                      prints "got BYTES fds N", then "waiting"; waits for
 *                      stdin to close.
 *   reuse PORT         a second thread connects a socket (blocking) to
 *                      127.0.0.1:PORT, whose server accepts late; meanwhile
 *                      (0.5 s) the main thread closes that socket and opens
 *                      /dev/null, which takes its number, as a program that
 *                      aborts a connect from a watchdog thread does. Prints
 *                      "connect ERR" when the connect ends, then what the
 *                      number is now: "fd file" (the /dev/null) or
 *                      "fd socket".
 *   zerocopy PORT      sets SO_ZEROCOPY, connects, sends 4 KiB with
 *                      MSG_ZEROCOPY and prints "completion yes" if its
 *                      completion reaches the error queue within 10 s (as
 *                      TCP's does), else "completion no".
 *   rodata PORT        connects, then asks getsockname, getpeername and
 *                      getsockopt(SO_DOMAIN) to write into read-only memory
 *                      (a const array): prints "names E E E ro intact" with
 *                      each call's errno name (the kernel: EFAULT) and
 *                      whether the array kept its bytes; then "waiting",
 *                      and waits for stdin to close. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sv.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/time.h>

static int dial(int port)
{
	struct sockaddr_storage sa;
	socklen_t sl = sv_loopback(&sa, "4", port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = { 10, 0 };
	if (fd < 0 || connect(fd, (void *)&sa, sl))
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static int reuse_fd;

static void *connect_it(void *arg)
{
	struct sockaddr_storage sa;
	socklen_t sl = sv_loopback(&sa, "4", *(int *)arg);
	int r = connect(reuse_fd, (void *)&sa, sl);
	printf("connect %s\n", r ? strerror(errno) : "0");
	fflush(stdout);
	return NULL;
}

static const char ro[128] __attribute__((aligned(4096))) = "read-only: never written";

static const char *err_name(int r)
{
	return r == 0 ? "ok" : errno == EFAULT ? "EFAULT" : strerror(errno);
}

static void hold(void)
{
	char c;
	printf("waiting\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
}

static void *full(void *arg)
{
	int fd = dial(*(int *)arg);
	printf("full %s\n", fd < 0 ? strerror(-fd) : "connected");
	fflush(stdout);
	return NULL;
}

int main(int argc, char **argv)
{
	char buf[256];
	int fd;

	signal(SIGPIPE, SIG_IGN);
	if (argc == 3 && !strcmp(argv[1], "secret")) {
		if ((fd = dial(atoi(argv[2]))) < 0) {
			printf("connect %s\n", strerror(-fd));
			return 1;
		}
		ssize_t w = write(fd, "secret", 6), n = w == 6 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (n > 0)
			printf("reply %.*s\n", (int)n, buf);
		else
			printf("reply none %s\n", n == 0 ? "EOF" : strerror(errno));
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "stall")) {
		static int fport;
		pthread_t t;
		fport = atoi(argv[2]);
		pthread_create(&t, NULL, full, &fport);
		usleep(500000);
		fd = dial(atoi(argv[3]));
		printf("ok %s\n", fd < 0 ? strerror(-fd) : "connected");
		fflush(stdout);
		hold();
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "drop")) {
		uid_t uid = (uid_t)atoi(argv[2]);
		if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) {
			printf("drop %s\n", strerror(errno));
			return 1;
		}
		if ((fd = dial(atoi(argv[3]))) < 0) {
			printf("connect %s\n", strerror(-fd));
			return 1;
		}
		ssize_t n = write(fd, "hello", 5) == 5 ? recv(fd, buf, 5, MSG_WAITALL) : -1;
		if (n == 5 && !memcmp(buf, "hello", 5))
			printf("echo OK uid %u\n", (unsigned)getuid());
		else
			printf("echo BAD %zd %s\n", n, n < 0 ? strerror(errno) : "");
		fflush(stdout);
		hold();
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "recvfd")) {
		if ((fd = dial(atoi(argv[2]))) < 0) {
			printf("connect %s\n", strerror(-fd));
			return 1;
		}
		char cbuf[CMSG_SPACE(8 * sizeof(int))];
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		ssize_t n = recvmsg(fd, &m, 0);
		int fds = 0;
		for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				fds += (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		printf("got %zd fds %d\n", n, fds);
		fflush(stdout);
		hold();
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "reuse")) {
		static int port;
		pthread_t t;
		struct stat st;
		port = atoi(argv[2]);
		reuse_fd = socket(AF_INET, SOCK_STREAM, 0);
		pthread_create(&t, NULL, connect_it, &port);
		usleep(500000);
		close(reuse_fd);
		if (open("/dev/null", O_RDONLY) != reuse_fd)
			printf("reopen: another number\n");
		pthread_join(t, NULL);
		printf("fd %s\n", fstat(reuse_fd, &st) ? strerror(errno) : S_ISSOCK(st.st_mode) ? "socket" : "file");
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "zerocopy")) {
		struct sockaddr_storage sa;
		socklen_t sl = sv_loopback(&sa, "4", atoi(argv[2]));
		int one = 1;
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (setsockopt(fd, SOL_SOCKET, 60 /* SO_ZEROCOPY */, &one, sizeof(one)) ||
		    connect(fd, (void *)&sa, sl)) {
			printf("setup %s\n", strerror(errno));
			return 1;
		}
		memset(buf, 'z', sizeof(buf));
		if (send(fd, buf, sizeof(buf), 0x4000000 /* MSG_ZEROCOPY */) < 0)
			printf("send %s\n", strerror(errno));
		struct pollfd p = { fd, 0, 0 };
		printf("completion %s\n", poll(&p, 1, 10000) == 1 && (p.revents & POLLERR) ? "yes" : "no");
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "rodata")) {
		if ((fd = dial(atoi(argv[2]))) < 0) {
			printf("connect %s\n", strerror(-fd));
			return 1;
		}
		socklen_t l1 = 64, l2 = 64, l3 = sizeof(int);
		const char *a = err_name(getsockname(fd, (struct sockaddr *)(uintptr_t)ro, &l1));
		const char *b = err_name(getpeername(fd, (struct sockaddr *)(uintptr_t)ro, &l2));
		const char *c = err_name(getsockopt(fd, SOL_SOCKET, SO_DOMAIN, (void *)(uintptr_t)ro, &l3));
		const volatile char *v = ro; /* read the memory, not what the compiler knows of it */
		const char *want = "read-only: never written";
		bool same = true;
		for (size_t i = 0; i <= strlen(want); i++)
			same = same && v[i] == want[i];
		printf("names %s %s %s ro %s\n", a, b, c, same ? "intact" : "changed");
		fflush(stdout);
		hold();
		return 0;
	}
	fprintf(stderr, "usage: see the comment at the top of sv_sec.c\n");
	return 2;
}
