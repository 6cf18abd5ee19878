/* The bell: the client's TCP socket (the doorbell), kept after the switch
 * until the server has claimed the connection.
 *
 * The server claims the hello by writing the claim's mark (8 bytes) on the
 * TCP connection and then closing it (a FIN, which TCP delivers after the
 * mark; the client resets it once it has seen the mark, so that no end
 * keeps it in TIME_WAIT); until then the client cannot know that anyone
 * will. If the server process is killed between its accept
 * and its claim, or it serves the connection as plain TCP after all (its
 * claim failed), or the connection is reset by anything else (a listener
 * shut down with connections in its queue, an accept queue overflowing
 * under tcp_abort_on_overflow), nobody will ever read the client's hello,
 * and the client would wait on its Unix socket forever, where over TCP it
 * would have read EOF or a reset. So the client keeps its TCP socket and
 * watches it while it waits on the fast-path socket; when it rings (data,
 * an end of stream, a reset), the client reads what arrived:
 *   - the mark is the claim: the bell is closed (peeked, so that after a
 *     fork each process holding the bell sees it);
 *   - anything else means the fast path is dead: the fast-path socket is
 *     shut down, so that the application reads EOF (and its writes fail)
 *     as over TCP; after a reset, its next call gets ECONNRESET first.
 * Waits that watch it: blocking reads (io.c), poll, ppoll, select, pselect
 * (as a poll with the bells added) and epoll_wait, epoll_pwait (the bell is
 * registered, one-shot, with a tag in its data, in every epoll set the
 * fast-path socket is in; tagged events are taken out of what the
 * application gets; after a fork that one-shot event is shared with the
 * other process, so waits are also cut in slices that look at the bells:
 * lf__bell_slicing). Reads check it without waiting; writes do not (a
 * write to an unclaimed hello waits for nobody). A connection is unconfirmed for about one server wake-up; the
 * waits above cost nothing extra when no connection of the process is. */
#include "internal.h"
#include "syscalls.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#define DEBUG(...) do { if (lf__debug_on) lf__debug(__VA_ARGS__); } while (0)

atomic_int lf__unconfirmed;
bool lf__bells_used;
bool lf__bell_resets;

/* The error a fast-path socket reports once (a reset seen on its bell, a
 * pending connect's failure): read and cleared in one step, so that of
 * two threads asking (SO_ERROR, a read) only one gets it, as over TCP.
 * The socket's own error goes with it: a rendezvous closed with the hello
 * in its queue resets the client's Unix socket too, and the one reset
 * must be reported once. */
int lf__err_take(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	int e = f ? __atomic_exchange_n(&f->pend_err, 0, __ATOMIC_ACQ_REL) : 0;

	if (e) {
		int own, saved = errno;
		socklen_t l = sizeof(own);
		lf__sys_getsockopt(fd, SOL_SOCKET, SO_ERROR, &own, &l);
		errno = saved;
	}
	return e;
}

/* Bells kept across a fork (see negotiate.h: lf__bell_slicing), and the
 * highest fd that ever kept one (what a sweep looks through). */
static bool bells_shared;
static int bells_max = -1;

/* fork's prepare (fork.c): are bells kept across it? */
void lf__bell_fork_prepare(void)
{
	if (atomic_load(&lf__unconfirmed))
		__atomic_store_n(&bells_shared, true, __ATOMIC_RELAXED);
}

bool lf__bell_slicing(void)
{
	if (!__atomic_load_n(&bells_shared, __ATOMIC_RELAXED))
		return false;
	if (atomic_load_explicit(&lf__unconfirmed, memory_order_relaxed))
		return true;
	__atomic_store_n(&bells_shared, false, __ATOMIC_RELAXED); /* until a fork with one kept */
	return false;
}

void lf__bell_sweep(void)
{
	int max = __atomic_load_n(&bells_max, __ATOMIC_RELAXED);

	for (int fd = 0; fd <= max && atomic_load_explicit(&lf__unconfirmed, memory_order_relaxed); fd++)
		lf__bell_check(fd);
}

