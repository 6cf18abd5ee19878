/* Per-fd state: a flat array indexed by fd, mapped lazily (untouched pages
 * cost nothing). Calls nothing of loopfast's but the raw-call layer (sys.c).
 *
 * The table is a cache, never the source of truth for what a socket is: a
 * fast-path socket is recognised by its abstract name (kernel state), so an
 * fd closed behind our back (fclose, close_range in libc) costs at most a
 * stale option value, never a wrong path. */
#include "fdtab.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

bool lf__global_optin;
bool lf__debug_on;
unsigned lf__global_spin_us;

struct lf_fd *lf__fdtab;

/* Start-up, stage 1 of 2, in both flavours of the library: LOOPFAST_DEBUG.
 * Stage 2 is the preload's (src/preload/preload.c); the priorities order
 * the two whatever the link order. */
__attribute__((constructor(101))) static void debug_init(void)
{
	const char *d = getenv("LOOPFAST_DEBUG");
	lf__debug_on = d && d[0] == '1';
	lf__sys_forked(); /* the process the tables belong to (lf__sys_vfork_child) */
}

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
	(void)!lf__sys_write(2, buf, (size_t)n);
	errno = e;
}

static struct lf_fd *table_get(void)
{
	struct lf_fd *t = __atomic_load_n(&lf__fdtab, __ATOMIC_ACQUIRE);

