/* Leaving the tier (docs/shm.md, "Leaving the tier"): a connection whose
 * socket goes to a holder that cannot read the rings (SCM_RIGHTS to a
 * process without loopfast: shm_pass.c) moves onto its Unix stream first,
 * with no byte lost, doubled or reordered.
 *
 * Only a socket's peer can put bytes on its receive queue, so the end
 * that leaves (the reader here) asks its peer's writer: it stops reading
 * its ring, stores LF_LEAVE_ASK in the ring's leave word and sends
 * LF_BYTE_ASK (a wake-up: a peer that reads or polls the socket meets
 * it; one that writes meets the word). The writer answers
 * (lf__shm_io_answer): LF_LEAVE_COPY, and on the stream, after every
 * token it rang, LF_BYTE_COPY and then the bytes its reader has not read,
 * copied out of the ring; its writes go on the stream from then on. The
 * reader takes the stream up to that byte (tokens and edge bytes only
 * before it), so what follows on its socket is the bytes in order. Then
 * its own writes leave: LF_BYTE_LEFT after its last ring byte and token;
 * the peer reads its ring to the end, meets that byte
 * (lf__shm_io_met_leave) and reads the stream from there. Both ends are
 * then on the Unix stream (OFF).
 *
 * Bounded: a peer that does not answer within LF_SHM_ANSWER_NS (stopped,
 * or it never reads, writes or polls the socket) leaves the request withdrawn
 * and the connection as it was; the caller refuses (EOPNOTSUPP). A peer
 * that answered and whose copy does not come whole within COPY_NS, or
 * that sends anything else before it, resets the connection; so does a
 * writer whose copy does not fit its stream at once. */
#include "internal.h"
#include "shm.h"
#include "shm_conn.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COPY_NS 1000000000ull  /* its copy, once it answered */
#define SLICE_NS 10000000ull

/* All of v[0..n) on the stream, never waiting: if it does not fit, the
 * socket's send buffer is raised for the moment (a copy of a ring as
 * large as SO_SNDBUF allows, with the kernel's overhead per buffer, may
 * not fit an empty stream). What still does not fit is not waited for:
 * the answer may come in a non-blocking read or poll, and a peer that
 * asks and then reads nothing would hold that call (the caller resets
 * the connection instead). */
static bool send_all(int fd, struct iovec *v, size_t n)
{
	struct msghdr m = { .msg_iov = v, .msg_iovlen = n };
	int old = 0;
	socklen_t l = sizeof(old);
	bool raised = false, ok = false;

	for (;;) {
		ssize_t r = lf__sys_sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		for (size_t put = r > 0 ? (size_t)r : 0; put && m.msg_iovlen;) {
			size_t d = put < m.msg_iov->iov_len ? put : m.msg_iov->iov_len;
			m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + d;
			m.msg_iov->iov_len -= d;
			put -= d;
			if (!m.msg_iov->iov_len)
				m.msg_iov++, m.msg_iovlen--;
		}
		while (m.msg_iovlen && !m.msg_iov->iov_len)
			m.msg_iov++, m.msg_iovlen--;
		if (!m.msg_iovlen) {
			ok = true;
			break;
		}
		if (r < 0 && errno != EAGAIN && errno != EINTR)
			break;
		if (r < 0 && errno == EAGAIN && !raised && !lf__sys_getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &old, &l)) {
			raised = true;
			lf__sys_setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){ INT_MAX / 2 }, sizeof(int));
			continue;
		}
		if (r < 0 && errno == EAGAIN)
			break;
	}
	if (raised) { /* the kernel doubles what it is given */
		int half = old / 2;
		if (lf__sys_setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &half, sizeof(half)))
			lf__sys_setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &half, sizeof(half));
	}
	return ok;
}

/* Under txl: this end's writes leave the ring. No token of its may
 * follow `mark` on the stream: the flag goes first, then the bells of
 * pushes already made are waited for (a push counts itself under txl, a
 * flush counts itself before it reads the flag: either this sees the
 * count, or the other sees the flag), then the token the socket had no
 * room for goes. With copy (the reader asked, and reads no more), the
 * bytes it has not read follow the mark. false: the stream did not take
 * them (the caller resets the connection). */