void lf__bell_keep(int fd, int bell)
{
	struct lf_fd *f = lf__fd(fd);

	lf__fork_init();
	for (int m = __atomic_load_n(&bells_max, __ATOMIC_RELAXED); m < fd;)
		if (__atomic_compare_exchange_n(&bells_max, &m, fd, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			break;

	lf__fd_hide(bell, &f->bell);
	f->bell_gen++;
	lf__fd_on_drop(LF_F_UNCONFIRMED, lf__bell_drop);
	atomic_fetch_or(&f->flags, LF_F_UNCONFIRMED);
	atomic_fetch_add(&lf__unconfirmed, 1);
	lf__bells_used = true;
	for (int i = 0; i < LF_EPOLL_MAX; i++)
		if (f->ep[i].epfd1)
			lf__bell_epoll_add(f->ep[i].epfd1 - 1, fd);
}

/* The verdict on a bell is given once: the caller that takes the flag
 * off gives it (and closes the bell); any other, even one that polled a
 * bell closed meanwhile (POLLNVAL) or a number reused since, does nothing. */
static struct lf_fd *verdict(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || !(atomic_fetch_and(&f->flags, ~LF_F_UNCONFIRMED) & LF_F_UNCONFIRMED))
		return NULL;
	atomic_fetch_sub(&lf__unconfirmed, 1);
	return f;
}

static void release(struct lf_fd *f)
{
	lf__fd_unhide(f->bell);
	lf__sys_close(f->bell);
	f->bell = -1;
}

void lf__bell_drop(int fd)
{
	struct lf_fd *f = verdict(fd);

	if (f)
		release(f);
}

/* "LFclaim" and the protocol's version (protocol.h): no TCP server that is
 * not loopfast writes it first (and only the server's end can write there). */
static const char claim_mark[LF_CLAIM_MARK_LEN] = LF_CLAIM_MARK;

void lf__bell_mark(int tcp)
{
	/* The server closes the connection right after, with a FIN (never a
	 * reset, which loopback could deliver ahead of the mark: it hands
	 * segments through per-CPU queues), and TCP delivers the mark before
	 * the end of stream: in one segment, as MSG_MORE holds the mark until
	 * the close. */
	lf__sys_sendto(tcp, claim_mark, sizeof(claim_mark), MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE, NULL, 0);
}

/* Is what arrived on the bell the mark? Peeked, not read: after a fork
 * every process holding the bell gives its own verdict. *reset: the
 * connection's reset error (ECONNRESET, EPIPE) when it was reset with
 * nothing to read. A bell that rang with nothing to read at all (not
 * something TCP does) is taken as claimed, as a bell closed behind
 * loopfast's back is: the other answer would end a connection that may be
 * good. */
static bool claim_seen(int bell, int *reset)
{
	char b[sizeof(claim_mark)];
	long n = lf__sys_recvfrom(bell, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK, NULL, NULL);

	*reset = n < 0 && (errno == ECONNRESET || errno == EPIPE) ? errno : 0;
	if (n < 0 && errno == EAGAIN)
		return true;
	return n == (long)sizeof(b) && memcmp(b, claim_mark, sizeof(b)) == 0;
}

bool lf__bell_marked(int tcp)
{
	int reset, inq = 0, e = errno;
	/* Counted first: a peek with nothing queued would take the socket's
	 * error, which TCP's answer needs. */
	bool r = lf__sys_ioctl(tcp, FIONREAD, &inq) == 0 && inq >= (int)sizeof(claim_mark) &&
		 claim_seen(tcp, &reset);

	errno = e;
	return r;
}

/* The last fds whose bell saw a reset, for epoll (whose events name the
 * application's data, not an fd): each is looked at only while its error
 * is unread. */
#define RESET_FDS 16
static int reset_fds[RESET_FDS];
static unsigned reset_next;

void lf__err_keep(int fd, int err)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || !err)
		return;
	atomic_fetch_or(&f->flags, LF_F_RESET);
	__atomic_store_n(&f->pend_err, err, __ATOMIC_RELEASE);
	unsigned i = __atomic_fetch_add(&reset_next, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&reset_fds[i % RESET_FDS], fd, __ATOMIC_RELAXED);
	__atomic_store_n(&lf__bell_resets, true, __ATOMIC_RELEASE);
}

/* A reset reports POLLERR until its error is read (SO_ERROR, a read), as
 * TCP's does; the Unix socket, shut down, says only POLLHUP. */
void lf__bell_err_poll(struct pollfd *fds, nfds_t n)
{
	struct lf_fd *f;

	if (!__atomic_load_n(&lf__bell_resets, __ATOMIC_ACQUIRE))
		return;
	for (nfds_t i = 0; i < n; i++)
		if (fds[i].revents && (f = lf__fd(fds[i].fd)) && __atomic_load_n(&f->pend_err, __ATOMIC_ACQUIRE))
			fds[i].revents |= POLLERR;
}