	if (t)
		return t;
	t = mmap(NULL, sizeof(struct lf_fd) * LF_FD_MAX, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (t == MAP_FAILED)
		return NULL;
	struct lf_fd *expected = NULL;
	if (!__atomic_compare_exchange_n(&lf__fdtab, &expected, t, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		munmap(t, sizeof(struct lf_fd) * LF_FD_MAX);
		return expected;
	}
#if defined(__SANITIZE_ADDRESS__)
	/* Listener state is reachable only from here. */
	__lsan_register_root_region(t, sizeof(struct lf_fd) * LF_FD_MAX);
#endif
	return t;
}

struct lf_fd *lf__fd_map(int fd)
{
	struct lf_fd *t;

	if (fd < 0 || fd >= LF_FD_MAX || !(t = table_get()))
		return NULL;
	return &t[fd];
}

const int lf__carried[] = { SO_RCVTIMEO, SO_SNDTIMEO, SO_LINGER, SO_KEEPALIVE, SO_REUSEADDR,
			    SO_PRIORITY, SO_RCVLOWAT, SO_RCVBUF, SO_SNDBUF };
const int lf__ncarried = sizeof(lf__carried) / sizeof(lf__carried[0]);

uint32_t lf__carried_bit(int opt)
{
	for (int i = 0; i < lf__ncarried; i++)
		if (lf__carried[i] == opt)
			return 1u << i;
	return 0;
}

static int dup_high(int fd);

/* What must happen when an entry goes away, as the layers above register
 * it (the table calls none of them by name): per state flag, the function
 * that releases that state, and the ones that take and drop a listener
 * reference. */
static void (*drop_fn[32])(int fd);
static unsigned drop_flags;
static void (*get_fn)(struct lf_listener *l), (*put_fn)(struct lf_listener *l);
static struct lf_shm_conn *(*share_fn)(int fd);

void lf__fd_on_drop(unsigned flag, void (*drop)(int fd))
{
	if (__atomic_load_n(&drop_flags, __ATOMIC_ACQUIRE) & flag)
		return;
	__atomic_store_n(&drop_fn[__builtin_ctz(flag)], drop, __ATOMIC_RELAXED);
	__atomic_fetch_or(&drop_flags, flag, __ATOMIC_RELEASE);
}

void lf__fd_on_listener(void (*get)(struct lf_listener *l), void (*put)(struct lf_listener *l))
{
	__atomic_store_n(&get_fn, get, __ATOMIC_RELEASE);
	__atomic_store_n(&put_fn, put, __ATOMIC_RELEASE);
}

void lf__fd_on_share(struct lf_shm_conn *(*share)(int fd))
{
	__atomic_store_n(&share_fn, share, __ATOMIC_RELEASE);
}

bool lf__fd_used(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);

	return f && (atomic_load_explicit(&f->flags, memory_order_relaxed) || f->lst || f->spin_members ||
		     f->spin_us || f->optset || f->sockset || f->pending_members || f->epset);
}

bool lf__fd_foreign(int fd)
{
	return lf__fd_used(fd) && lf__sys_vfork_child();
}

void lf__fd_reset(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (!lf__fd_used(fd))
		return;
	struct lf_listener *l = f->lst;
	f->lst = NULL;
	/* In the order of the flags' bits: a pending connect, then a bell. */
	for (unsigned hooked = __atomic_load_n(&drop_flags, __ATOMIC_ACQUIRE); hooked; hooked &= hooked - 1) {
		unsigned bit = hooked & -hooked;
		if (atomic_load(&f->flags) & bit)
			drop_fn[__builtin_ctz(bit)](fd);
	}
	atomic_store(&f->flags, 0);
	f->pend_err = 0;
	f->spin_us = f->spin_fail = f->spin_skip = 0;
	f->spin_members = f->pending_members = 0;
	f->optset = f->sockset = 0;
	f->epset = 0;
	for (int i = 0; i < LF_EPOLL_MAX; i++)
		f->ep[i].epfd1 = 0;
	void (*put)(struct lf_listener *) = __atomic_load_n(&put_fn, __ATOMIC_ACQUIRE);
	if (l && put)
		put(l);
}

void lf__fd_copy(int from, int to)
{
	struct lf_fd *src = lf__fd(from), *dst = lf__fd(to);

	if (from == to || !dst)
		return;
	lf__fd_reset(to);
	if (!src || (!atomic_load(&src->flags) && !src->lst && !src->optset && !src->sockset))
		return;
	dst->family = src->family;
	dst->spin_us = src->spin_us;
	memcpy(dst->opt, src->opt, sizeof(dst->opt));
	dst->optset = src->optset;
	dst->sockset = src->sockset;
	if (src->lst) {
		__atomic_load_n(&get_fn, __ATOMIC_ACQUIRE)(src->lst);
		dst->lst = src->lst;
	}
	unsigned fl = atomic_load(&src->flags) & ~(LF_F_HIDDEN | LF_F_PENDING | LF_F_UNCONFIRMED);
	struct lf_shm_conn *(*share)(int) = __atomic_load_n(&share_fn, __ATOMIC_ACQUIRE);
	/* Shared by the dups, taken as a call takes it: a close of `from`
	 * by another thread meanwhile cannot free it under the copy. */
	if ((fl & LF_F_SHM) && share && !(dst->shm = share(from)))
		fl &= ~LF_F_SHM;
	atomic_store(&dst->flags, fl);
}

/* Where hidden descriptors go: half way to the soft limit, so that they
 * stay out of the application's numbering but below the limit. */
static long hide_base(bool refresh)
{
	static long base;
	struct rlimit rl;

	if (base && !refresh)
		return base;
	base = 512;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		base = (long)rl.rlim_cur / 2;
	if (base > LF_FD_MAX - 1024)
		base = LF_FD_MAX - 1024;
	return base;
}

/* A close-on-exec duplicate of fd at the hidden base. */
static int dup_high(int fd)
{
	int nfd = lf__sys_fcntl(fd, F_DUPFD_CLOEXEC, hide_base(false));

	if (nfd < 0 && errno == EINVAL) /* the limit went down */
		nfd = lf__sys_fcntl(fd, F_DUPFD_CLOEXEC, hide_base(true));
	if (nfd < 0) /* nothing free up there: anywhere */
		nfd = lf__sys_fcntl(fd, F_DUPFD_CLOEXEC, 0);
	return nfd;
}

int lf__fd_dup_hidden(int fd)
{
	return dup_high(fd);
}

/* Marks fd as one of loopfast's own, kept at *home; moves it up among the
 * hidden numbers first when it is below them (or always, when `move`:
 * the application wants its number). */
static int hide(int fd, int *home, bool move)
{
	int nfd = move || fd < hide_base(false) ? dup_high(fd) : -1;

	if (nfd >= 0) {
		lf__sys_close(fd);
		fd = nfd;
	}
	struct lf_fd *f = lf__fd(fd);
	if (f) {
		lf__fd_reset(fd);
		f->home = home;
		atomic_store(&f->flags, LF_F_HIDDEN);
	}
	*home = fd;
	return fd;
}

int lf__fd_hide(int fd, int *home)
{
	return hide(fd, home, false);
}

void lf__fd_unhide(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (f && (atomic_load(&f->flags) & LF_F_HIDDEN)) {
		f->home = NULL;
		atomic_store(&f->flags, 0);
	}
}

/* As lf__fd_unhide, only while fd is still the one kept at *home (a
 * close_range may have closed it, and another hidden descriptor taken
 * its number since). */
void lf__fd_unhide_home(int fd, int *home)
{
	struct lf_fd *f = lf__fd(fd);

	if (f && f->home == home)
		lf__fd_unhide(fd);
}

void lf__fd_relocate(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	int *home;

	if (!f || !(atomic_load(&f->flags) & LF_F_HIDDEN) || !(home = f->home) || *home != fd)
		return;
	hide(fd, home, true);
	if (*home != fd) {
		f->home = NULL;
		atomic_store(&f->flags, 0);
	}
}

/* A fast-path socket's mode, as the application last set it (fcntl,
 * ioctl FIONBIO, SO_RCVTIMEO: interpose.c). */
static void set_flag(int fd, unsigned flag, bool on)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || !(atomic_load(&f->flags) & LF_F_FAST))
		return;
	if (on)
		atomic_fetch_or(&f->flags, flag);
	else
		atomic_fetch_and(&f->flags, ~flag);
}

unsigned lf__fd_timeouts(int fd)
{
	static const struct { int opt; unsigned flag; } o[] = { { SO_RCVTIMEO, LF_F_RCVTIMEO }, { SO_SNDTIMEO, LF_F_SNDTIMEO } };
	unsigned fl = 0;

	for (int i = 0; i < 2; i++) {
		struct timeval tv = { 0, 0 };
		socklen_t l = sizeof(tv);
		if (lf__sys_getsockopt(fd, SOL_SOCKET, o[i].opt, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
			fl |= o[i].flag;
	}
	return fl;
}

void lf__fd_nonblock(int fd, bool on) { set_flag(fd, LF_F_NONBLOCK, on); }
void lf__fd_rcvtimeo(int fd, bool on) { set_flag(fd, LF_F_RCVTIMEO, on); }
void lf__fd_sndtimeo(int fd, bool on) { set_flag(fd, LF_F_SNDTIMEO, on); }
