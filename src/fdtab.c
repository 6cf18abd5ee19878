/* Per-fd state: a flat array indexed by fd, mapped lazily (untouched pages
 * cost nothing), and raw system calls that bypass every interposer.
 *
 * The table is a cache, never the source of truth for what a socket is: a
 * fast-path socket is recognised by its abstract name (kernel state), so an
 * fd closed behind our back (fclose, close_range in libc) costs at most a
 * stale option value, never a wrong path. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

bool lf__global_optin;
bool lf__debug_on;
unsigned lf__global_spin_us;

static struct lf_fd *table;

void lf__debug(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n = snprintf(buf, sizeof(buf), "loopfast[%d]: ", (int)getpid());

	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	int e = errno;
	(void)!write(2, buf, (size_t)n);
	errno = e;
}

int lf__sys_close(int fd) { return (int)syscall(SYS_close, fd); }
int lf__sys_socket(int domain, int type, int proto) { return (int)syscall(SYS_socket, domain, type, proto); }
int lf__sys_listen(int fd, int backlog) { return (int)syscall(SYS_listen, fd, backlog); }
int lf__sys_connect(int fd, const struct sockaddr *sa, socklen_t len) { return (int)syscall(SYS_connect, fd, sa, len); }
int lf__sys_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags) { return (int)syscall(SYS_accept4, fd, sa, len, flags); }
int lf__sys_dup3(int oldfd, int newfd, int flags) { return (int)syscall(SYS_dup3, oldfd, newfd, flags); }
int lf__sys_fcntl(int fd, int cmd, long arg) { return (int)syscall(SYS_fcntl, fd, cmd, arg); }
int lf__sys_getsockname(int fd, struct sockaddr *sa, socklen_t *len) { return (int)syscall(SYS_getsockname, fd, sa, len); }
int lf__sys_getpeername(int fd, struct sockaddr *sa, socklen_t *len) { return (int)syscall(SYS_getpeername, fd, sa, len); }
int lf__sys_getsockopt(int fd, int level, int opt, void *val, socklen_t *len) { return (int)syscall(SYS_getsockopt, fd, level, opt, val, len); }
int lf__sys_setsockopt(int fd, int level, int opt, const void *val, socklen_t len) { return (int)syscall(SYS_setsockopt, fd, level, opt, val, len); }
int lf__sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) { return (int)syscall(SYS_epoll_ctl, epfd, op, fd, ev); }

static struct lf_fd *table_get(void)
{
	struct lf_fd *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);

	if (t)
		return t;
	t = mmap(NULL, sizeof(struct lf_fd) * LF_FD_MAX, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (t == MAP_FAILED)
		return NULL;
	struct lf_fd *expected = NULL;
	if (!__atomic_compare_exchange_n(&table, &expected, t, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		munmap(t, sizeof(struct lf_fd) * LF_FD_MAX);
		return expected;
	}
	return t;
}

struct lf_fd *lf__fd(int fd)
{
	struct lf_fd *t;

	if (fd < 0 || fd >= LF_FD_MAX || !(t = table_get()))
		return NULL;
	return &t[fd];
}

void lf__fd_opts_default(struct lf_fd *f)
{
	static const int defaults[LF_NOPT] = {
		[LF_OPT_KEEPIDLE] = 7200, [LF_OPT_KEEPINTVL] = 75, [LF_OPT_KEEPCNT] = 9,
		[LF_OPT_MAXSEG] = 65483, [LF_OPT_TTL] = 64, [LF_OPT_QUICKACK] = 1,
	};
	memcpy(f->opt, defaults, sizeof(defaults));
}

void lf__listener_put(struct lf_listener *l)
{
	if (!l || atomic_fetch_sub(&l->refs, 1) != 1)
		return;
	for (int i = 0; i < 2; i++) {
		int fd = i ? l->chan : l->rdv;
		struct lf_fd *f = lf__fd(fd);
		if (f)
			atomic_store(&f->flags, 0);
		lf__sys_close(fd);
	}
	free(l);
}

void lf__fd_reset(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || (!atomic_load_explicit(&f->flags, memory_order_relaxed) && !f->lst && !f->spin_members && !f->spin_us))
		return;
	struct lf_listener *l = f->lst;
	f->lst = NULL;
	atomic_store(&f->flags, 0);
	f->spin_us = f->spin_fail = f->spin_skip = 0;
	f->spin_members = 0;
	for (int i = 0; i < LF_EPOLL_MAX; i++)
		f->ep[i].epfd1 = 0;
	lf__listener_put(l);
}

void lf__fd_copy(int from, int to)
{
	struct lf_fd *src = lf__fd(from), *dst = lf__fd(to);

	if (from == to || !dst)
		return;
	lf__fd_reset(to);
	if (!src || (!atomic_load(&src->flags) && !src->lst))
		return;
	dst->family = src->family;
	dst->spin_us = src->spin_us;
	memcpy(dst->opt, src->opt, sizeof(dst->opt));
	if (src->lst) {
		atomic_fetch_add(&src->lst->refs, 1);
		dst->lst = src->lst;
	}
	atomic_store(&dst->flags, atomic_load(&src->flags) & ~LF_F_HIDDEN);
}

int lf__fd_hide(int fd, struct lf_listener *owner)
{
	struct rlimit rl;
	long base = 512;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur / 2 > base)
		base = (long)rl.rlim_cur / 2;
	if (base > LF_FD_MAX - 1024)
		base = LF_FD_MAX - 1024;
	int nfd = lf__sys_fcntl(fd, F_DUPFD_CLOEXEC, base);
	if (nfd >= 0) {
		lf__sys_close(fd);
		fd = nfd;
	}
	struct lf_fd *f = lf__fd(fd);
	if (f) {
		lf__fd_reset(fd);
		f->owner = owner;
		atomic_store(&f->flags, LF_F_HIDDEN);
	}
	return fd;
}

void lf__fd_relocate(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	struct lf_listener *l;

	if (!f || !(atomic_load(&f->flags) & LF_F_HIDDEN) || !(l = f->owner))
		return;
	int nfd = lf__fd_hide(fd, l);
	if (nfd == fd)
		return;
	if (l->rdv == fd)
		l->rdv = nfd;
	if (l->chan == fd)
		l->chan = nfd;
	f->owner = NULL;
	atomic_store(&f->flags, 0);
}