static bool tx_leave(struct lf_shm_conn *c, int fd, char mark, bool copy)
{
	char t = LF_BYTE_TOKEN;
	struct iovec v[3] = { { &mark, 1 } };
	size_t n = 1;

	atomic_store(&c->tx_left, true);
	while (atomic_load(&c->ringing))
		sched_yield(); /* a push between its txl and its bell: a system call away */
	lf__shm_set_full(c, false);
	if (atomic_exchange(&c->unsent, false) && lf__sys_sendto(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0) != 1)
		return false;
	if (copy) {
		lf__ring_sync(&c->tx, false);
		uint64_t head = atomic_load(&c->tx.h->head), len = c->tx.pos - head;
		uint32_t size = lf__ring_size(&c->tx);
		if (!size || len > size)
			return false; /* the reader's head is garbage */
		uint64_t at = head & (size - 1), first = len < size - at ? len : size - at;
		v[n++] = (struct iovec){ c->tx.data + at, (size_t)first };
		v[n++] = (struct iovec){ c->tx.data, (size_t)(len - first) };
	}
	return send_all(fd, v, n);
}

void lf__shm_io_answer(struct lf_shm_conn *c, int fd)
{
	uint32_t ask = LF_LEAVE_ASK;

	atomic_store(&c->asked, false);
	pthread_mutex_lock(&c->txl);
	/* Not after urgent data (its mark is in the ring, its signal on the
	 * stream), nor while another process holds this end (lf__shm_alone:
	 * it may write the ring after the copy, into a ring nobody reads): the
	 * request stays unanswered, and the reader withdraws it. */
	bool answer = atomic_load(&c->state) == ON && !atomic_load(&c->tx_left) && !atomic_load(&c->tx.h->urg) &&
		      lf__shm_alone(c) &&
		      atomic_compare_exchange_strong(&c->tx.h->leave, &ask, LF_LEAVE_COPY);
	if (answer)
		lf__sys_futex((uint32_t *)&c->tx.h->leave, FUTEX_WAKE, INT_MAX, NULL);
	bool ok = !answer || tx_leave(c, fd, LF_BYTE_COPY, true);
	pthread_mutex_unlock(&c->txl);
	if (!ok)
		lf__shm_broken(c, fd);
}

int lf__shm_io_met_leave(struct lf_shm_conn *c, int fd)
{
	char b;

	if (!atomic_load(&c->tx_left)) /* a writer leaves only after this end answered its request */
		return lf__shm_broken(c, fd);
	lf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);
	atomic_store(&c->rx.h->leave, LF_LEAVE_DONE);
	lf__shm_set_state(c, OFF);
	return 0;
}

/* Under rxl: a server has read what its client wrote on the stream
 * before the switch. One that has not read since (a dispatcher that
 * passes what it accepts) learns it here when the client wrote nothing
 * more than it took, as its next read would (server_stream, shm_io.c). */
static bool stream_read(struct lf_shm_conn *c)
{
	if (c->server && !c->stream_done && atomic_load_explicit(&c->rx.h->switched, memory_order_acquire) &&
	    atomic_load(&c->rx.h->pre) == c->stream_in)
		c->stream_done = true;
	return !c->server || c->stream_done;
}

/* This end's ring read to its end (the caller took the tokens owed:
 * lf__shm_io_spent): the leave's bytes that stand next on its stream are
 * no data either. A request (answered, or withdrawn) is taken off, and
 * after an answer so is the peer's LF_BYTE_LEFT, met (OFF). Left there,
 * they were unread bytes at the last close, and the kernel reset the
 * connection where TCP gives the end (its holder now may be a program
 * without loopfast); and a pass of this end asked a peer that answers
 * nothing any more. true: OFF now. */
