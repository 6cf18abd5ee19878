/* User-space busy polling for fast-path sockets (the "RIO poll" row).
 *
 * Linux busy polling needs a NIC's NAPI id, so it never applies to
 * loopback or Unix sockets. Here, a blocking receive or wait that involves a
 * fast-path socket with a spin budget first retries without blocking for up
 * to that many microseconds, then blocks exactly as it would have.
 *
 * Semantics kept:
 * - non-blocking sockets, MSG_DONTWAIT, MSG_WAITALL and sockets with
 *   SO_RCVTIMEO never spin (their timing is the caller's), nor do sockets
 *   with SO_RCVLOWAT set (a non-blocking retry would return fewer bytes
 *   than the mark);
 * - poll/select/epoll timeouts are honoured exactly: the spin stops at the
 *   timeout, and the blocking call gets the remaining time;
 * - signals: handlers are wrapped (sigaction, signal) so that a handler
 *   that runs during a spin interrupts it as it would the blocking call
 *   (EINTR, or a restart under SA_RESTART for reads).
 *
 * Back-off, so that spinning never costs more than it gains when cores are
 * scarce: no spin while more threads are runnable than the machine has
 * CPUs (sampled every 10 ms); and after 4 spins in a row that ended in a
 * block, the socket skips 1, 2, 4 ... up to 1024 calls before it tries
 * again. Any spin that finds data resets it. */
#include "internal.h"
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

bool lf__spin_used;

/* LOOPFAST_SPIN_BACKOFF=0 turns the back-off off (tests, benchmarks). */
static bool backoff(void)
{
	static int on = -1;

	if (on < 0) {
		const char *b = getenv("LOOPFAST_SPIN_BACKOFF");
		on = !(b && b[0] == '0');
	}
	return on;
}

static atomic_uint sig_seen, sig_interrupt;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* True when more threads are runnable than the machine has CPUs (both
 * system-wide: a process pinned to one CPU still spins while the other
 * CPUs run its peer). */
static bool cpus_scarce(uint64_t now)
{
	static long ncpu;
	static __thread uint64_t checked;
	static __thread bool busy;
	char buf[128];

	if (now - checked < 10000000u)
		return busy;
	checked = now;
	if (!ncpu)
		ncpu = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
	int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC), running = 0;
	if (fd >= 0) {
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		lf__sys_close(fd);
		if (n > 0) {
			buf[n] = '\0';
			sscanf(buf, "%*s %*s %*s %d", &running);
		}
	}
	busy = running > ncpu;
	return busy;
}

static unsigned budget(struct lf_fd *f, unsigned need_flags)
{
	unsigned fl;

	if (!f || !f->spin_us)
		return 0;
	static uint32_t rcvlowat;
	if (!rcvlowat)
		rcvlowat = lf__carried_bit(SO_RCVLOWAT);
	fl = atomic_load_explicit(&f->flags, memory_order_relaxed);
	if ((fl & need_flags) != need_flags || (fl & (LF_F_NONBLOCK | LF_F_RCVTIMEO)) || (f->sockset & rcvlowat))
		return 0;
	if (!backoff())
		return f->spin_us;
	if (f->spin_skip) {
		f->spin_skip--;
		return 0;
	}
	return cpus_scarce(now_ns()) ? 0 : f->spin_us;
}

static void outcome(struct lf_fd *f, bool paid)
{
	if (paid) {
		f->spin_fail = 0;
	} else if (++f->spin_fail >= 4) {
		unsigned k = f->spin_fail - 4;
		f->spin_skip = k >= 10 ? 1024 : 1u << k;
	}
}

enum { SPIN_DONE, SPIN_BLOCK };

/* Receives without blocking until data, an error, a signal or the end of
 * the budget. SPIN_DONE: *ret (and errno) is the answer. */