/* The same for epoll: an event whose data is that of a registration of a
 * socket with an unread reset in this epoll set (interpose.c records them). */
void lf__bell_err_epoll(int epfd, struct epoll_event *ev, int n)
{
	if (!__atomic_load_n(&lf__bell_resets, __ATOMIC_ACQUIRE))
		return;
	for (int r = 0; r < RESET_FDS; r++) {
		struct lf_fd *f = lf__fd(__atomic_load_n(&reset_fds[r], __ATOMIC_RELAXED));
		if (!f || !__atomic_load_n(&f->pend_err, __ATOMIC_ACQUIRE))
			continue;
		for (int i = 0; i < LF_EPOLL_MAX; i++)
			if (f->ep[i].epfd1 == epfd + 1)
				for (int k = 0; k < n; k++)
					if (ev[k].data.u64 == f->ep[i].ev.data.u64)
						ev[k].events |= EPOLLERR;
	}
}

/* The bell rang with events ev (poll's bits; epoll's are the same). */
static void rang(int fd, int ev)
{
	struct lf_fd *f = verdict(fd);

	if (!f)
		return;
	/* A bell closed behind loopfast's back (POLLNVAL) says nothing: taken
	 * as claimed, since the other answer would end a connection that may
	 * be good. */
	int reset = 0;
	if (!(ev & POLLNVAL) && !claim_seen(f->bell, &reset)) {
		DEBUG("fd %d: the TCP connection %s without the server's claim (events %#x): fast path shut down", fd,
		      reset ? "was reset" : "ended or was used", ev);
		lf__count(LF_EV_ORPHANED);
		/* A reset is reported once, as TCP reports it; then EOF. */
		if (reset)
			lf__err_keep(fd, reset);
		else
			__atomic_store_n(&f->pend_err, 0, __ATOMIC_RELEASE);
		lf__sys_shutdown(fd, SHUT_RDWR);
	}
	/* Claimed: the mark is still unread, so closing the bell resets the
	 * doorbell, and neither end keeps it in TIME_WAIT (the server closed
	 * first). */
	release(f);
}

bool lf__bell_check(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_UNCONFIRMED))
		return false;
	int ev = lf__sys_poll1(f->bell, POLLIN | POLLRDHUP, 0);
	if (ev == 0 || (ev < 0 && errno == EINTR))
		return true;
	if (ev > 0)
		rang(fd, ev);
	else
		lf__bell_drop(fd);
	return false;
}

int lf__bell_wait(int fd, short events)
{
	struct lf_fd *f = lf__fd(fd);

	while (lf__bell_check(fd)) {
		struct pollfd p[2] = { { fd, events, 0 }, { f->bell, POLLIN | POLLRDHUP, 0 } };
		unsigned i0 = atomic_load(&lf__sig_interrupt);
		int r = lf__sys_ppoll(p, 2, NULL, NULL);
		if (r < 0 && errno == EINTR) {
			/* As the blocking call would: EINTR after a handler known
			 * to interrupt (one without SA_RESTART); restarted after
			 * any other (SA_RESTART ones, and the C library's own,
			 * as glibc's set*id broadcast). */
			if (atomic_load(&lf__sig_interrupt) != i0)
				return -1;
			continue;
		}
		if (r > 0 && p[0].revents)
			return 0;
	}
	return 0;
}

/* ---- poll and select with the bells added */

static bool any_unconfirmed(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (lf__bell_check(fds[i].fd))
			return true;
	return false;
}

static int64_t left_of(int64_t timeout_ns, uint64_t start)
{
	if (timeout_ns < 0)
		return -1;
	int64_t left = timeout_ns - (int64_t)(lf__sys_now_ns() - start);
	return left < 0 ? 0 : left;
}

