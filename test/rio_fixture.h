/* The fixture the registered-I/O tests share (test-rio.c, test-rio-rq.c):
 * a domain with one registered 1 MiB region, UDP sockets on 127.0.0.1 and
 * a dequeue loop with a deadline. The helpers are static inline, like
 * runner.h's macros, so that a test file that uses only some of them gets
 * no unused-function warning and CMakeLists.txt needs no extra source. */
#ifndef LF_TEST_RIO_FIXTURE_H
#define LF_TEST_RIO_FIXTURE_H

#include "runner.h"

#include "loopfast/rio.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define REGION (1 << 20)

struct fixture {
	struct lf_rio *rio;
	char *mem;
	int id;
};

/* Why io_uring_setup says EPERM: the sysctl, or a seccomp filter. */
static inline const char *rio_disabled_by(void)
{
	static char why[128];
	char line[128];
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	int v = 0;

	if (f && fscanf(f, "%d", &v) == 1 && v) {
		fclose(f);
		snprintf(why, sizeof(why), "kernel.io_uring_disabled=%d", v);
		return why;
	}
	if (f)
		fclose(f);
	f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Seccomp: %d", &v) == 1 && v) {
			fclose(f);
			return "a seccomp filter";
		}
	if (f)
		fclose(f);
	ASSERT(!"io_uring_setup says EPERM, but neither the sysctl nor seccomp disables it");
	return NULL;
}

static inline void setup(struct fixture *f)
{
	int ret = lf_rio_open(&f->rio);
	if (ret == -ENOSYS)
		LF_SKIP("io_uring absent (ENOSYS)");
	if (ret == -EPERM)
		LF_SKIP("io_uring disabled (EPERM): %s", rio_disabled_by());
	ASSERT_EQ(ret, 0);
	f->mem = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT(f->mem != MAP_FAILED);
	f->id = lf_rio_register_buffer(f->rio, f->mem, REGION);
	ASSERT_GE(f->id, 0);
}

static inline void teardown(struct fixture *f)
{
	ASSERT_EQ(lf_rio_deregister_buffer(f->rio, f->id), 0);
	ASSERT_EQ(lf_rio_close(f->rio), 0);
	munmap(f->mem, REGION);
}

/* A UDP socket bound to 127.0.0.1 on an ephemeral port. */
static inline int udp_bound(struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);
	int fd = socket(AF_INET, SOCK_DGRAM, 0), big = 4 << 20;

	ASSERT_GE(fd, 0);
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ASSERT_EQ(bind(fd, (struct sockaddr *)sa, sizeof(*sa)), 0);
	ASSERT_EQ(getsockname(fd, (struct sockaddr *)sa, &len), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	return fd;
}

static inline void send_n(int fd, const struct sockaddr_in *to, unsigned n, unsigned size)
{
	char buf[2048];

	for (unsigned i = 0; i < n; i++) {
		memset(buf, 'a' + i % 26, size);
		memcpy(buf, &i, sizeof(i));
		ASSERT_EQ(sendto(fd, buf, size, 0, (const struct sockaddr *)to, sizeof(*to)), size);
	}
}

/* Dequeues until `want` results arrived (or 5 s passed). */
static inline unsigned drain(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned want)
{
	unsigned got = 0;

	for (int spins = 0; got < want && spins < 5000; spins++) {
		int n = lf_rio_dequeue_wait(cq, res + got, want - got, 1);
		ASSERT_GE(n, 0);
		got += n;
	}
	return got;
}

/* How many descriptors this process has open: a refused or closed queue
 * must leave none behind. */
static inline int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ASSERT(d != NULL);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* What the kernel says of this process's io_uring completion rings, summed
 * over all of them (/proc/self/fdinfo): CQEs posted to the rings (CqTail)
 * and CQEs waiting in the kernel's overflow list because a ring was full.
 * The tests use it to prove that they did fill a ring, not to decide
 * whether lf_rio delivered what it should. */
struct uring_view {
	unsigned long tail, overflow;
};

static inline struct uring_view uring_view(void)
{
	struct uring_view v = { 0, 0 };
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	ASSERT(d != NULL);
	while ((e = readdir(d))) {
		char path[300], link[64], line[256];
		ssize_t n;
		bool in_list = false;
		unsigned long x;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (strcmp(link, "anon_inode:[io_uring]"))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", e->d_name);
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f)) {
			if (sscanf(line, "CqTail: %lu", &x) == 1)
				v.tail += x;
			else if (!strncmp(line, "CqOverflowList:", 15))
				in_list = true;
			else if (in_list && strstr(line, "user_data="))
				v.overflow++;
			else
				in_list = false;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return v;
}

#endif
