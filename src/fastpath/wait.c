/* The interposed waits on sets of descriptors (poll, ppoll, select,
 * pselect, epoll_wait, epoll_pwait): they may spin first (spin.c), keep
 * SHUT_RD's answer (readable), and switch pending connects whose handshake
 * they report done (connect.c). */
#include "internal.h"
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct lf_fd *poll_spinner(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (lf__may_spin(fds[i].fd) && (fds[i].events & POLLIN))
			return lf__fd(fds[i].fd);
	return NULL;
}

static struct lf_fd *select_spinner(int n, fd_set *r)
{
	for (int fd = 0; r && fd < n && fd < FD_SETSIZE; fd++)
		if (FD_ISSET(fd, r) && lf__may_spin(fd))
			return lf__fd(fd);
	return NULL;
}

static struct timespec ns_ts(int64_t ns)
{
	return (struct timespec){ .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
}

struct poll_args {
	struct pollfd *fds;
	nfds_t n;
	const sigset_t *mask;
	int nw; /* tier sockets watched (-1: not looked for yet) */
	struct lf_shm_watch w[LF_WATCH_MAX];
};

/* A spinning wait's look at the kernel, and at the rings of tier sockets
 * (shm.c, lf__shm_watch_poll) as try_epoll's (below, its times): their
 * POLLIN alone while the kernel was asked less than RINGS_ALONE_NS ago,
 * else merged into the kernel's answer. The answer's revents are all 0
 * when it comes: cleared once, and a look that found nothing leaves them
 * so. */
#define KERNEL_LOOK_NS 1000u
#define RINGS_ALONE_NS 10000u
static __thread uint64_t kernel_looked;

static int try_poll(void *arg)
{
	struct poll_args *a = arg;
	struct timespec zero = { 0, 0 };

	if (a->nw < 0 && (a->nw = lf__shm_used ? lf__shm_watch_poll(a->fds, a->n, a->w) : 0))
		for (nfds_t i = 0; i < a->n; i++) /* a poll that began before the process used the tier */
			a->fds[i].revents = 0;
	if (!a->nw)
		return REAL(ppoll)(a->fds, a->n, &zero, a->mask);
	uint64_t now = lf__sys_now_ns();
	if (now - kernel_looked < KERNEL_LOOK_NS)
		return lf__shm_watch_ready_poll(a->w, a->nw, a->fds, 0);
	int k = now - kernel_looked < RINGS_ALONE_NS ? lf__shm_watch_ready_poll(a->w, a->nw, a->fds, 0) : 0;
	if (k)
		return k;
	kernel_looked = now;
	int r = REAL(ppoll)(a->fds, a->n, &zero, a->mask);
	return r < 0 ? r : lf__shm_watch_ready_poll(a->w, a->nw, a->fds, r);
}

/* A socket after SHUT_RD is readable for TCP (EOF at worst): such a wait
 * returns at once. */
static bool poll_shut_rd(struct pollfd *fds, nfds_t n, const sigset_t *mask, int *ret)
{
	nfds_t i;
	struct timespec zero = { 0, 0 };

	for (i = 0; i < n; i++)
		if ((fds[i].events & (POLLIN | POLLRDNORM | POLLRDHUP)) && lf__fd_shut_rd(fds[i].fd))
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
		if (lf__fd_shut_rd(fds[i].fd))
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
	struct poll_args a = { .fds = fds, .n = n, .mask = mask, .nw = -1 };
	struct lf_waiter w = { try_poll, &a };
	int64_t left;
	int r;

	*handled = false;
	if (!f)
		return 0;
	bool done = lf__spin_wait(f, &w, timeout_ns, &left, &r) == LF_SPIN_DONE;
	if (a.nw > 0)
		lf__shm_unwatch(a.w, a.nw, !done);
	if (!done) {
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
static void settle_polled(struct pollfd *fds, nfds_t n, int r)
{
	if (r > 0)
		lf__bell_err_poll(fds, n);
	for (nfds_t i = 0; r > 0 && i < n; i++)
		if (fds[i].revents && lf__pending(fds[i].fd))
			lf__finalize(fds[i].fd, false);
}

/* The wait of poll and ppoll below, for the shm tier to wrap (shm.c makes
 * POLLIN and POLLOUT the rings' on its sockets). */
static int poll_tiered(struct pollfd *fds, unsigned long n, long long t, const void *mask)
{
	bool handled;
	int r = lf__bell_poll(fds, n, t, mask, &handled);
	if (!handled)
		r = poll_common(fds, n, t, mask, &handled);
	if (!handled) {
		struct timespec ts = ns_ts(t);
		r = REAL(ppoll)(fds, n, t < 0 ? NULL : &ts, mask);
	}
	settle_polled(fds, n, r);
	return r;
}

LF_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (lf__shm_used)
		return lf__shm_poll(fds, n, timeout < 0 ? -1 : (int64_t)timeout * 1000000, NULL, poll_tiered);
	bool handled;
	int r = lf__bell_poll(fds, n, timeout < 0 ? -1 : (int64_t)timeout * 1000000, NULL, &handled);
	if (!handled)
		r = poll_common(fds, n, timeout < 0 ? -1 : (int64_t)timeout * 1000000, NULL, &handled);
	else
		handled = true;
	if (!handled)
		r = REAL(poll)(fds, n, timeout);
	settle_polled(fds, n, r);
	return r;
}
LF_LOCAL(poll);

LF_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	bool handled;
	int64_t t = ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1;
	if (lf__shm_used)
		return lf__shm_poll(fds, n, t, mask, poll_tiered);
	int r = lf__bell_poll(fds, n, t, mask, &handled);
	if (!handled)
		r = poll_common(fds, n, t, mask, &handled);
	else
		handled = true;
	if (!handled)
		r = REAL(ppoll)(fds, n, ts, mask);
	settle_polled(fds, n, r);
	return r;
}
LF_LOCAL(ppoll);

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
		if (FD_ISSET(fd, r) && lf__fd_shut_rd(fd))
			break;
	if (!r || fd >= n || fd >= FD_SETSIZE)
		return false;
	fd_set want = *r;
	*ret = REAL(pselect)(n, r, w, e, &zero, mask);
	if (*ret < 0)
		return true;
	*ret = 0;
	for (fd = 0; fd < n && fd < FD_SETSIZE; fd++) {
		if (FD_ISSET(fd, &want) && lf__fd_shut_rd(fd))
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
	struct lf_waiter wt = { try_select, &a };
	int ret;

	*handled = false;
	*left = timeout_ns;
	if (!f)
		return 0;
	for (int i = 0; i < 3; i++)
		if (a.sets[i])
			a.saved[i] = *a.sets[i];
	*handled = true;
	if (lf__spin_wait(f, &wt, timeout_ns, left, &ret) == LF_SPIN_DONE)
		return ret;
	for (int i = 0; i < 3; i++)
		if (a.sets[i])
			*a.sets[i] = a.saved[i];
	struct timespec ts = ns_ts(*left);
	return REAL(pselect)(n, r, w, e, *left < 0 ? NULL : &ts, mask);
}

/* select and pselect over sets that hold a tier socket: the wait of poll
 * (shm.c makes POLLIN and POLLOUT the rings'), and the sets rebuilt from
 * its answer as the kernel's select does (readable: POLLIN, POLLHUP or
 * POLLERR; writable: POLLOUT or POLLERR; exceptional: POLLPRI; a closed
 * descriptor: EBADF). false: no tier socket in the sets. */
static bool select_tiered(int n, fd_set *r, fd_set *w, fd_set *e, int64_t t, const sigset_t *mask, int *ret)
{
	fd_set *sets[3] = { r, w, e };
	const short evs[3] = { POLLIN, POLLOUT, POLLPRI };
	unsigned long k = 0;
	bool any = false;

	n = n < FD_SETSIZE ? n : FD_SETSIZE;
	for (int fd = 0; fd < n; fd++)
		for (int i = 0; i < 3; i++)
			if (sets[i] && FD_ISSET(fd, sets[i])) {
				any |= lf__shm_on(fd);
				k++;
				break;
			}
	if (!any && !atomic_load_explicit(&lf__shm_due, memory_order_relaxed))
		return false; /* (due give-backs: lf__shm_poll cuts the wait) */
	struct pollfd *fds = calloc(k, sizeof(*fds));
	if (!fds) {
		errno = ENOMEM;
		*ret = -1;
		return true;
	}
	k = 0;
	for (int fd = 0; fd < n; fd++) {
		short ev = 0;
		for (int i = 0; i < 3; i++)
			ev |= sets[i] && FD_ISSET(fd, sets[i]) ? evs[i] : 0;
		if (ev)
			fds[k++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	*ret = lf__shm_poll(fds, k, t, mask, poll_tiered);
	for (unsigned long j = 0; *ret > 0 && j < k; j++)
		if (fds[j].revents & POLLNVAL) {
			errno = EBADF;
			*ret = -1;
		}
	if (*ret >= 0) {
		for (int i = 0; i < 3; i++)
			if (sets[i])
				FD_ZERO(sets[i]);
		*ret = 0;
		const short got[3] = { POLLIN | POLLHUP | POLLERR, POLLOUT | POLLERR, POLLPRI };
		for (unsigned long j = 0; j < k; j++)
			for (int i = 0; i < 3; i++)
				if ((fds[j].events & evs[i]) && (fds[j].revents & got[i])) {
					FD_SET(fds[j].fd, sets[i]);
					++*ret;
				}
	}
	free(fds);
	return true;
}

LF_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	int64_t left, timeout = tv ? (int64_t)tv->tv_sec * 1000000000 + tv->tv_usec * 1000 : -1;
	uint64_t start = lf__sys_now_ns();
	bool handled;
	int ret;

	if (lf__shm_used && select_tiered(n, r, w, e, timeout, NULL, &ret)) {
		handled = true;
	} else {
		ret = lf__bell_select(n, r, w, e, timeout, NULL, &handled);
		if (!handled)
			ret = select_common(n, r, w, e, timeout, NULL, &left, &handled);
		else
			handled = true;
	}
	if (!handled) {
		ret = REAL(select)(n, r, w, e, tv);
		lf__shm_waited();
		settle_selected(n, w, e, ret);
		return ret;
	}
	lf__shm_waited();
	settle_selected(n, w, e, ret);
	if (tv) { /* Linux select reports the time left */
		left = timeout - (int64_t)(lf__sys_now_ns() - start);
		left = left < 0 ? 0 : left;
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
	}
	return ret;
}

LF_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
	int64_t left, t = ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1;
	bool handled;
	int ret;

	if (lf__shm_used && select_tiered(n, r, w, e, t, mask, &ret))
		return ret;
	ret = lf__bell_select(n, r, w, e, t, mask, &handled);

	if (!handled)
		ret = select_common(n, r, w, e, t, mask, &left, &handled);
	else
		handled = true;
	if (!handled)
		ret = REAL(pselect)(n, r, w, e, ts, mask);
	lf__shm_waited();
	settle_selected(n, w, e, ret);
	return ret;
}

struct epoll_args {
	int epfd, max;
	struct epoll_event *ev;
	const sigset_t *mask;
	int nw;           /* tier sockets watched (-1: not looked for yet) */
	struct lf_shm_watch w[LF_WATCH_MAX];
};

/* A look while the wait spins. With tier sockets in the set, their rings
 * are looked at on each turn (shm.c, lf__shm_watch_ready) and the kernel
 * once every KERNEL_LOOK_NS (this thread's, across its calls): a system
 * call takes a few hundred ns here, and the ring's bytes would wait for
 * it. And the rings answer alone for RINGS_ALONE_NS at most: then the
 * kernel is asked too, its events given with theirs, so that the set's
 * other descriptors are never starved (a wait that gave the rings' events
 * alone whenever they had bytes never asked the kernel while an event
 * loop left bytes in a ring). Not every KERNEL_LOOK_NS there: a ping-pong
 * whose answer is in the ring when its wait begins would make a system
 * call for nearly every message (the epoll row of bench latency with the
 * tier and spinning: p50 0.71 -> 1.12 us); its spinning turns ask the
 * kernel often enough. */
static int try_epoll(void *arg)
{
	struct epoll_args *a = arg;

	if (a->nw < 0)
		a->nw = lf__shm_used ? lf__shm_watch(a->epfd, a->w) : 0;
	if (!a->nw)
		return REAL(epoll_pwait)(a->epfd, a->ev, a->max, 0, a->mask);
	uint64_t now = lf__sys_now_ns();
	if (now - kernel_looked < KERNEL_LOOK_NS)
		return lf__shm_watch_ready(a->w, a->nw, a->ev, 0, a->max);
	int k = now - kernel_looked < RINGS_ALONE_NS ? lf__shm_watch_ready(a->w, a->nw, a->ev, 0, a->max) : 0;
	if (k)
		return k;
	kernel_looked = now;
	int r = REAL(epoll_pwait)(a->epfd, a->ev, a->max, 0, a->mask);
	return r < 0 ? r : lf__shm_watch_ready(a->w, a->nw, a->ev, r, a->max);
}

static int epoll_spin(struct lf_fd *f, int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
	struct epoll_args a = { .epfd = epfd, .max = max, .ev = ev, .mask = mask, .nw = -1 };
	struct lf_waiter w = { try_epoll, &a };
	int64_t left;
	int r;
	bool done = lf__spin_wait(f, &w, timeout < 0 ? -1 : (int64_t)timeout * 1000000, &left, &r) == LF_SPIN_DONE;

	if (a.nw > 0)
		lf__shm_unwatch(a.w, a.nw, !done);
	if (done)
		return r;
	if (left < 0)
		return REAL(epoll_pwait)(epfd, ev, max, -1, mask);
	struct timespec ts = ns_ts(left);
	r = lf__sys_epoll_pwait2(epfd, ev, max, &ts, mask);
	if (r < 0 && errno == ENOSYS) /* before Linux 5.11: millisecond resolution */
		r = REAL(epoll_pwait)(epfd, ev, max, (int)((left + 999999) / 1000000), mask);
	return r;
}

/* A wait that only a bell's event ended (bell.c) goes on for the time the
 * caller had left: the application never sees those events. While a bell
 * another process may take the event of is kept, the wait is cut in
 * slices, after each of which the bells are looked at (bell.c). The clock
 * is read before the wait only while a connection of the process is
 * unconfirmed (an event loop calls this once or twice per request); a
 * bell's event that comes otherwise (a bell kept during the wait, or one
 * a forked child still holds: one-shot, so once each) has the wait go on
 * for the whole timeout again, from then. */
static int epoll_loop(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
	uint64_t start = timeout > 0 && (atomic_load_explicit(&lf__unconfirmed, memory_order_relaxed) ||
					 atomic_load_explicit(&lf__shm_due, memory_order_relaxed) ||
					 atomic_load_explicit(&lf__shm_undecided, memory_order_relaxed))
				 ? lf__sys_now_ns()
				 : 0;
	struct lf_fd *e = lf__fd(epfd);

	for (;;) {
		int slice = lf__bell_slicing() && (timeout < 0 || timeout > LF_BELL_SLICE_MS) ? LF_BELL_SLICE_MS : timeout;
		if (lf__shm_parked_trim && (slice < 0 || slice > 1))
			slice = 1;
		int64_t due = lf__shm_mem_slice(slice < 0 ? -1 : (int64_t)slice * 1000000);
		slice = due < 0 ? -1 : (int)(due / 1000000);
		int r = e && e->spin_members > 0 && e->spin_us ? epoll_spin(e, epfd, ev, max, slice, mask)
							      : REAL(epoll_pwait)(epfd, ev, max, slice, mask);
		if (r == 0)
			lf__shm_mem_sweep(); /* due give-backs (shm_mem.c) */
		if (r == 0 && lf__shm_parked_trim)
			lf__shm_epoll_unpark(); /* the give-back may be over: the kernel says again (shm.c, room_fix) */
		if (r < 0 || (r == 0 && slice == timeout))
			return r;
		int k = r && lf__bells_used && lf__bell_tagged(ev, r) ? lf__bell_epoll_filter(ev, r) : r;
		k = lf__shm_epoll_fix(epfd, ev, k);
		if (slice != timeout)
			lf__bell_sweep();
		if (k > 0 || timeout == 0) {
			if (__atomic_load_n(&lf__bell_resets, __ATOMIC_ACQUIRE))
				lf__bell_err_epoll(epfd, ev, k);
			if (e && e->pending_members > 0)
				lf__finalize_epoll(epfd);
			return k;
		}
		if (timeout > 0 && !start) {
			start = lf__sys_now_ns();
		} else if (timeout > 0) {
			int64_t spent = (int64_t)((lf__sys_now_ns() - start) / 1000000);
			if (spent >= timeout)
				return 0;
			timeout -= (int)spent;
			start += (uint64_t)spent * 1000000; /* the part of a millisecond counts too */
		}
	}
}

/* The registrations made edge-triggered during the wait are level-
 * triggered again before it returns (shm.c, room_fix). */
static inline void epoll_unpark(void)
{
	if (lf__shm_parked)
		lf__shm_epoll_unpark();
}

/* A set with nothing to spin and nothing pending, in a process that never
 * kept a bell (every server): the kernel's wait and nothing else. */
static inline bool epoll_plain(int epfd)
{
	struct lf_fd *e = lf__fd_peek(epfd);
	return !lf__bells_used && !atomic_load_explicit(&lf__shm_due, memory_order_relaxed) &&
	       !atomic_load_explicit(&lf__shm_undecided, memory_order_relaxed) &&
	       !atomic_load_explicit(&lf__shm_full, memory_order_relaxed) &&
	       !(e && ((e->spin_members > 0 && e->spin_us) || e->pending_members > 0));
}

LF_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	int r = epoll_plain(epfd) ? REAL(epoll_pwait)(epfd, ev, max, timeout, NULL)
				  : epoll_loop(epfd, ev, max, timeout, NULL);
	lf__shm_waited(); /* the shm tier's reads look at their sockets again */
	epoll_unpark();
	return r;
}