static int spin_recvmsg(int fd, struct msghdr *m, int flags, ssize_t *ret)
{
	struct lf_fd *f = lf__fd(fd);
	unsigned us = (flags & (MSG_DONTWAIT | MSG_WAITALL)) ? 0 : budget(f, LF_F_FAST);
	unsigned s0 = atomic_load(&sig_seen), i0 = atomic_load(&sig_interrupt);

	if (!us)
		return SPIN_BLOCK;
	uint64_t end = now_ns() + us * 1000ull;
	do {
		ssize_t n = REAL(recvmsg)(fd, m, flags | MSG_DONTWAIT);
		if (n >= 0 || errno != EAGAIN) {
			outcome(f, true);
			*ret = n;
			return SPIN_DONE;
		}
		if (atomic_load(&sig_seen) != s0) {
			if (atomic_load(&sig_interrupt) == i0)
				return SPIN_BLOCK; /* SA_RESTART: carry on as the kernel would */
			errno = EINTR;
			*ret = -1;
			return SPIN_DONE;
		}
		relax();
	} while (now_ns() < end);
	outcome(f, false);
	return SPIN_BLOCK;
}

/* A connected TCP socket reports no source address; a Unix one would. */
static void no_source(int fd, struct msghdr *m)
{
	struct lf_fd *f = lf__fd(fd);

	if (m->msg_name && f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST))
		m->msg_namelen = 0;
}

static bool may_spin(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	return f && f->spin_us && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST);
}

/* A connect pending on fd (connect.c) finishes before the data path uses
 * fd: a blocking call waits for the handshake, interruptibly; a
 * non-blocking one gets EAGAIN while it is in progress, as over TCP. A
 * handshake that failed reports its error once. 0: go on; -1: errno. */
static int settle(int fd, int flags)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f)
		return 0;
	if (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_PENDING) {
		int fl = lf__sys_fcntl(fd, F_GETFL, 0);
		if (lf__finalize(fd, fl >= 0 && !(fl & O_NONBLOCK) && !(flags & MSG_DONTWAIT)) < 0)
			return -1;
	}
	if (f->pend_err) {
		errno = f->pend_err;
		f->pend_err = 0;
		return -1;
	}
	return 0;
}

#define SETTLE(fd, msgflags)                                                                            \
	do {                                                                                           \
		struct lf_fd *f_ = lf__fd(fd);                                                         \
		if (f_ && ((atomic_load_explicit(&f_->flags, memory_order_relaxed) & LF_F_PENDING) ||    \
			   f_->pend_err) && settle(fd, msgflags))                                      \
			return -1;                                                                     \
	} while (0)

/* After shutdown(SHUT_RD) (kept by interpose.c, not told to the Unix
 * socket) TCP still returns what is queued, and 0 where it would wait. */
static bool shut_rd(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	return f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHUT_RD);
}

static ssize_t shut_rd_recvmsg(int fd, struct msghdr *m, int flags)
{
	int e = errno;
	ssize_t r = REAL(recvmsg)(fd, m, flags | MSG_DONTWAIT);

	if (r < 0 && errno == EAGAIN) {
		errno = e;
		return 0;
	}
	return r;
}

LF_EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	ssize_t r;

	SETTLE(fd, flags);
	if (shut_rd(fd)) {
		r = shut_rd_recvmsg(fd, m, flags);
		if (r >= 0)
			no_source(fd, m);
		return r;
	}
	if (may_spin(fd) && spin_recvmsg(fd, m, flags, &r) == SPIN_DONE) {
		if (r >= 0)
			no_source(fd, m);
		return r;
	}
	r = REAL(recvmsg)(fd, m, flags);
	if (r >= 0)
		no_source(fd, m);
	return r;
}

LF_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl)
{
	SETTLE(fd, flags);
	if (!may_spin(fd) && !sa && !shut_rd(fd))
		return REAL(recvfrom)(fd, buf, n, flags, sa, sl);
	struct iovec iov = { buf, n };
	struct msghdr m = { .msg_name = sa, .msg_namelen = sl ? *sl : 0, .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t r = recvmsg(fd, &m, flags);
	if (r >= 0 && sa && sl)
		*sl = m.msg_namelen;
	return r;
}

LF_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	SETTLE(fd, flags);
	if (!may_spin(fd) && !shut_rd(fd))
		return REAL(recv)(fd, buf, n, flags);
	return recvfrom(fd, buf, n, flags, NULL, NULL);
}