bool lf__shm_leave_met(struct lf_shm_conn *c, int fd)
{
	bool off = false;
	char b;

	pthread_mutex_lock(&c->rxl);
	lf__ring_sync(&c->rx, true);
	if (stream_read(c) && lf__ring_avail(&c->rx) == 0 && !atomic_load(&c->rx.h->bell) && lf__shm_io_skip_edges(c, fd, &b) == 1 &&
	    b == LF_BYTE_LEFT && atomic_load(&c->tx_left) && lf__ring_avail(&c->rx) == 0 && !atomic_load(&c->rx.h->bell))
		off = !lf__shm_io_met_leave(c, fd);
	pthread_mutex_unlock(&c->rxl);
	return off;
}

/* The peer's end held by this process too (a program that connects to
 * itself and passes one end): answered here, since no call of it may
 * come while this one waits. Known by the memfd's inode and the other
 * side's end; held as a call holds it. Not through a number that names
 * another file, or none, here: a vfork child's table is its parent's,
 * whose descriptors it may have closed (its parent's other threads
 * answer then). */
static void answer_here(struct lf_shm_conn *c)
{
	int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED);

	for (int fd = 0; fd <= hi; fd++) {
		struct lf_shm_conn *p = lf__shm_conn_of(fd) ? lf__shm_use(fd) : NULL;
		if (!p)
			continue;
		bool peer = p != c && p->server != c->server && p->mfd_ino == c->mfd_ino && p->mfd >= 0;
		if (peer && atomic_load(&p->tx.h->leave) == LF_LEAVE_ASK && lf__shm_ours(fd, p->kept_ino))
			lf__shm_io_answer(p, fd);
		lf__shm_done(fd);
		if (peer)
			return;
	}
}

/* The request, under rxl: 1 answered, 0 not (withdrawn: the connection
 * as it was). A peer that asks this end at the same time is answered
 * meanwhile (each waits for the other). */
static int ask(struct lf_shm_conn *c, int fd)
{
	uint64_t end = lf__sys_now_ns() + LF_SHM_ANSWER_NS;
	char a = LF_BYTE_ASK;

	atomic_store(&c->rx.h->leave, LF_LEAVE_ASK);
	atomic_fetch_add(&c->rx.h->space_seq, 1); /* a writer that waits for room looks again */
	lf__sys_futex((uint32_t *)&c->rx.h->space_seq, FUTEX_WAKE, INT_MAX, NULL);
	lf__sys_sendto(fd, &a, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0); /* best effort: the word is the request */
	answer_here(c);
	for (;;) {
		uint32_t v = atomic_load(&c->rx.h->leave);
		if (v == LF_LEAVE_COPY)
			return 1;
		if (v != LF_LEAVE_ASK)
			return 0; /* the peer's garbage */
		if (atomic_load(&c->tx.h->leave) == LF_LEAVE_ASK)
			lf__shm_io_answer(c, fd);
		int rev = lf__sys_poll1(fd, 0, 0), ms = lf__sys_ms_until(end);
		if (!ms || (rev > 0 && (rev & (POLLHUP | POLLERR)))) {
			uint32_t want = LF_LEAVE_ASK;
			if (atomic_compare_exchange_strong(&c->rx.h->leave, &want, LF_LEAVE_NONE))
				return 0;
			continue; /* answered just now */
		}
		struct timespec ts = { 0, (long)(ms * 1000000ull < SLICE_NS ? ms * 1000000ull : SLICE_NS) };
		lf__sys_futex((uint32_t *)&c->rx.h->leave, FUTEX_WAIT, LF_LEAVE_ASK, &ts);
	}
}

/* After the answer, under rxl: the stream up to and including the copy's
 * byte is taken off (tokens, edge bytes, the peer's own request before
 * it). 1, or -1: the peer's garbage, its end, or no copy in time. */
