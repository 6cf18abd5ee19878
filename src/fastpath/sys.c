/* The raw-call layer (sys.h): system calls made with syscall(2), so that
 * neither loopfast's interposer nor another library's sees them. The
 * lowest layer: it calls nothing of loopfast's. */
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <netinet/in.h>
#include <sys/syscall.h>
#include <unistd.h>

int lf__sys_close(int fd) { return (int)syscall(SYS_close, fd); }
ssize_t lf__sys_read(int fd, void *buf, size_t len) { return syscall(SYS_read, fd, buf, len); }
ssize_t lf__sys_write(int fd, const void *buf, size_t len) { return syscall(SYS_write, fd, buf, len); }
int lf__sys_socket(int domain, int type, int proto) { return (int)syscall(SYS_socket, domain, type, proto); }
int lf__sys_socketpair(int domain, int type, int proto, int sv[2]) { return (int)syscall(SYS_socketpair, domain, type, proto, sv); }
int lf__sys_listen(int fd, int backlog) { return (int)syscall(SYS_listen, fd, backlog); }
int lf__sys_connect(int fd, const struct sockaddr *sa, socklen_t len) { return (int)syscall(SYS_connect, fd, sa, len); }
int lf__sys_bind(int fd, const struct sockaddr *sa, socklen_t len) { return (int)syscall(SYS_bind, fd, sa, len); }
int lf__sys_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags) { return (int)syscall(SYS_accept4, fd, sa, len, flags); }
int lf__sys_shutdown(int fd, int how) { return (int)syscall(SYS_shutdown, fd, how); }
int lf__sys_dup3(int oldfd, int newfd, int flags) { return (int)syscall(SYS_dup3, oldfd, newfd, flags); }
int lf__sys_fcntl(int fd, int cmd, long arg) { return (int)syscall(SYS_fcntl, fd, cmd, arg); }

bool lf__sys_file_nonblocking(int fd)
{
	int fl = lf__sys_fcntl(fd, F_GETFL, 0);
	return fl >= 0 && (fl & O_NONBLOCK);
}

uint64_t lf__sys_timeout_end(int fd, int opt)
{
	struct timeval tv = { 0, 0 };
	socklen_t l = sizeof(tv);

	if (lf__sys_getsockopt(fd, SOL_SOCKET, opt, &tv, &l) || !(tv.tv_sec || tv.tv_usec))
		return 0;
	return lf__sys_deadline(&tv);
}
int lf__sys_ioctl(int fd, unsigned long req, void *arg) { return (int)syscall(SYS_ioctl, fd, req, arg); }
int lf__sys_getsockname(int fd, struct sockaddr *sa, socklen_t *len) { return (int)syscall(SYS_getsockname, fd, sa, len); }
int lf__sys_getpeername(int fd, struct sockaddr *sa, socklen_t *len) { return (int)syscall(SYS_getpeername, fd, sa, len); }
int lf__sys_getsockopt(int fd, int level, int opt, void *val, socklen_t *len) { return (int)syscall(SYS_getsockopt, fd, level, opt, val, len); }
int lf__sys_setsockopt(int fd, int level, int opt, const void *val, socklen_t len) { return (int)syscall(SYS_setsockopt, fd, level, opt, val, len); }
int lf__sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) { return (int)syscall(SYS_epoll_ctl, epfd, op, fd, ev); }
int lf__sys_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask) { return (int)syscall(SYS_ppoll, fds, n, ts, mask, 8); }
int lf__sys_epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask) { return (int)syscall(SYS_epoll_pwait2, epfd, ev, max, ts, mask, _NSIG / 8); }

int lf__sys_no_rights(int unx)
{
	int off = 0;

	return lf__sys_setsockopt(unx, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off));
}

bool lf__sys_tcp_family(int fd, int *family)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) || v != IPPROTO_TCP)
		return false;
	l = sizeof(v);
	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) || (v != AF_INET && v != AF_INET6))
		return false;
	*family = v;
	return true;
}

int lf__sys_close_range(unsigned first, unsigned last, int flags)
{
	return (int)syscall(SYS_close_range, first, last, flags);
}

int lf__sys_poll1(int fd, short events, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	struct timespec ts = { timeout_ms / 1000, (timeout_ms % 1000) * 1000000L };
	int r = lf__sys_ppoll(&p, 1, timeout_ms < 0 ? NULL : &ts, NULL);

	return r > 0 ? p.revents : r;
}

ssize_t lf__sys_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *sa, socklen_t sl) { return syscall(SYS_sendto, fd, buf, len, flags, sa, sl); }
ssize_t lf__sys_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *sl) { return syscall(SYS_recvfrom, fd, buf, len, flags, sa, sl); }
ssize_t lf__sys_sendmsg(int fd, const struct msghdr *m, int flags) { return syscall(SYS_sendmsg, fd, m, flags); }
ssize_t lf__sys_recvmsg(int fd, struct msghdr *m, int flags) { return syscall(SYS_recvmsg, fd, m, flags); }
int lf__sys_pidfd_open(pid_t pid, unsigned flags) { return (int)syscall(SYS_pidfd_open, pid, flags); }
int lf__sys_pidfd_getfd(int pidfd, int fd, unsigned flags) { return (int)syscall(SYS_pidfd_getfd, pidfd, fd, flags); }
int lf__sys_execve(const char *path, char *const argv[], char *const envp[]) { return (int)syscall(SYS_execve, path, argv, envp); }
int lf__sys_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) { return (int)syscall(SYS_execveat, dirfd, path, argv, envp, flags); }
long lf__sys_getdents64(int fd, void *buf, size_t len) { return syscall(SYS_getdents64, fd, buf, len); }
long lf__sys_futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts) { return syscall(SYS_futex, word, op, val, ts, NULL, 0); }
int lf__sys_membarrier(int cmd) { return (int)syscall(SYS_membarrier, cmd, 0, 0); }

static pid_t self; /* the process these tables belong to (0: not known yet) */

void lf__sys_forked(void)
{
	__atomic_store_n(&self, (pid_t)syscall(SYS_getpid), __ATOMIC_RELAXED);
}

bool lf__sys_vfork_child(void)
{
	static pid_t child; /* the vfork child kcmp named last (its parent's memory too) */
	pid_t p = (pid_t)syscall(SYS_getpid), s = __atomic_load_n(&self, __ATOMIC_RELAXED);

	if (p == s)
		return false;
	if (p == __atomic_load_n(&child, __ATOMIC_RELAXED))
		return true;
	/* A new pid that no fork's handler told (every fork's child says its
	 * own: fork.c registers them at load): a vfork child, or a child of
	 * a raw clone or of _Fork. kcmp says whether the memory is s's (0:
	 * the same; 1-3: not). When it cannot say (EPERM: a process that
	 * changed its uid is not dumpable; a seccomp filter or a kernel
	 * without kcmp), shared: a vfork child is by far the likelier (a raw
	 * clone's or _Fork's child is then taken for one, and leaves the
	 * table's entries alone). s gone (ESRCH): not a vfork child, whose
	 * parent waits. */
	long k = s ? syscall(SYS_kcmp, p, s, KCMP_VM, 0, 0) : 1;
	if (k == 0 || (k < 0 && errno != ESRCH)) {
		__atomic_store_n(&child, p, __ATOMIC_RELAXED);
		return true;
	}
	__atomic_store_n(&self, p, __ATOMIC_RELAXED);
	return false;
}