LF_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
	int r = epoll_plain(epfd) ? REAL(epoll_pwait)(epfd, ev, max, timeout, mask)
				  : epoll_loop(epfd, ev, max, timeout, mask);
	lf__shm_waited();
	epoll_unpark();
	return r;
}

/* epoll_pwait2 (nanosecond timeout): the bells' events taken out as above
 * and pending connects finished; it does not spin. */
LF_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask)
{
	int64_t total = ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1;
	uint64_t start = lf__sys_now_ns();

	for (;;) {
		int64_t left = total < 0 ? -1 : total - (int64_t)(lf__sys_now_ns() - start);
		if (total >= 0 && left < 0)
			left = 0;
		int64_t want = lf__bell_slicing() && (left < 0 || left > LF_BELL_SLICE_MS * 1000000ll)
				       ? LF_BELL_SLICE_MS * 1000000ll
				       : left;
		if (lf__shm_parked_trim && (want < 0 || want > 1000000)) /* as epoll_loop's */
			want = 1000000;
		int64_t slice = lf__shm_mem_slice(want);
		struct timespec t = ns_ts(slice);
		int r = lf__sys_epoll_pwait2(epfd, ev, max, slice < 0 ? NULL : &t, mask);
		lf__shm_waited();
		if (r == 0)
			lf__shm_mem_sweep();
		if (r == 0 && lf__shm_parked_trim)
			lf__shm_epoll_unpark();
		if (r < 0 || (r == 0 && slice == left)) {
			epoll_unpark();
			return r;
		}
		int k = lf__shm_epoll_fix(epfd, ev, r ? lf__bell_epoll_filter(ev, r) : 0);
		if (slice != left)
			lf__bell_sweep();
		if (k > 0 || left == 0) {
			lf__bell_err_epoll(epfd, ev, k);
			lf__finalize_epoll(epfd);
			epoll_unpark();
			return k;
		}
	}
}

/* _FORTIFY_SOURCE's checked entry points: the same waits. */
extern void __chk_fail(void) __attribute__((noreturn));
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen);

LF_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return local_poll(fds, n, timeout);
}

LF_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return local_ppoll(fds, n, ts, mask);
}