LF_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	ssize_t r;

	SETTLE(fd, 0);
	if (shut_rd(fd)) {
		struct iovec iov = { buf, n };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		return shut_rd_recvmsg(fd, &m, 0);
	}
	if (may_spin(fd)) {
		struct iovec iov = { buf, n };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (spin_recvmsg(fd, &m, 0, &r) == SPIN_DONE)
			return r;
	}
	return REAL(read)(fd, buf, n);
}

LF_EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
	ssize_t r;

	SETTLE(fd, 0);
	if (shut_rd(fd) && n >= 0) {
		struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
		return shut_rd_recvmsg(fd, &m, 0);
	}
	if (may_spin(fd) && n >= 0) {
		struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
		if (spin_recvmsg(fd, &m, 0, &r) == SPIN_DONE)
			return r;
	}
	return REAL(readv)(fd, iov, n);
}

/* A connected TCP socket ignores the destination of sendto/sendmsg; a
 * connected Unix stream refuses it (EISCONN). */
LF_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl)
{
	struct lf_fd *f = lf__fd(fd);

	SETTLE(fd, flags);
	if (sa && f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST)) {
		sa = NULL;
		sl = 0;
	}
	return REAL(sendto)(fd, buf, n, flags, sa, sl);
}

LF_EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
	struct lf_fd *f = lf__fd(fd);

	SETTLE(fd, flags);
	if (m && m->msg_name && f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST)) {
		struct msghdr copy = *m;
		copy.msg_name = NULL;
		copy.msg_namelen = 0;
		return REAL(sendmsg)(fd, &copy, flags);
	}
	return REAL(sendmsg)(fd, m, flags);
}

/* The plain writes are interposed only for a connect still pending on
 * the fd (one array lookup otherwise). */
LF_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	SETTLE(fd, 0);
	return REAL(write)(fd, buf, n);
}

LF_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
	SETTLE(fd, 0);
	return REAL(writev)(fd, iov, n);
}

LF_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	SETTLE(fd, flags);
	return REAL(send)(fd, buf, n, flags);
}

/* ---- waits on sets */

static struct lf_fd *poll_spinner(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (may_spin(fds[i].fd) && (fds[i].events & POLLIN))
			return lf__fd(fds[i].fd);
	return NULL;
}

static struct lf_fd *select_spinner(int n, fd_set *r)
{
	for (int fd = 0; r && fd < n && fd < FD_SETSIZE; fd++)
		if (FD_ISSET(fd, r) && may_spin(fd))
			return lf__fd(fd);
	return NULL;
}

/* The spin of a wait: calls try() (a zero-timeout wait) until it reports
 * something, a signal arrives, the caller's timeout (ns, <0 = none) or the
 * budget ends. Returns SPIN_DONE with *ret set, or SPIN_BLOCK with the
 * remaining timeout in *left_ns. */
struct waiter {
	int (*try)(void *arg);
	void *arg;
};

static int spin_wait(struct lf_fd *f, const struct waiter *w, int64_t timeout_ns, int64_t *left_ns, int *ret)
{
	unsigned us = timeout_ns == 0 ? 0 : budget(f, 0);
	unsigned s0 = atomic_load(&sig_seen);
	uint64_t start = now_ns(), end = start + us * 1000ull, now = start;

	*left_ns = timeout_ns;
	if (!us)
		return SPIN_BLOCK;
	if (timeout_ns > 0 && (uint64_t)timeout_ns < us * 1000ull)
		end = start + (uint64_t)timeout_ns;
	do {
		int r = w->try(w->arg);
		if (r != 0) {
			outcome(f, r > 0);
			*ret = r;
			return SPIN_DONE;
		}
		if (atomic_load(&sig_seen) != s0) { /* waits are never restarted */
			errno = EINTR;
			*ret = -1;
			return SPIN_DONE;
		}
		relax();
		now = now_ns();
	} while (now < end);
	outcome(f, false);
	if (timeout_ns > 0) {
		*left_ns = timeout_ns - (int64_t)(now - start);
		if (*left_ns <= 0) {
			*ret = 0;
			return SPIN_DONE;
		}
	}
	return SPIN_BLOCK;
}

