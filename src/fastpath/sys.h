/* The raw-call layer: every system call loopfast makes itself (on
 * sockets, waits, exec) goes through one of these, past any interposer
 * (its own included), so that internal code never reaches a libc name that
 * loopfast interposes; and the clock. Each returns what the system call
 * does (-1 and errno on failure).
 * Compiled alone (sys.c) into the library, the CLI and the unit tests. */
#ifndef LF_SYS_H
#define LF_SYS_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <stdint.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>

int lf__sys_close(int fd);
ssize_t lf__sys_read(int fd, void *buf, size_t len);
ssize_t lf__sys_write(int fd, const void *buf, size_t len);
int lf__sys_socket(int domain, int type, int proto);
int lf__sys_socketpair(int domain, int type, int proto, int sv[2]);
int lf__sys_listen(int fd, int backlog);
int lf__sys_connect(int fd, const struct sockaddr *sa, socklen_t len);
int lf__sys_bind(int fd, const struct sockaddr *sa, socklen_t len);
int lf__sys_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
int lf__sys_shutdown(int fd, int how);
int lf__sys_dup3(int oldfd, int newfd, int flags);
int lf__sys_fcntl(int fd, int cmd, long arg);
int lf__sys_ioctl(int fd, unsigned long req, void *arg);
int lf__sys_getsockname(int fd, struct sockaddr *sa, socklen_t *len);
int lf__sys_getpeername(int fd, struct sockaddr *sa, socklen_t *len);
int lf__sys_getsockopt(int fd, int level, int opt, void *val, socklen_t *len);
int lf__sys_setsockopt(int fd, int level, int opt, const void *val, socklen_t len);
int lf__sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
/* ppoll with the kernel's sigset size (mask may be NULL: none). */
int lf__sys_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask);
/* epoll_pwait2 likewise (ts NULL: no timeout); ENOSYS before Linux 5.11. */
int lf__sys_epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask);
/* Linux 6.16's switch that makes a Unix socket refuse descriptors
 * (SCM_RIGHTS; the sender gets EPERM). Set off on every Unix socket of the
 * fast path, as TCP carries none; older kernels refuse the option, and
 * recvmsg (io.c) closes what arrives instead. */
#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif
#ifndef SO_NETNS_COOKIE /* Linux 5.14: which network namespace a socket is in */
#define SO_NETNS_COOKIE 71
#endif
int lf__sys_no_rights(int unx);
int lf__sys_close_range(unsigned first, unsigned last, int flags);
/* Whether this is a vfork child (or another process that shares this
 * one's memory, as clone(CLONE_VM) makes): its calls run on its parent's
 * memory, loopfast's tables and rings included, and must not change them
 * (a close there would drop the parent's connections). A getpid system
 * call, and a kcmp(KCMP_VM) the first time a process sees a new pid. */
bool lf__sys_vfork_child(void);
void lf__sys_forked(void); /* a fork's child (its handler): the tables are this process's */
int lf__sys_poll1(int fd, short events, int timeout_ms); /* revents, 0 on timeout, -1 on error */
/* Whether fd is a TCP socket of AF_INET or AF_INET6 (SO_PROTOCOL, then
 * SO_DOMAIN); its family in *family. */
bool lf__sys_tcp_family(int fd, int *family);
ssize_t lf__sys_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *sa, socklen_t sl);
ssize_t lf__sys_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *sl);
ssize_t lf__sys_sendmsg(int fd, const struct msghdr *m, int flags);
ssize_t lf__sys_recvmsg(int fd, struct msghdr *m, int flags);
int lf__sys_pidfd_open(pid_t pid, unsigned flags);
int lf__sys_pidfd_getfd(int pidfd, int fd, unsigned flags);
int lf__sys_execve(const char *path, char *const argv[], char *const envp[]);
int lf__sys_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);
long lf__sys_getdents64(int fd, void *buf, size_t len);
/* futex(2) on a word (FUTEX_WAIT with a relative timeout, FUTEX_WAKE). */
long lf__sys_futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts);
/* membarrier(2) with no flags. */
int lf__sys_membarrier(int cmd);

/* The kernel's MAX_RW_COUNT: a read or write moves at most this in a
 * call, clamping a larger length. */
#define LF_MAX_RW ((size_t)0x7ffff000)

/* CLOCK_MONOTONIC in nanoseconds (the vDSO's clock_gettime). */
static inline uint64_t lf__sys_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* When a socket timeout tv (as getsockopt reads it: not negative) that
 * starts now ends; saturated, as one of centuries is. */
static inline uint64_t lf__sys_deadline(const struct timeval *tv)
{
	uint64_t now = lf__sys_now_ns(), d = (uint64_t)tv->tv_usec * 1000u;

	if ((uint64_t)tv->tv_sec >= (UINT64_MAX - now - d) / 1000000000u)
		return UINT64_MAX;
	return now + (uint64_t)tv->tv_sec * 1000000000u + d;
}

/* The kernel's state of a socket's file, which a dup or another process
 * may have changed since the descriptor's flags were set (sys.c): its
 * O_NONBLOCK; when a wait under its timeout opt (SO_RCVTIMEO,
 * SO_SNDTIMEO) that starts now ends, 0 for none. */
bool lf__sys_file_nonblocking(int fd);
uint64_t lf__sys_timeout_end(int fd, int opt);

/* poll's milliseconds until end (a lf__sys_now_ns time), rounded up: 0
 * once it has passed, at most INT_MAX (about 25 days: a wait that ends
 * before end looks at the clock again). */
static inline int lf__sys_ms_until(uint64_t end)
{
	uint64_t now = lf__sys_now_ns();

	if (now >= end)
		return 0;
	return end - now >= (uint64_t)INT32_MAX * 1000000u ? INT32_MAX : (int)((end - now + 999999) / 1000000);
}

#endif