int lf__bell_poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask, bool *handled)
{
	*handled = false;
	if (!atomic_load_explicit(&lf__unconfirmed, memory_order_relaxed) || !any_unconfirmed(fds, n))
		return 0;
	*handled = true;
	struct pollfd *all = malloc((n * 2 + 1) * sizeof(*all));
	uint64_t start = lf__sys_now_ns();
	int r;

	if (!all) {
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		nfds_t k = n;
		memcpy(all, fds, n * sizeof(*all));
		for (nfds_t i = 0; i < n; i++) {
			struct lf_fd *f = lf__fd(fds[i].fd);
			if (f && (atomic_load(&f->flags) & LF_F_UNCONFIRMED))
				all[k++] = (struct pollfd){ f->bell, POLLIN | POLLRDHUP, 0 };
		}
		int64_t left = left_of(timeout_ns, start);
		struct timespec ts = { left / 1000000000, left % 1000000000 };
		r = lf__sys_ppoll(all, k, left < 0 ? NULL : &ts, mask);
		if (r < 0)
			break;
		r = 0;
		for (nfds_t i = 0; i < n; i++) {
			fds[i].revents = all[i].revents;
			r += all[i].revents != 0;
		}
		for (nfds_t i = n; i < k; i++) /* a bell rang: claimed, or dead (then readable) */
			if (all[i].revents)
				for (nfds_t j = 0; j < n; j++)
					lf__bell_check(fds[j].fd);
		if (r || left == 0)
			break;
		/* Only bells rang: the caller's wait goes on, for what is left. */
	}
	free(all);
	return r;
}

int lf__bell_select(int n, fd_set *rs, fd_set *ws, fd_set *es, int64_t timeout_ns, const sigset_t *mask,
		    bool *handled)
{
	struct pollfd *p = NULL;
	nfds_t k = 0;
	int r;

	*handled = false;
	if (!atomic_load_explicit(&lf__unconfirmed, memory_order_relaxed))
		return 0;
	for (int fd = 0; fd < n && fd < FD_SETSIZE; fd++)
		if (((rs && FD_ISSET(fd, rs)) || (ws && FD_ISSET(fd, ws))) && lf__bell_check(fd))
			*handled = true;
	if (!*handled)
		return 0;
	if (!(p = malloc((size_t)n * sizeof(*p)))) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < n && fd < FD_SETSIZE; fd++) {
		short ev = (rs && FD_ISSET(fd, rs) ? POLLIN : 0) | (ws && FD_ISSET(fd, ws) ? POLLOUT : 0) |
			   (es && FD_ISSET(fd, es) ? POLLPRI : 0);
		if (ev)
			p[k++] = (struct pollfd){ fd, ev, 0 };
	}
	bool inner;
	r = lf__bell_poll(p, k, timeout_ns, mask, &inner);
	if (!inner) { /* the bells were confirmed meanwhile: a plain wait */
		struct timespec ts = { timeout_ns / 1000000000, timeout_ns % 1000000000 };
		r = lf__sys_ppoll(p, k, timeout_ns < 0 ? NULL : &ts, mask);
	}
	if (r >= 0) {
		r = 0;
		for (nfds_t i = 0; i < k; i++) {
			int fd = p[i].fd;
			bool rd = rs && FD_ISSET(fd, rs) && (p[i].revents & (POLLIN | POLLHUP | POLLERR));
			bool wr = ws && FD_ISSET(fd, ws) && (p[i].revents & (POLLOUT | POLLERR));
			bool ex = es && FD_ISSET(fd, es) && (p[i].revents & POLLPRI);
			if (rs && FD_ISSET(fd, rs) && !rd)
				FD_CLR(fd, rs);
			if (ws && FD_ISSET(fd, ws) && !wr)
				FD_CLR(fd, ws);
			if (es && FD_ISSET(fd, es) && !ex)
				FD_CLR(fd, es);
			r += rd + wr + ex;
		}
	}
	free(p);
	return r;
}

/* ---- epoll */

void lf__bell_epoll_add(int epfd, int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || !(atomic_load(&f->flags) & LF_F_UNCONFIRMED))
		return;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT,
				  .data.u64 = LF_BELL_TAG | (uint64_t)f->bell_gen << 16 | (uint16_t)fd };
	lf__sys_epoll_ctl(epfd, EPOLL_CTL_ADD, f->bell, &ev);
}

int lf__bell_epoll_filter(struct epoll_event *ev, int n)
{
	int k = 0;

	if (!lf__bells_used)
		return n;
	for (int i = 0; i < n; i++) {
		if ((ev[i].data.u64 & 0xffffffff00000000ull) == LF_BELL_TAG) {
			int fd = (int)(ev[i].data.u64 & 0xffff);
			struct lf_fd *f = lf__fd(fd);
			if (f && f->bell_gen == (uint16_t)(ev[i].data.u64 >> 16))
				rang(fd, (int)ev[i].events); /* one-shot: it rang once */
			continue;
		}
		ev[k++] = ev[i];
	}
	return k;
}