static struct timespec ns_ts(int64_t ns)
{
	return (struct timespec){ .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
}

struct poll_args {
	struct pollfd *fds;
	nfds_t n;
	const sigset_t *mask;
};

static int try_poll(void *arg)
{
	struct poll_args *a = arg;
	struct timespec zero = { 0, 0 };
	return REAL(ppoll)(a->fds, a->n, &zero, a->mask);
}

/* A socket after SHUT_RD is readable for TCP (EOF at worst): such a wait
 * returns at once. */
static bool poll_shut_rd(struct pollfd *fds, nfds_t n, const sigset_t *mask, int *ret)
{
	nfds_t i;
	struct timespec zero = { 0, 0 };

	for (i = 0; i < n; i++)
		if ((fds[i].events & (POLLIN | POLLRDNORM | POLLRDHUP)) && shut_rd(fds[i].fd))
			break;
	if (i == n)
		return false;
	int r = REAL(ppoll)(fds, n, &zero, mask);
	if (r < 0) {
		*ret = r;
		return true;
	}
	*ret = 0;
	for (i = 0; i < n; i++) {
		if (shut_rd(fds[i].fd))
			fds[i].revents |= fds[i].events & (POLLIN | POLLRDNORM | POLLRDHUP);
		*ret += fds[i].revents != 0;
	}
	return true;
}

static int poll_common(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask, bool *handled)
{
	int shut;
	if (poll_shut_rd(fds, n, mask, &shut)) {
		*handled = true;
		return shut;
	}
	struct lf_fd *f = poll_spinner(fds, n);
	struct poll_args a = { fds, n, mask };
	struct waiter w = { try_poll, &a };
	int64_t left;
	int r;

	*handled = false;
	if (!f || spin_wait(f, &w, timeout_ns, &left, &r) == SPIN_BLOCK) {
		if (!f)
			return 0;
		struct timespec ts = ns_ts(left);
		*handled = true;
		return REAL(ppoll)(fds, n, left < 0 ? NULL : &ts, mask);
	}
	*handled = true;
	return r;
}

/* Pending connects (connect.c) whose handshake a wait reported done are
 * switched before the caller sees the result, so that its next call goes
 * to the fast-path socket. */
static void settle_polled(const struct pollfd *fds, nfds_t n, int r)
{
	for (nfds_t i = 0; r > 0 && i < n; i++)
		if (fds[i].revents && lf__pending(fds[i].fd))
			lf__finalize(fds[i].fd, false);
}

LF_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	bool handled;
	int r = poll_common(fds, n, timeout < 0 ? -1 : (int64_t)timeout * 1000000, NULL, &handled);
	if (!handled)
		r = REAL(poll)(fds, n, timeout);
	settle_polled(fds, n, r);
	return r;
}

LF_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	bool handled;
	int r = poll_common(fds, n, ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1, mask, &handled);
	if (!handled)
		r = REAL(ppoll)(fds, n, ts, mask);
	settle_polled(fds, n, r);
	return r;
}