static int through_copy(struct lf_shm_conn *c, int fd)
{
	uint64_t end = lf__sys_now_ns() + COPY_NS;
	char buf[256];

	for (;;) {
		ssize_t r = lf__sys_recvfrom(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT, NULL, NULL);
		if (r > 0) {
			bool asked = false;
			long k = lf__leave_scan(buf, (size_t)r, &asked);
			if (asked)
				atomic_store(&c->asked, true);
			if (k < 0)
				return -1;
			lf__sys_recvfrom(fd, buf, k ? (size_t)k : (size_t)r, MSG_DONTWAIT, NULL, NULL);
			if (k)
				return 1;
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			return -1;
		int ms = lf__sys_ms_until(end);
		if (!ms)
			return -1;
		lf__sys_poll1(fd, POLLIN, ms);
	}
}

/* Until end: whether c's locks are free now (none taken). Not while this
 * thread holds one: a signal handler that interrupted a call of its
 * thread on the connection (dup2 is async-signal-safe: a handler's dup2
 * onto stderr waited for ever on the lock its thread held), told by the
 * owner glibc records in every mutex it locks; nor while another thread
 * holds one that long. */
static bool locks_free(struct lf_shm_conn *c, uint64_t end)
{
	pid_t self = gettid();

	if (c->txl.__data.__owner == self || c->rxl.__data.__owner == self)
		return false;
	for (;;) {
		if (!pthread_mutex_trylock(&c->txl)) {
			bool rx = !pthread_mutex_trylock(&c->rxl);
			if (rx)
				pthread_mutex_unlock(&c->rxl);
			pthread_mutex_unlock(&c->txl);
			if (rx)
				return true;
		}
		if (lf__sys_now_ns() >= end)
			return false;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
}

bool lf__shm_leave_for_stdio(int fd)
{
	struct lf_shm_conn *c = lf__shm_conn_of(fd) ? lf__shm_use(fd) : NULL;
	bool left = true;

	if (c) { /* a client before its answer waits for it, as a pass does */
		uint64_t end = lf__sys_now_ns() + LF_SHM_ANSWER_NS;
		if (!locks_free(c, end)) {
			lf__shm_done(fd);
			errno = EOPNOTSUPP;
			return false;
		}
		lf__shm_decide_by(c, fd, end);
		/* A fork's child that dup2s the socket onto its stdin and
		 * stdout before an exec (inetd's way) shares the end with its
		 * parent until the parent closes its copy, at once as a rule:
		 * waited for, as long. */
		while (atomic_load(&c->state) == ON && !lf__shm_alone(c) && lf__sys_now_ns() < end)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		left = atomic_load(&c->state) == OFF || lf__shm_leave(c, fd);
		lf__shm_done(fd);
	}
	if (!left)
		errno = EOPNOTSUPP;
	return left;
}

bool lf__shm_leave(struct lf_shm_conn *c, int fd)
{
	lf__shm_decide(c, fd);
	/* Urgent data either way, a server still reading the client's
	 * stream bytes before the switch, another process that holds this
	 * end (lf__shm_alone): not left (the caller refuses, as before). */
	if (atomic_load(&c->state) != ON || atomic_load(&c->rx.h->urg) || atomic_load(&c->tx.h->urg) ||
	    !lf__shm_alone(c))
		return false;
	if (atomic_load(&c->tx_left)) { /* this end answered: its peer leaves, and answers no request */
		lf__shm_io_spent(c, fd);
		return lf__shm_leave_met(c, fd); /* not while its ring holds bytes: only the peer could copy them */
	}
	pthread_mutex_lock(&c->rxl); /* this end's reads stop: the peer copies from its head */
	if (!stream_read(c)) {
		pthread_mutex_unlock(&c->rxl);
		return false;
	}
	int r = ask(c, fd);
	if (r > 0)
		r = through_copy(c, fd);
	if (r > 0 && atomic_load(&c->asked))
		lf__shm_io_answer(c, fd); /* the peer leaves at the same time */
	if (r > 0) {
		pthread_mutex_lock(&c->txl);
		if (!atomic_load(&c->tx_left) && !tx_leave(c, fd, LF_BYTE_LEFT, false))
			r = -1;
		pthread_mutex_unlock(&c->txl);
	}
	if (r > 0) {
		atomic_store(&c->rx.h->leave, LF_LEAVE_DONE);
		lf__shm_set_state(c, OFF);
	}
	pthread_mutex_unlock(&c->rxl);
	if (r < 0)
		lf__shm_broken(c, fd);
	return r > 0;
}
