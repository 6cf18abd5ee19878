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
 * - signals: handlers are wrapped (signals.c) so that a handler that runs
 *   on the spinning thread interrupts its spin as it would the blocking
 *   call (EINTR, or a restart under SA_RESTART for reads); one that runs
 *   on another thread does not, as it would not end a blocked call here.
 *
 * Back-off, so that spinning never costs more than it gains when cores are
 * scarce: no spin while more threads are runnable than the machine has
 * CPUs (sampled every 10 ms); and after 4 spins in a row that ended in a
 * block, the socket skips 1, 2, 4 ... up to 1024 calls before it tries
 * again. Any spin that finds data resets it. */
#include "process.h"
#include "spin.h"
#include "sys.h"
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	return cpus_scarce(lf__sys_now_ns()) ? 0 : f->spin_us;
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

/* Receives without blocking until data, an error, a signal or the end of
 * the budget. LF_SPIN_DONE: *ret (and errno) is the answer. */
int lf__spin_recvmsg(int fd, struct msghdr *m, int flags, ssize_t *ret)
{
	struct lf_fd *f = lf__fd(fd);
	unsigned us = (flags & (MSG_DONTWAIT | MSG_WAITALL)) ? 0 : budget(f, LF_F_FAST);
	unsigned s0 = atomic_load(&lf__sig_seen), i0 = atomic_load(&lf__sig_interrupt);

	if (!us)
		return LF_SPIN_BLOCK;
	uint64_t end = lf__sys_now_ns() + us * 1000ull;
	do {
		ssize_t n = REAL(recvmsg)(fd, m, flags | MSG_DONTWAIT);
		if (n >= 0 || errno != EAGAIN) {
			outcome(f, true);
			*ret = n;
			return LF_SPIN_DONE;
		}
		if (atomic_load(&lf__sig_seen) != s0) {
			if (atomic_load(&lf__sig_interrupt) == i0)
				return LF_SPIN_BLOCK; /* SA_RESTART: carry on as the kernel would */
			errno = EINTR;
			*ret = -1;
			return LF_SPIN_DONE;
		}
		relax();
	} while (lf__sys_now_ns() < end);
	outcome(f, false);
	return LF_SPIN_BLOCK;
}

int lf__spin_wait(struct lf_fd *f, const struct lf_waiter *w, int64_t timeout_ns, int64_t *left_ns, int *ret)
{
	unsigned us = timeout_ns == 0 ? 0 : budget(f, 0);
	unsigned s0 = atomic_load(&lf__sig_seen);
	uint64_t start = lf__sys_now_ns(), end = start + us * 1000ull, now = start;

	*left_ns = timeout_ns;
	if (!us)
		return LF_SPIN_BLOCK;
	if (timeout_ns > 0 && (uint64_t)timeout_ns < us * 1000ull)
		end = start + (uint64_t)timeout_ns;
	do {
		int r = w->try(w->arg);
		if (r != 0) {
			outcome(f, r > 0);
			*ret = r;
			return LF_SPIN_DONE;
		}
		if (atomic_load(&lf__sig_seen) != s0) { /* waits are never restarted */
			errno = EINTR;
			*ret = -1;
			return LF_SPIN_DONE;
		}
		relax();
		now = lf__sys_now_ns();
	} while (now < end);
	outcome(f, false);
	if (timeout_ns > 0) {
		*left_ns = timeout_ns - (int64_t)(now - start);
		if (*left_ns <= 0) {
			*ret = 0;
			return LF_SPIN_DONE;
		}
	}
	return LF_SPIN_BLOCK;
}

/* ---- bookkeeping the wrappers rely on */

/* An epoll set spins when it holds a fast-path socket that spins. A member
 * closed without EPOLL_CTL_DEL leaves the count high: the set then spins
 * and backs off, never waits wrongly. */
void lf__spin_epoll_member(int epfd, int fd, int op)
{
	struct lf_fd *e = lf__fd(epfd);

	if (!e || !lf__may_spin(fd) || op == EPOLL_CTL_MOD)
		return;
	e->spin_members += op == EPOLL_CTL_ADD ? 1 : -1;
	if (lf__fd(fd)->spin_us > e->spin_us)
		e->spin_us = lf__fd(fd)->spin_us;
}