static void settle_selected(int n, fd_set *w, fd_set *e, int r)
{
	for (int fd = 0; r > 0 && fd < n && fd < FD_SETSIZE; fd++)
		if (((w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) && lf__pending(fd))
			lf__finalize(fd, false);
}

struct select_args {
	int n;
	fd_set *sets[3], saved[3];
	const sigset_t *mask;
};

static int try_select(void *arg)
{
	struct select_args *a = arg;
	struct timespec zero = { 0, 0 };
	for (int i = 0; i < 3; i++)
		if (a->sets[i])
			*a->sets[i] = a->saved[i];
	return REAL(pselect)(a->n, a->sets[0], a->sets[1], a->sets[2], &zero, a->mask);
}

static bool select_shut_rd(int n, fd_set *r, fd_set *w, fd_set *e, const sigset_t *mask, int *ret)
{
	int fd;
	struct timespec zero = { 0, 0 };

	for (fd = 0; r && fd < n && fd < FD_SETSIZE; fd++)
		if (FD_ISSET(fd, r) && shut_rd(fd))
			break;
	if (!r || fd >= n || fd >= FD_SETSIZE)
		return false;
	fd_set want = *r;
	*ret = REAL(pselect)(n, r, w, e, &zero, mask);
	if (*ret < 0)
		return true;
	*ret = 0;
	for (fd = 0; fd < n && fd < FD_SETSIZE; fd++) {
		if (FD_ISSET(fd, &want) && shut_rd(fd))
			FD_SET(fd, r);
		*ret += FD_ISSET(fd, r) + (w && FD_ISSET(fd, w)) + (e && FD_ISSET(fd, e));
	}
	return true;
}

static int select_common(int n, fd_set *r, fd_set *w, fd_set *e, int64_t timeout_ns, const sigset_t *mask,
			 int64_t *left, bool *handled)
{
	int shut;
	*left = timeout_ns;
	if (select_shut_rd(n, r, w, e, mask, &shut)) {
		*handled = true;
		return shut;
	}
	struct lf_fd *f = select_spinner(n, r);
	struct select_args a = { n, { r, w, e }, { { { 0 } } }, mask };
	struct waiter wt = { try_select, &a };
	int ret;

	*handled = false;
	*left = timeout_ns;
	if (!f)
		return 0;
	for (int i = 0; i < 3; i++)
		if (a.sets[i])
			a.saved[i] = *a.sets[i];
	*handled = true;
	if (spin_wait(f, &wt, timeout_ns, left, &ret) == SPIN_DONE)
		return ret;
	for (int i = 0; i < 3; i++)
		if (a.sets[i])
			*a.sets[i] = a.saved[i];
	struct timespec ts = ns_ts(*left);
	return REAL(pselect)(n, r, w, e, *left < 0 ? NULL : &ts, mask);
}

LF_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	int64_t left, timeout = tv ? (int64_t)tv->tv_sec * 1000000000 + tv->tv_usec * 1000 : -1;
	uint64_t start = now_ns();
	bool handled;
	int ret = select_common(n, r, w, e, timeout, NULL, &left, &handled);

	if (!handled) {
		ret = REAL(select)(n, r, w, e, tv);
		settle_selected(n, w, e, ret);
		return ret;
	}
	settle_selected(n, w, e, ret);
	if (tv) { /* Linux select reports the time left */
		left = timeout - (int64_t)(now_ns() - start);
		left = left < 0 ? 0 : left;
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
	}
	return ret;
}

LF_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
	int64_t left;
	bool handled;
	int ret = select_common(n, r, w, e, ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1, mask, &left,
				&handled);
	if (!handled)
		ret = REAL(pselect)(n, r, w, e, ts, mask);
	settle_selected(n, w, e, ret);
	return ret;
}

struct epoll_args {
	int epfd, max;
	struct epoll_event *ev;
	const sigset_t *mask;
};

static int try_epoll(void *arg)
{
	struct epoll_args *a = arg;
	return REAL(epoll_pwait)(a->epfd, a->ev, a->max, 0, a->mask);
}

static int epoll_common(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask, bool *handled)
{
	struct lf_fd *f = lf__fd(epfd);
	struct epoll_args a = { epfd, max, ev, mask };
	struct waiter w = { try_epoll, &a };
	int64_t left;
	int r;

	*handled = false;
	if (!f || f->spin_members <= 0 || !f->spin_us)
		return 0;
	*handled = true;
	if (spin_wait(f, &w, timeout < 0 ? -1 : (int64_t)timeout * 1000000, &left, &r) == SPIN_DONE)
		return r;
	if (left < 0)
		return REAL(epoll_pwait)(epfd, ev, max, -1, mask);
	struct timespec ts = ns_ts(left);
	r = (int)syscall(SYS_epoll_pwait2, epfd, ev, max, &ts, mask, _NSIG / 8);
	if (r < 0 && errno == ENOSYS) /* before Linux 5.11: millisecond resolution */
		r = REAL(epoll_pwait)(epfd, ev, max, (int)((left + 999999) / 1000000), mask);
	return r;
}

LF_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	bool handled;
	int r = epoll_common(epfd, ev, max, timeout, NULL, &handled);
	if (!handled)
		r = REAL(epoll_wait)(epfd, ev, max, timeout);
	if (r > 0)
		lf__finalize_epoll(epfd);
	return r;
}

LF_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
	bool handled;
	int r = epoll_common(epfd, ev, max, timeout, mask, &handled);
	if (!handled)
		r = REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
	if (r > 0)
		lf__finalize_epoll(epfd);
	return r;
}

/* ---- bookkeeping the wrappers rely on */

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

void lf__fd_nonblock(int fd, bool on) { set_flag(fd, LF_F_NONBLOCK, on); }
void lf__fd_rcvtimeo(int fd, bool on) { set_flag(fd, LF_F_RCVTIMEO, on); }

/* An epoll set spins when it holds a fast-path socket that spins. A member
 * closed without EPOLL_CTL_DEL leaves the count high: the set then spins
 * and backs off, never waits wrongly. */
void lf__epoll_member(int epfd, int fd, int op)
{
	struct lf_fd *e = lf__fd(epfd);

	if (!e || !may_spin(fd) || op == EPOLL_CTL_MOD)
		return;
	e->spin_members += op == EPOLL_CTL_ADD ? 1 : -1;
	if (lf__fd(fd)->spin_us > e->spin_us)
		e->spin_us = lf__fd(fd)->spin_us;
}

/* ---- signals: know when a handler ran during a spin */

static struct sigaction app[_NSIG];

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	struct sigaction *a = &app[sig];

	atomic_fetch_add(&sig_seen, 1);
	if (!(a->sa_flags & SA_RESTART))
		atomic_fetch_add(&sig_interrupt, 1);
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, uc);
	else if (a->sa_handler != SIG_IGN && a->sa_handler != SIG_DFL)
		a->sa_handler(sig);
}

static bool wrapped(const struct sigaction *sa)
{
	return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == trampoline;
}

LF_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction mine, prev;
	int r;

	if (sig <= 0 || sig >= _NSIG || !lf__spin_used ||
	    (act && (act->sa_handler == SIG_IGN || act->sa_handler == SIG_DFL) && !(act->sa_flags & SA_SIGINFO))) {
		r = REAL(sigaction)(sig, act, old ? &prev : NULL);
		if (r == 0 && old)
			*old = wrapped(&prev) ? app[sig] : prev;
		return r;
	}
	if (act) {
		struct sigaction saved = app[sig];
		app[sig] = *act;
		mine = *act;
		mine.sa_sigaction = trampoline;
		mine.sa_flags |= SA_SIGINFO;
		r = REAL(sigaction)(sig, &mine, &prev);
		if (r < 0) {
			app[sig] = saved;
			return r;
		}
		if (old)
			*old = wrapped(&prev) ? saved : prev;
		return r;
	}
	r = REAL(sigaction)(sig, NULL, &prev);
	if (r == 0 && old)
		*old = wrapped(&prev) ? app[sig] : prev;
	return r;
}

/* glibc's signal() has BSD semantics (SA_RESTART) and calls sigaction
 * internally, past our wrapper: route it through ours. */
LF_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
	struct sigaction act = { .sa_handler = h, .sa_flags = SA_RESTART }, old;

	if (!lf__spin_used)
		return REAL(signal)(sig, h);
	sigemptyset(&act.sa_mask);
	sigaddset(&act.sa_mask, sig);
	if (sigaction(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}
