/* The shared-memory tier's reads and writes and their waits (shm.c holds
 * the connection's state and the switch; docs/shm.md the argument).
 *
 * The doorbell: the socket holds one token byte exactly while a ring holds
 * data (plus tokens in flight), so that the kernel's own poll, select and
 * epoll on the socket say POLLIN when, and only when, a read would find
 * data or the end. The writer rings (bell 0 -> 1, then one byte) after it
 * published bytes; the reader, having emptied the ring, clears the bell
 * and reads one token, unless the ring filled again and it could re-own
 * the token (bell 0 -> 1). Store-then-load on both sides (Dekker), so a
 * push is never left without its token.
 *
 * Spinning (docs/shm.md): a writer whose reader polls waits a moment for
 * it to take the bytes rather than ring, and a non-blocking
 * read of an empty ring looks at the socket only when something may have
 * come since its last look: shm_spin.c.
 *
 * Room: a writer that finds its ring full waits on a futex in the shared
 * page, in slices, looking at the socket for the peer's end between them;
 * the reader wakes it after making room. */
#include "internal.h"
#include "shm.h"
#include "shm_conn.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <sched.h>

#define IOV_MAX_SHM 64
#define TOKEN LF_BYTE_TOKEN
#define EDGE LF_BYTE_EDGE
#define URGENT 'u' /* the urgent signal's byte (its value is the ring's, at the mark) */

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	return lf__sys_futex((uint32_t *)w, op, val, ts);
}

/* ---- urgent data (docs/shm.md, "Urgent data")
 *
 * The urgent byte goes into the ring like any other, at the mark: the
 * writer stores the mark (urg: 1 + its position) before the byte, so that
 * a reader never reads past a mark it has not seen, and before the byte
 * it puts one MSG_OOB byte (URGENT) on the socket, the signal, unless one
 * is there already (urg_sig says which mark it stands for): the kernel
 * then gives POLLPRI and SIGURG. recv(MSG_OOB) and SIOCATMARK answer from
 * the ring. The reader takes the signal off (recv MSG_OOB) once the mark
 * is read past or its byte read with MSG_OOB. A signal on the socket must
 * never be met by a plain read of tokens there: the kernel drops an
 * urgent byte a read finds first, or (SO_OOBINLINE) hands it over as
 * data; the reader's looks at the socket, once urgent data was sent,
 * check that none is ahead of what they take (signal_ahead). */

/* The kernel's urgent byte is at the head of fd's queue (SIOCATMARK: the
 * head, or just behind a spent one, and POLLPRI: there is one): a read
 * would meet it first. */
static bool signal_ahead(int fd)
{
	int at = 0;

	if (lf__sys_ioctl(fd, SIOCATMARK, &at) < 0 || !at)
		return false;
	return lf__sys_poll1(fd, POLLPRI, 0) > 0;
}

static bool urgent_ever(const struct lf_shm_conn *c)
{
	return atomic_load_explicit(&c->rx.h->urg, memory_order_relaxed) != 0;
}

/* The reader, under rxl: mark u's byte was read past or read with
 * MSG_OOB, so its signal goes, unless it stands for a later mark now.
 * The kernel leaves an empty record where it was; one at the head goes
 * too (a read would take it), so that epoll does not say POLLIN for it.
 * Nothing can come ahead of either meanwhile: the writer sends a signal
 * only from urg_sig 0, which is stored after. */
static void take_signal(struct lf_shm_conn *c, int fd, uint64_t u)
{
	uint64_t want = u;
	int inl = 0, at = 0;
	socklen_t l = sizeof(inl);
	char b;

	if (!atomic_compare_exchange_strong(&c->rx.h->urg_sig, &want, LF_URG_TAKING))
		return;
	/* SO_OOBINLINE hides it from MSG_OOB: off for the moment. */
	if (!lf__sys_getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &inl, &l) && inl)
		lf__sys_setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &(int){ 0 }, sizeof(int));
	lf__sys_recvfrom(fd, &b, 1, MSG_OOB | MSG_DONTWAIT, NULL, NULL);
	if (inl)
		lf__sys_setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &inl, sizeof(int));
	if (!lf__sys_ioctl(fd, SIOCATMARK, &at) && at)
		lf__sys_recvfrom(fd, &b, 0, MSG_DONTWAIT, NULL, NULL);
	atomic_store(&c->rx.h->urg_sig, 0);
}

/* The reader, under rxl, after it took a token: empty records the kernel
 * left for signals taken off (behind the token then) go once at the
 * head, as a read would take them, so that epoll does not say POLLIN
 * for them. Only while no signal is on the socket (urg_sig 0, held
 * taken meanwhile, and none ahead: a plain read would drop it). */
static void drop_empty(struct lf_shm_conn *c, int fd)
{
	uint64_t zero = 0;
	int at = 0;
	char b;

	if (!urgent_ever(c) || !atomic_compare_exchange_strong(&c->rx.h->urg_sig, &zero, LF_URG_TAKING))
		return; /* a signal's taking drops them */
	for (int i = 0; i < 4 && !lf__sys_ioctl(fd, SIOCATMARK, &at) && at && lf__sys_poll1(fd, POLLPRI, 0) == 0; i++)
		lf__sys_recvfrom(fd, &b, 0, MSG_DONTWAIT, NULL, NULL);
	atomic_store(&c->rx.h->urg_sig, 0);
}

/* The reader, under rxl, tx synced: the mark not yet read past (0: none),
 * or LF_URG_TAKING for garbage (a mark more than a ring ahead). */
static uint64_t pending_mark(struct lf_shm_conn *c)
{
	uint64_t u = atomic_load(&c->rx.h->urg);

	if (!u || u - 1 < c->rx.pos)
		return 0;
	return u - 1 - c->rx.pos > lf__ring_size(&c->rx) ? LF_URG_TAKING : u;
}

static bool oobinline(int fd)
{
	int v = 0;
	socklen_t l = sizeof(v);

	return !lf__sys_getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &v, &l) && v;
}

/* ---- reading */

/* A call's iovec, IOV_MAX_SHM pieces at a time (the window the ring
 * copies use: v, n, len); more and rest: the pieces after the window and
 * their bytes, loaded once the window is done (cur_skip), so that a
 * blocking writev of any length sends it all and MSG_WAITALL fills it
 * all, as over TCP. */
struct cur {
	struct iovec v[IOV_MAX_SHM];
	size_t n, len;
	const struct iovec *more;
	size_t nmore, rest;
	bool bad; /* a piece or the sum past SSIZE_MAX: the kernel's EINVAL */
};

/* MSG_TRUNC: TCP discards the bytes (the buffer may be NULL), so they
 * are read into scratch, a window of 64 pieces of it at a time (more
 * NULL, rest the bytes left; the Unix-stream fast path's too, io.c's
 * discard). One buffer for every thread (nothing is read back from it): a
 * thread-local one would add 64 KiB to every thread's static TLS, and
 * glibc then refuses threads with small stacks (mariadbd's timer thread:
 * "Can't initialize timers"). */
static char scratch[65536];

size_t lf__scratch_iov(struct iovec *v, size_t max, size_t bytes, size_t *n)
{
	size_t len = 0;

	for (*n = 0; *n < max && len < bytes; ++*n) {
		v[*n] = (struct iovec){ scratch, bytes - len < sizeof(scratch) ? bytes - len : sizeof(scratch) };
		len += v[*n].iov_len;
	}
	return len;
}

static void cur_load(struct cur *k)
{
	if (!k->more) { /* every piece names scratch: a peek sees up to 4 MiB, as TCP's all */
		k->len = lf__scratch_iov(k->v, IOV_MAX_SHM, k->rest, &k->n);
		k->rest -= k->len;
		return;
	}
	do {
		k->n = k->nmore < IOV_MAX_SHM ? k->nmore : IOV_MAX_SHM;
		k->len = 0;
		for (size_t i = 0; i < k->n; i++) {
			k->v[i] = k->more[i];
			if (k->v[i].iov_len > k->rest - k->len) /* LF_MAX_RW's cut (cur_init) */
				k->v[i].iov_len = k->rest - k->len;
			k->len += k->v[i].iov_len;
		}
		k->more += k->n;
		k->nmore = k->rest == k->len ? 0 : k->nmore - k->n;
		k->rest -= k->len;
	} while (!k->len && k->nmore);
}

static void cur_init(struct cur *k, const struct iovec *iov, size_t n)
{
	k->more = iov; /* not k = (struct cur){...}: that clears all 64 pieces, on every call */
	k->nmore = n;
	k->rest = 0;
	k->bad = false;
	for (size_t i = 0; i < n; i++) {
		k->bad = k->bad || iov[i].iov_len > (size_t)SSIZE_MAX - k->rest;
		k->rest += iov[i].iov_len;
	}
	if (k->rest > LF_MAX_RW) /* the kernel's call moves at most that */
		k->rest = LF_MAX_RW;
	cur_load(k);
}

/* Bytes left in the whole call, the window's and the rest's. */
static size_t cur_left(const struct cur *k)
{
	return k->len + k->rest;
}

/* Takes by bytes off the front; true when that loaded the next window. */
static bool cur_skip(struct cur *k, size_t by)
{
	size_t i = 0;

	k->len -= by;
	while (i < k->n && by >= k->v[i].iov_len)
		by -= k->v[i++].iov_len;
	memmove(k->v, k->v + i, (k->n - i) * sizeof(k->v[0]));
	k->n -= i;
	if (k->n) {
		k->v[0].iov_base = (char *)k->v[0].iov_base + by;
		k->v[0].iov_len -= by;
	}
	if (k->len || !k->rest)
		return false;
	cur_load(k);
	return true;
}

/* The iovec of the first `len` bytes of k (for a read that must stop there). */
static size_t cur_trunc(const struct cur *k, size_t len, struct iovec *out)
{
	size_t n = 0;

	for (size_t i = 0; i < k->n && len; i++, n++) {
		out[n] = k->v[i];
		if (out[n].iov_len > len)
			out[n].iov_len = len;
		len -= out[n].iov_len;
	}
	return n;
}

static ssize_t stream_read(int fd, const struct cur *k, size_t len, int flags)
{
	struct iovec v[IOV_MAX_SHM];
	struct msghdr m = { .msg_iov = v, .msg_iovlen = cur_trunc(k, len, v) };

	return lf__sys_recvmsg(fd, &m, flags | MSG_DONTWAIT);
}

/* Takes one token off the socket: the one a push committed to (bell was
 * 1), which is there or about to be. One not there yet (its writer is
 * between its bell and its byte: descheduled, stopped) is owed: taken when
 * it comes (read_once), never waited for. 0, or LF_RING_BAD. Without edge
 * bytes (no ET registration asked for them) the token is the socket's
 * first byte: one read takes it. */
static int take_token(struct lf_shm_conn *c, int fd)
{
	char b;
	/* The page's word, not this process's copy: after a fork, the other
	 * process's ET registration turns edges on for both. */
	bool edges = atomic_load_explicit(&c->rx.h->edges, memory_order_relaxed) || urgent_ever(c);
	ssize_t r = edges ? lf__shm_io_skip_edges(c, fd, &b) : lf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);

	if (r == 1 && !edges && b == LF_BYTE_ASK) { /* the peer's request to leave (shm_leave.c) came first */
		atomic_store(&c->asked, true);
		edges = true;
		r = lf__shm_io_skip_edges(c, fd, &b);
	}
	if (r == 1) {
		if (b != TOKEN)
			return LF_RING_BAD;
		if (edges) {
			lf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);
			lf__shm_io_skip_edges(c, fd, &b); /* those of pushes this reader has read */
			drop_empty(c, fd);
		}
		return 0;
	}
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		c->owed++;
	lf__shm_io_end_seen(c, fd, r, true);
	return 0; /* or the peer is gone: its end will be read */
}

/* A reset, once seen, is TCP_INFO's state CLOSE for good (sockopt.c),
 * though its error is read once. */
static void reset_seen(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (f)
		atomic_fetch_or(&f->flags, LF_F_RESET);
}

void lf__shm_io_end_seen(struct lf_shm_conn *c, int fd, ssize_t r, bool keep)
{
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
		atomic_store_explicit(&c->end_seen, true, memory_order_relaxed);
	if (r < 0 && errno == ECONNRESET) {
		if (keep)
			lf__err_keep(fd, ECONNRESET);
		reset_seen(fd);
	}
}

/* Edge bytes (EDGE) come only while the reader asked for them (an epoll ET
 * registration), one for each push that found the bell set: they stand
 * for no bytes of the ring, and are taken wherever the reader looks at the
 * socket. Two batches a call at most (the second finds what follows a
 * full first one: the end, a token): a peer that keeps sending them cannot
 * hold the reader here. */
ssize_t lf__shm_io_skip_edges(struct lf_shm_conn *c, int fd, char *next)
{
	char buf[256];
	bool urgent = urgent_ever(c);

	for (int batch = 0; batch < 2; batch++) {
		ssize_t r = lf__sys_recvfrom(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT, NULL, NULL), k = 0;
		if (r <= 0)
			return r;
		/* After the peek: what it saw is ahead of any signal sent
		 * since; one ahead of it keeps it where it is. */
		if (urgent && signal_ahead(fd))
			break;
		while (k < r && (buf[k] == EDGE || buf[k] == LF_BYTE_ASK)) {
			if (buf[k] == LF_BYTE_ASK) /* the peer's request to leave: answered after this look (shm_leave.c) */
				atomic_store(&c->asked, true);
			k++;
		}
		if (k)
			lf__sys_recvfrom(fd, buf, (size_t)k, MSG_DONTWAIT, NULL, NULL);
		if (k < r) {
			*next = buf[k];
			return 1;
		}
	}
	errno = EAGAIN;
	return -1;
}

/* The reader found its ring empty: clear the bell, and with it the token,
 * unless the ring filled again meanwhile (Dekker: the writer stores tail
 * then loads bell; we store bell then load tail). Under rxl. */
static int settle(struct lf_shm_conn *c, int fd, bool linger)
{
	uint32_t b = atomic_load(&c->rx.h->bell), zero = 0;

	if (b == 0) {
		lf__shm_mem_idle(c);
		return 0;
	}
	if (b != 1)
		return LF_RING_BAD;
	if (linger && lf__shm_spin_linger(c))
		return 0; /* the token stays, for the bytes that came (shm_spin.c) */
	if (linger)
		c->emptied++; /* the ring stays empty: shm_mem.c's pace counts it */
	atomic_store(&c->rx.h->bell, 0);
	atomic_thread_fence(memory_order_seq_cst);
	long a = lf__ring_avail(&c->rx);
	if (a < 0)
		return LF_RING_BAD;
	if (a > 0 && atomic_compare_exchange_strong(&c->rx.h->bell, &zero, 1))
		return 0; /* the token stays, for the bytes now there */
	int r = take_token(c, fd);
	lf__shm_mem_idle(c); /* empty: its pages go back (shm_mem.c) */
	return r;
}

/* A token can outlive the bytes it stood for: its writer rang after the
 * read that took them had found the bell clear (a writer that waited for
 * a hand-off that came too late, or one descheduled between its tail and
 * its bell), or it was owed and came after. Until a read finds the ring
 * empty and takes it, the socket holds a byte for nothing: poll and
 * select said POLLIN where a read would wait (shm.c, poll_fix), and over
 * the last close the kernel took it for an unread byte and reset the
 * peer, where TCP, with every byte read, gives it EOF (seen under load:
 * the peer's next read said ECONNRESET; shm.c, lf__shm_hold). So there,
 * with the ring empty, such tokens are taken first, as a read that finds
 * the ring empty takes them; never data: a ring that holds bytes (or a
 * server's stream bytes before the switch) keeps its token. Takes rxl. */
void lf__shm_io_spent(struct lf_shm_conn *c, int fd)
{
	char b;

	if (c->server && !c->stream_done)
		return;
	pthread_mutex_lock(&c->rxl);
	lf__ring_sync(&c->rx, true);
	if (lf__ring_avail(&c->rx) == 0 && settle(c, fd, false) == 0)
		while (c->owed && lf__shm_io_skip_edges(c, fd, &b) == 1 && b == TOKEN) {
			/* After the peek, as read_once: a push's token has its
			 * tail and its bell before it, so a token peeked with the
			 * ring empty and the bell clear is no push's. */
			if (lf__ring_avail(&c->rx) != 0 || atomic_load(&c->rx.h->bell) != 0)
				break;
			c->owed--;
			lf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);
			drop_empty(c, fd);
		}
	pthread_mutex_unlock(&c->rxl);
}

void lf__shm_wake_writer(struct lf_shm_conn *c)
{
	lf__shm_spin_room_light(); /* head, then want_space */
	if (atomic_load(&c->rx.h->want_space)) {
		atomic_store(&c->rx.h->want_space, 0);
		atomic_fetch_add(&c->rx.h->space_seq, 1);
		futex(&c->rx.h->space_seq, FUTEX_WAKE, INT_MAX, NULL);
	}
}

/* The server's reads of what the client wrote on the stream before its
 * switch. >=0 bytes, -1 errno (EAGAIN: nothing yet), or -2: done, read
 * the ring. */
static ssize_t server_stream(struct lf_shm_conn *c, int fd, const struct cur *k, int flags)
{
	for (int i = 0; i < 3; i++) {
		if (atomic_load_explicit(&c->rx.h->switched, memory_order_acquire)) {
			uint64_t pre = atomic_load(&c->rx.h->pre);
			if (pre < c->stream_in)
				return lf__shm_broken(c, fd);
			if (pre == c->stream_in) {
				c->stream_done = true;
				return -2;
			}
			size_t want = pre - c->stream_in < k->len ? (size_t)(pre - c->stream_in) : k->len;
			ssize_t r = stream_read(fd, k, want, flags & MSG_PEEK);
			if (r > 0 && !(flags & MSG_PEEK))
				c->stream_in += (uint64_t)r;
			return r;
		}
		ssize_t r = stream_read(fd, k, k->len, MSG_PEEK);
		if (r < 0 && errno != EAGAIN)
			return r;
		if (atomic_load_explicit(&c->rx.h->switched, memory_order_acquire))
			continue; /* what we peeked may end in a token: read up to pre */
		if (r <= 0 || (flags & MSG_PEEK))
			return r;
		r = stream_read(fd, k, (size_t)r, 0);
		if (r > 0)
			c->stream_in += (uint64_t)r;
		return r;
	}
	errno = EAGAIN;
	return -1;
}

/* How a read that finds its ring empty (and the bell clear) looks at the
 * socket, where the end, a late token or garbage would be. */
enum look { LOOK, LOOK_QUIET, LOOK_LATER };

#define AT_MARK (-3)
#define PEEK_PAST (-4)
#define LEFT (-5) /* the connection left the tier: the Unix stream's read */

/* The reader, under rxl, a bytes in rx: the bytes this read may take
 * (0: it took the urgent byte at the mark off, and may look again), or
 * AT_MARK (a read that has bytes stops there, as TCP's), LF_RING_BAD. A
 * read at the mark reads past it: the urgent byte is skipped (or, with
 * SO_OOBINLINE, read), and its signal goes. */
static long mark_limit(struct lf_shm_conn *c, int fd, long a, size_t copied, bool peek, bool *more)
{
	uint64_t u = pending_mark(c), pos = c->rx.pos;
	unsigned gone = 0;

	if (u == LF_URG_TAKING)
		return LF_RING_BAD;
	/* A byte read with MSG_OOB whose mark a later one moved is not read
	 * again as data (AF_UNIX's answer; TCP's gives it twice): reads go
	 * past it, without stopping there. */
	while (gone < c->nspent && c->spent[gone] < pos)
		gone++;
	memmove(c->spent, c->spent + gone, (c->nspent - gone) * sizeof(c->spent[0]));
	c->nspent -= gone;
	if (c->nspent && c->spent[0] - pos < (uint64_t)a && (!u || c->spent[0] != u - 1)) {
		if (c->spent[0] > pos) {
			*more = true;
			return (long)(c->spent[0] - pos);
		}
		if (peek)
			return PEEK_PAST;
		char b;
		struct iovec v = { &b, 1 };
		return lf__ring_read(&c->rx, &v, 1, 1, false) == 1 ? 0 : LF_RING_BAD;
	}
	if (!u)
		return a;
	if (u - 1 > c->rx.pos)
		return u - 1 - c->rx.pos < (uint64_t)a ? (long)(u - 1 - c->rx.pos) : a;
	if (copied)
		return AT_MARK;
	if (oobinline(fd)) {
		if (!peek && u != c->urg_done) {
			c->urg_done = u;
			take_signal(c, fd, u);
		}
		return a; /* the urgent byte is data: this read takes it */
	}
	if (peek)
		return PEEK_PAST;
	char b;
	struct iovec v = { &b, 1 };
	if (lf__ring_read(&c->rx, &v, 1, 1, false) != 1)
		return LF_RING_BAD;
	if (u != c->urg_done) {
		c->urg_done = u;
		take_signal(c, fd, u);
	}
	return 0;
}

/* One non-blocking read: >0 bytes, 0 the end, -1 errno (EAGAIN: wait).
 * An empty ring: LOOK looks at the socket; LOOK_QUIET (a non-blocking
 * read) only when something may have come (shm_spin.c); LOOK_LATER (a
 * blocking read, which then waits on the socket) does not. */
static ssize_t read_once(struct lf_shm_conn *c, int fd, const struct cur *k, int flags, enum look look, size_t copied,
			 bool *more)
{
	bool peek = flags & MSG_PEEK, spun = false;

	if (c->server && !c->stream_done) {
		ssize_t r = server_stream(c, fd, k, flags);
		if (r != -2)
			return r;
	}
	for (int tries = 0; tries < 3; tries++) {
		pthread_mutex_lock(&c->rxl);
		if (atomic_load(&c->state) == OFF) { /* another thread's leave while this one waited: its ring's bytes are on the stream now (shm_leave.c) */
			pthread_mutex_unlock(&c->rxl);
			return LEFT;
		}
		lf__ring_sync(&c->rx, true);
		long a = lf__ring_avail(&c->rx);
		if (a == 0 && settle(c, fd, false) == LF_RING_BAD)
			a = LF_RING_BAD;
		else if (a == 0)
			a = lf__ring_avail(&c->rx);
		if (a < 0) {
			pthread_mutex_unlock(&c->rxl);
			return lf__shm_broken(c, fd);
		}
		long lim = a > 0 ? mark_limit(c, fd, a, copied, peek, more) : a;
		if (lim == AT_MARK || lim == LF_RING_BAD) {
			pthread_mutex_unlock(&c->rxl);
			if (lim == LF_RING_BAD)
				return lf__shm_broken(c, fd);
			return AT_MARK;
		}
		if (lim == PEEK_PAST) { /* a peek at an urgent byte: what follows it, up to the next */
			struct iovec v[IOV_MAX_SHM + 1];
			char b;
			size_t n = k->n < IOV_MAX_SHM ? k->n : IOV_MAX_SHM;
			uint64_t u = pending_mark(c), pos = c->rx.pos;
			for (unsigned i = 0; i < c->nspent; i++)
				if (c->spent[i] > pos && c->spent[i] - pos < (uint64_t)a)
					a = (long)(c->spent[i] - pos);
			if (u && u != LF_URG_TAKING && u - 1 > pos && u - 1 - pos < (uint64_t)a)
				a = (long)(u - 1 - pos);
			v[0] = (struct iovec){ &b, 1 };
			memcpy(v + 1, k->v, n * sizeof(v[0]));
			size_t got = lf__ring_read(&c->rx, v, n + 1, (size_t)a, true);
			pthread_mutex_unlock(&c->rxl);
			if (got > 1)
				return (ssize_t)(got - 1);
			errno = EAGAIN;
			return -1;
		}
		if (a > 0 && lim == 0) { /* the urgent byte was skipped: the ring may be empty now */
			if (lf__ring_avail(&c->rx) == 0 && settle(c, fd, true) == LF_RING_BAD) {
				pthread_mutex_unlock(&c->rxl);
				return lf__shm_broken(c, fd);
			}
			lf__shm_wake_writer(c);
			pthread_mutex_unlock(&c->rxl);
			tries--;
			continue;
		}
		if (a > 0) {
			bool all = lim == a;
			a = lim;
			size_t want = (size_t)a < k->len ? (size_t)a : k->len;
			if (!peek && want == (size_t)a && all)
				lf__shm_spin_taking(c, c->rx.pos + want); /* the writer's hand-off needs no more */
			size_t got = lf__ring_read(&c->rx, k->v, k->n, want, peek);
			int s = 0;
			if (!peek && got == (size_t)a && all) {
				s = settle(c, fd, true);
			}
			if (!peek)
				lf__shm_wake_writer(c);
			pthread_mutex_unlock(&c->rxl);
			if (s == LF_RING_BAD)
				return lf__shm_broken(c, fd);
			return (ssize_t)got;
		}
		/* Empty, bell clear: the socket holds the end, a token of a push
		 * that raced us, one we owe, edge bytes, or nothing. */
		uint64_t now = look == LOOK_QUIET ? lf__sys_now_ns() : 0;
		if (look == LOOK_QUIET)
			lf__shm_spin_wake(c, now);
		if (look == LOOK_LATER || (look == LOOK_QUIET && lf__shm_spin_quiet(c, now))) {
			if (look == LOOK_QUIET && !spun && (spun = true) && lf__shm_spin_again(c, now)) {
				pthread_mutex_unlock(&c->rxl);
				tries--; /* bytes came while it looked: read them */
				continue;
			}
			pthread_mutex_unlock(&c->rxl);
			errno = EAGAIN;
			return -1;
		}
		char b;
		unsigned waits = atomic_load_explicit(&lf__shm_waits, memory_order_acquire);
		ssize_t r = lf__shm_io_skip_edges(c, fd, &b);
		if (r < 0 && errno == EAGAIN)
			lf__shm_spin_looked(c, waits);
		pthread_mutex_unlock(&c->rxl);
		if (r <= 0) {
			lf__shm_io_end_seen(c, fd, r, false);
			return r;
		}
		pthread_mutex_lock(&c->rxl);
		bool stray = lf__ring_avail(&c->rx) == 0 && atomic_load(&c->rx.h->bell) == 0;
		if (stray && b == LF_BYTE_LEFT) { /* the writer's ring bytes end here: the stream's from now on */
			int left = lf__shm_io_met_leave(c, fd);
			pthread_mutex_unlock(&c->rxl);
			return left < 0 ? left : LEFT;
		}
		bool owed = stray && c->owed;
		if (owed) {
			c->owed--;
			lf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);
			drop_empty(c, fd);
		}
		pthread_mutex_unlock(&c->rxl);
		if (stray && !owed)
			return lf__shm_broken(c, fd); /* a byte on the socket that no push explains */
	}
	/* Every byte looked at was explained (tokens owed, pushes that raced
	 * the look), three times: a writer that behaves can do that (owed
	 * tokens that came together). Nothing read: the caller looks again
	 * (a blocking read waits on the socket, which holds what came). */
	errno = EAGAIN;
	return -1;
}

/* Waits for POLLIN (read) or room (write) as a blocking call does: the
 * socket's timeout, ending at `end` (lf__sys_timeout_end(); 0: none), then EAGAIN;
 * signals (EINTR unless SA_RESTART and no timeout). 0: look again; -1:
 * errno. */
static int wait_fd(int fd, short ev, uint64_t end, unsigned s0, unsigned i0)
{
	int ms = end ? lf__sys_ms_until(end) : -1;
	int r = ev ? lf__sys_poll1(fd, ev, ms) : 0;
	if (r == 0 && ev) {
		if (lf__sys_now_ns() < end)
			return 0; /* a wait of INT_MAX ms that ended before the deadline */
		errno = EAGAIN;
		return -1;
	}
	if (r < 0 && errno != EINTR)
		return -1;
	if (atomic_load(&lf__sig_seen) != s0 && (atomic_load(&lf__sig_interrupt) != i0 || ms >= 0)) {
		errno = EINTR;
		return -1;
	}
	return 0;
}

/* A blocking read's wait with no timeout: the kernel's own blocking
 * recv, peeking one byte, so that the wake-up is a read's and the kernel
 * applies signals (EINTR, or a restart under SA_RESTART) as for the read
 * itself. A token, edge byte or answer, the end or an error end it; an
 * error is the read's answer (the peek took it), and so is EAGAIN: a
 * timeout the socket's flags did not know of (set through a dup or in
 * another process: the kernel's, renewed per wait), a file made
 * non-blocking there, a negative timeout, where TCP's read says EAGAIN
 * too. With SO_RCVTIMEO (end: the call's deadline, which the kernel's own
 * timeout would renew at each wait), or a signal that ran during the spin
 * before it: wait_fd's rules. 0: look again; -1: errno. */
static int wait_read(int fd, uint64_t end, unsigned s0, unsigned i0)
{
	char b;

	if (end || atomic_load(&lf__sig_seen) != s0)
		return wait_fd(fd, POLLIN, end, s0, i0);
	/* Due give-backs (shm_mem.c): a slice of poll first, then the sweep.
	 * A signal in it: look again (the next wait takes wait_fd's rules). */
	if (atomic_load_explicit(&lf__shm_due, memory_order_relaxed)) {
		int r = lf__sys_poll1(fd, POLLIN, (int)(lf__shm_mem_slice(-1) / 1000000));
		if (r != 0)
			return r > 0 || errno == EINTR ? 0 : -1;
		lf__shm_mem_sweep();
	}
	return lf__sys_recvfrom(fd, &b, 1, MSG_PEEK, NULL, NULL) >= 0 ? 0 : -1;
}

/* lf__sys_timeout_end's SO_RCVTIMEO, for a socket that has one (no look
 * otherwise: a blocking read's wait is on the hot path). */
static uint64_t read_deadline(struct lf_fd *f, int fd)
{
	return atomic_load(&f->flags) & LF_F_RCVTIMEO ? lf__sys_timeout_end(fd, SO_RCVTIMEO) : 0;
}

static bool nonblocking(int fd, int flags)
{
	struct lf_fd *f = lf__fd(fd);
	return (flags & MSG_DONTWAIT) || (atomic_load(&f->flags) & LF_F_NONBLOCK);
}

/* Before a wait: nonblocking(), or a file that another
 * descriptor of it (a dup, another process) made non-blocking, whose
 * call TCP answers EAGAIN too (the descriptor's flag cannot know). */
static bool must_not_wait(int fd, int flags)
{
	return nonblocking(fd, flags) || lf__sys_file_nonblocking(fd);
}

/* After one slice of a wait (intr: a signal interrupted it): -1 and EINTR
 * for a signal whose handler interrupts (or any, with a timeout: as the
 * kernel's SO_RCVTIMEO/SO_SNDTIMEO waits), EAGAIN once `end` (0: none) has
 * passed; 0: look again. */
static int slice_end(bool intr, unsigned s0, unsigned i0, uint64_t end)
{
	if (intr && atomic_load(&lf__sig_seen) != s0 && (atomic_load(&lf__sig_interrupt) != i0 || end)) {
		errno = EINTR;
		return -1;
	}
	if (end && lf__sys_now_ns() >= end) {
		errno = EAGAIN;
		return -1;
	}
	return 0;
}

/* The i0 for a write's waits: one that has sent bytes returns them at any
 * handler's signal, SA_RESTART or not, as TCP's does (the kernel restarts
 * only a call that did nothing): a count of interrupting signals that
 * the waits then find moved. */
static unsigned restarts(size_t sent, unsigned i0)
{
	return sent ? atomic_load(&lf__sig_interrupt) - 1 : i0;
}

/* One slice (20 ms) of a wait for the word w to move from seq: between
 * slices the caller looks at the socket (the peer's end comes there). */
static int wait_slice(_Atomic uint32_t *w, uint32_t seq, unsigned s0, unsigned i0, uint64_t end)
{
	struct timespec ts = { 0, 20000000 };

	return slice_end(futex(w, FUTEX_WAIT, seq, &ts) < 0 && errno == EINTR, s0, i0, end);
}

/* SO_RCVLOWAT on a blocking read: wait until the ring holds `target`
 * bytes, or the end, an error, a signal or the timeout. The socket cannot
 * say it (its token stands for "not empty"), so the writer wakes a futex
 * after each push while the reader asks (want_data). 0: read now; -1:
 * errno. */
static int wait_mark(struct lf_shm_conn *c, int fd, size_t target, uint64_t end, unsigned s0, unsigned i0)
{
	for (;;) {
		uint32_t seq = atomic_load(&c->rx.h->data_seq);
		atomic_store(&c->rx.h->want_data, 1);
		atomic_thread_fence(memory_order_seq_cst);
		long a = lf__shm_avail(c);
		if (a < 0 || (size_t)a >= target)
			return 0; /* enough (or garbage: the read resets) */
		char b;
		ssize_t r = lf__sys_recvfrom(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL);
		lf__shm_io_end_seen(c, fd, r, true);
		if (r == 0 || (r < 0 && errno != EAGAIN))
			return 0; /* the end, or an error (kept): the read says which */
		if (wait_slice(&c->rx.h->data_seq, seq, s0, i0, end)) /* the peer's end comes on the socket */
			return -1;
	}
}

/* A blocking read that found its ring empty while the kernel's urgent
 * byte is ahead of what the socket holds (a writer stopped between its
 * signal and its byte, with another thread's token behind the signal, or
 * a peer that makes that state itself): the socket's wait ends at once
 * there, as it holds bytes, which the look leaves, so the read looped
 * without sleeping. It waits on the ring's futex instead, as wait_mark
 * (the writer wakes it after its push), in 20 ms slices between which it
 * looks whether the signal is still ahead and the peer still there. A
 * peer gone (POLLHUP, POLLERR) with the ring empty has left a signal
 * whose byte can never come: a reset (TCP would say the end; the page
 * promised a byte). 0: look again; -1: errno. */
static int wait_urgent(struct lf_shm_conn *c, int fd, uint64_t end, unsigned s0, unsigned i0)
{
	for (;;) {
		uint32_t seq = atomic_load(&c->rx.h->data_seq);
		atomic_store(&c->rx.h->want_data, 1);
		atomic_thread_fence(memory_order_seq_cst);
		if (lf__shm_avail(c) != 0 || !signal_ahead(fd))
			return 0; /* bytes (or garbage: the read resets), or the socket's wait will do */
		int rev = lf__sys_poll1(fd, 0, 0);
		if (rev > 0 && (rev & (POLLHUP | POLLERR)) && lf__shm_avail(c) == 0)
			return lf__shm_broken(c, fd);
		if (wait_slice(&c->rx.h->data_seq, seq, s0, i0, end))
			return -1;
	}
}

/* The socket's urgent byte is ahead of an empty ring: wait_urgent, not
 * the socket's wait. Only for connections whose writer sent urgent data. */
static bool signal_blocks(struct lf_shm_conn *c, int fd)
{
	return atomic_load(&c->state) == ON && urgent_ever(c) && lf__shm_avail(c) == 0 && signal_ahead(fd);
}

long lf__shm_io_unread(struct lf_shm_conn *c, long a)
{
	long n = a;

	pthread_mutex_lock(&c->rxl);
	uint64_t pos = atomic_load_explicit(&c->rx.h->head, memory_order_relaxed);
	for (unsigned i = 0; i < c->nspent; i++)
		if (c->spent[i] >= pos && c->spent[i] - pos < (uint64_t)a)
			n--;
	pthread_mutex_unlock(&c->rxl);
	return n > 0 ? n : 0;
}

/* recv(MSG_OOB): the byte at the mark, from the ring (TCP's answers:
 * EINVAL with none, with SO_OOBINLINE, or once it was read; EAGAIN while
 * its byte has not come). */
static ssize_t recv_urgent(struct lf_shm_conn *c, int fd, struct msghdr *m, int flags)
{
	struct cur k;

	cur_init(&k, m->msg_iov, m->msg_iovlen);
	if (oobinline(fd)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&c->rxl);
	lf__ring_sync(&c->rx, true);
	long a = lf__ring_avail(&c->rx);
	uint64_t u = pending_mark(c);
	uint32_t size = lf__ring_size(&c->rx);
	if (a < 0 || u == LF_URG_TAKING || !size) {
		pthread_mutex_unlock(&c->rxl);
		return lf__shm_broken(c, fd);
	}
	if (!u || u == c->urg_done || u - 1 - c->rx.pos >= (uint64_t)a) {
		pthread_mutex_unlock(&c->rxl);
		errno = u && u != c->urg_done ? EAGAIN : EINVAL;
		return -1;
	}
	char b = (char)c->rx.data[(c->rx.pos + (u - 1 - c->rx.pos)) & (size - 1)];
	if (!(flags & MSG_PEEK)) { /* read, whatever the buffer (TCP's tcp_recv_urg) */
		c->urg_done = u;
		bool known = false;
		for (unsigned i = 0; i < c->nspent; i++)
			known = known || c->spent[i] == u - 1; /* a peer that moved urg back and forth */
		if (!known && c->nspent == LF_SHM_SPENT) { /* the oldest is read as data (TCP's answer) */
			memmove(c->spent, c->spent + 1, (LF_SHM_SPENT - 1) * sizeof(c->spent[0]));
			c->nspent--;
		}
		if (!known)
			c->spent[c->nspent++] = u - 1;
		take_signal(c, fd, u);
	}
	pthread_mutex_unlock(&c->rxl);
	m->msg_flags = MSG_OOB;
	if (!k.len) {
		m->msg_flags |= MSG_TRUNC;
		return 0;
	}
	if (!(flags & MSG_TRUNC)) { /* MSG_TRUNC: counted, not copied (the buffer may be NULL) */
		struct iovec *v = k.v;
		while (!v->iov_len) /* k.len > 0: one has room */
			v++;
		*(char *)v->iov_base = b;
	}
	return 1;
}

/* SIOCATMARK: the reader is at the last mark. */
bool lf__shm_atmark(int fd, int *out)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (!c)
		return false;
	lf__shm_decide(c, fd);
	bool on = atomic_load(&c->state) == ON;
	if (on) {
		pthread_mutex_lock(&c->rxl);
		lf__ring_sync(&c->rx, true);
		uint64_t u = atomic_load(&c->rx.h->urg);
		*out = u && u - 1 == c->rx.pos && (!c->server || c->stream_done);
		pthread_mutex_unlock(&c->rxl);
	}
	lf__shm_done(fd);
	return on;
}

/* The descriptor was closed, or dup2'd over, by another thread while
 * this call held its connection (lf__shm_use): the number may name
 * another socket by now, which the call must never touch (before: a
 * blocked read woken by its peer's bytes took that socket's first byte
 * for a token and shut it down, a blocked write rang its bell there, 20
 * times in 20). */
static bool moved(const struct lf_shm_conn *c, struct lf_fd *f)
{
	return __atomic_load_n(&f->shm, __ATOMIC_SEQ_CST) != c;
}

/* What a read gets from the ring alone, its socket moved: the bytes
 * there (TCP's read gets those its socket got while it waited), else the
 * end if the peer's close or shutdown said it (fin), else EBADF. Urgent
 * marks and the server's stream before the switch are not looked at. */
static ssize_t read_ring_only(struct lf_shm_conn *c, const struct cur *k, int flags)
{
	pthread_mutex_lock(&c->rxl);
	lf__ring_sync(&c->rx, true);
	long a = lf__ring_avail(&c->rx);
	size_t want = a > 0 && (size_t)a < k->len ? (size_t)a : k->len;
	size_t got = a > 0 ? lf__ring_read(&c->rx, k->v, k->n, want, flags & MSG_PEEK) : 0;
	if (got && !(flags & MSG_PEEK))
		lf__shm_wake_writer(c);
	pthread_mutex_unlock(&c->rxl);
	if (got)
		return (ssize_t)got;
	if (a == 0 && (atomic_load(&c->rx.h->fin) & 1))
		return 0;
	errno = EBADF;
	return -1;
}

/* A read of 0 bytes, as TCP's (whose low-water mark is at least 1): 0
 * at once when anything is queued (an urgent byte too) or at the end, a
 * pending error; EAGAIN when non-blocking (the file's flag, which a dup
 * shares); else one wait, and 0 whatever ends it (bytes, the timeout, a
 * signal, SA_RESTART or not). A peek of 1 into scratch looks. LEFT: the
 * Unix stream's read. */
static ssize_t zero_read(struct lf_shm_conn *c, int fd, int flags)
{
	struct cur k = { .more = NULL, .rest = 1 };
	bool more = false;
	int e0 = errno;

	cur_load(&k);
	errno = EAGAIN;
	ssize_t r = atomic_load(&c->state) == UNDECIDED ? -1 : read_once(c, fd, &k, flags | MSG_PEEK, LOOK, 0, &more);
	if (r == LEFT || (r < 0 && r != AT_MARK && errno != EAGAIN))
		return r;
	if (r >= 0 || r == AT_MARK || lf__shm_avail(c) != 0)
		goto none;
	if (must_not_wait(fd, flags)) {
		errno = EAGAIN;
		return -1;
	}
	lf__shm_spin_sleep(c); /* a push rings the bell */
	uint64_t end = lf__sys_timeout_end(fd, SO_RCVTIMEO);
	if (lf__shm_avail(c) == 0)
		lf__sys_poll1(fd, POLLIN, end ? lf__sys_ms_until(end) : -1);
none:
	errno = e0;
	return 0;
}

static bool recv_held(struct lf_shm_conn *c, int fd, struct msghdr *m, int flags, ssize_t *ret)
{
	struct cur k;
	size_t total = 0;
	unsigned s0 = atomic_load(&lf__sig_seen), i0 = atomic_load(&lf__sig_interrupt);
	struct lf_fd *f = lf__fd(fd);
	bool shut = atomic_load(&f->flags) & LF_F_SHUT_RD;
	uint64_t end = 0; /* SO_RCVTIMEO's deadline, one for the call's waits (as TCP's): looked up at the first */

	if (!c || (flags & MSG_ERRQUEUE) || m->msg_iovlen > UIO_MAXIOV) /* the kernel's EINVAL */
		return false;
	lf__shm_decide(c, fd);
	int st = atomic_load(&c->state);
	if (st == OFF || st == BROKEN || ((flags & MSG_OOB) && st != ON))
		return false;
	if (flags & MSG_OOB) {
		int e0 = errno;
		*ret = recv_urgent(c, fd, m, flags);
		if (*ret >= 0)
			errno = e0;
		return true;
	}
	cur_init(&k, m->msg_iov, m->msg_iovlen);
	if (k.bad)
		return false; /* the Unix socket's EINVAL, before any byte */
	m->msg_flags = 0;
	if (!cur_left(&k)) {
		*ret = zero_read(c, fd, flags);
		return *ret != LEFT;
	}
	if (flags & MSG_TRUNC) { /* discarded: into scratch (cur_load) */
		k.rest = cur_left(&k);
		k.more = NULL;
		cur_load(&k);
	}
	int e0 = errno;
	lf__shm_io_flush(c, fd);
	static uint32_t lowat_bit;
	if (!lowat_bit)
		lowat_bit = lf__carried_bit(SO_RCVLOWAT);
	int lowat = 1;
	socklen_t ll = sizeof(lowat);
	if ((f->sockset & lowat_bit) && atomic_load(&c->state) == ON && (!c->server || c->stream_done) && !shut &&
	    !(flags & MSG_PEEK) && !nonblocking(fd, flags) && !lf__sys_getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &ll) &&
	    lowat > 1 && wait_mark(c, fd, (size_t)lowat < cur_left(&k) ? (size_t)lowat : cur_left(&k),
				   end = lf__sys_timeout_end(fd, SO_RCVTIMEO), s0, i0) < 0 && errno != EAGAIN) {
		*ret = -1;
		return true; /* (its timeout: what is there, as TCP's read, or EAGAIN below) */
	}
	bool nb = nonblocking(fd, flags), more = false;
	enum look look = nb ? LOOK_QUIET : shut ? LOOK : LOOK_LATER;
	for (;;) {
		ssize_t r;
		if (moved(c, f)) {
			r = read_ring_only(c, &k, flags);
			if (r < 0 && !total) {
				*ret = -1;
				return true;
			}
			total += r > 0 ? (size_t)r : 0;
			break;
		}
		if (atomic_load(&c->state) == UNDECIDED) {
			errno = EAGAIN;
			r = -1;
		} else {
			r = read_once(c, fd, &k, flags, look, total, &more);
		}
		if (atomic_load_explicit(&c->asked, memory_order_relaxed))
			lf__shm_io_answer(c, fd);
		if (r == LEFT) {
			if (total)
				break;
			errno = e0;
			return false;
		}
		if (r == AT_MARK)
			break; /* after bytes: they end at the mark */
		if (r > 0) {
			total += (size_t)r;
			bool next = cur_skip(&k, (size_t)r); /* the window filled: what else came goes in the next */
			if ((flags & MSG_PEEK) || !k.len || (!(flags & MSG_WAITALL) && !more && !next))
				break; /* more: it stopped before a spent urgent byte, and goes on past it */
			more = false;
			continue;
		}
		if (r < 0 && errno == EAGAIN && total && !(flags & MSG_WAITALL))
			break; /* what came after a byte read with MSG_OOB: not waited for */
		if (r == 0)
			break; /* the end (after what WAITALL got) */
		if (errno != EAGAIN || shut || nb) {
			lf__shm_io_end_seen(c, fd, r, total > 0); /* after bytes: the next call's answer, as TCP keeps it */
			if (total || (shut && errno == EAGAIN))
				break; /* SHUT_RD: TCP reads 0 where it would wait */
			*ret = -1;
			return true;
		}
		lf__shm_spin(c, fd);
		long a = atomic_load(&c->state) == ON ? lf__shm_avail(c) : 0;
		if ((a != 0 && (a < 0 || !(flags & MSG_PEEK))) || moved(c, f))
			continue; /* moved while it spun: no wait on what the number names now */
		lf__shm_spin_sleep(c);
		look = LOOK; /* what woke the wait may be the end */
		if (!end)
			end = read_deadline(f, fd);
		/* A peek that found only bytes it cannot take (an urgent byte)
		 * waits for one more, as TCP's; the socket's token stands for
		 * those. Both rare: their timeout from the kernel, as the flag
		 * may not know of one. */
		bool urg = a == 0 && signal_blocks(c, fd);
		uint64_t e = end ? end : a > 0 || urg ? lf__sys_timeout_end(fd, SO_RCVTIMEO) : 0;
		if ((a > 0 ? wait_mark(c, fd, (size_t)a + 1, e, s0, i0) : urg ? wait_urgent(c, fd, e, s0, i0) :
			     wait_read(fd, end, s0, i0)) < 0) {
			lf__shm_io_end_seen(c, fd, -1, false);
			if (total && errno != EAGAIN && errno != EINTR) /* the next call's answer, as TCP keeps it */
				__atomic_store_n(&f->pend_err, errno, __ATOMIC_RELEASE);
			if (total)
				break;
			*ret = -1;
			return true;
		}
		if (moved(c, f))
			continue;
		lf__shm_decide(c, fd);
		if (atomic_load(&c->state) == OFF)
			return false; /* the server said no: the stream's from here */
	}
	errno = e0;
	*ret = (ssize_t)total;
	return true;
}

/* ---- writing */

/* After publishing bytes up to upto: one token if the bell was clear and the
 * reader did not take them at once. full: no push, a non-blocking write
 * found the ring full (below). -1: errno of the peer's end (EPIPE,
 * ECONNRESET; SIGPIPE as the kernel sends it). */
static int ring_bell(struct lf_shm_conn *c, int fd, int flags, uint64_t upto, bool full)
{
	uint32_t zero = 0;

	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&c->tx.h->want_data, memory_order_relaxed)) { /* a reader waits for its mark */
		atomic_store(&c->tx.h->want_data, 0);
		atomic_fetch_add(&c->tx.h->data_seq, 1);
		futex(&c->tx.h->data_seq, FUTEX_WAKE, INT_MAX, NULL);
	}
	uint32_t b = atomic_load(&c->tx.h->bell);
	if (b > 1)
		return lf__shm_broken(c, fd);
	if (!full) {
		uint64_t now = lf__shm_spin_busy(c);
		if (b == 0 && lf__shm_spin_handed_off(c, upto, now))
			return 0;
	}
	if (b == 1 || !atomic_compare_exchange_strong(&c->tx.h->bell, &zero, 1)) {
		char e = EDGE; /* the reader waits for edges: one per push, as TCP gives (best effort: a full socket takes none) */
		if (!full && atomic_load_explicit(&c->tx.h->edges, memory_order_relaxed))
			lf__sys_sendto(fd, &e, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0);
		return 0;
	}
	char t = TOKEN;
	if (lf__sys_sendto(fd, &t, 1, MSG_DONTWAIT | (flags & MSG_NOSIGNAL), NULL, 0) == 1)
		return 0;
	if (errno != EAGAIN)
		return -1;
	/* The socket is full of what the client wrote before its switch: the
	 * token goes when there is room (flush), and the reader, which reads
	 * those bytes first, owes it meanwhile (take_token). */
	atomic_store(&c->unsent, true);
	return 0;
}

void lf__shm_io_flush(struct lf_shm_conn *c, int fd)
{
	char t = TOKEN;

	if (!atomic_load_explicit(&c->unsent, memory_order_relaxed))
		return;
	atomic_fetch_add(&c->ringing, 1); /* then tx_left: a leave waits for it, or it sees the leave (shm_leave.c) */
	if (!atomic_load(&c->tx_left) && atomic_exchange(&c->unsent, false) &&
	    lf__sys_sendto(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0) < 0 && errno == EAGAIN)
		atomic_store(&c->unsent, true);
	atomic_fetch_sub(&c->ringing, 1);
}

/* The socket says that the peer's end has gone (POLLHUP: closed; POLLERR:
 * reset, which the kernel does when the peer closed with bytes unread:
 * its ring's token, or the stream's): -1 and TCP's answer to a write now,
 * the reset's error taken (ECONNRESET, no signal, as TCP's first write
 * after a reset), else EPIPE with SIGPIPE, which a token sent to the
 * ended socket gets from the kernel (it cannot be taken by a peer: a
 * socket that says POLLHUP has its sending side shut). 0: the peer is
 * there. */
static int peer_gone(int fd, int flags)
{
	int rev = lf__sys_poll1(fd, 0, 0), err = 0;
	socklen_t l = sizeof(err);

	if (rev <= 0 || !(rev & (POLLHUP | POLLERR)))
		return 0;
	if (!(err = lf__err_take(fd)) && (rev & POLLERR))
		lf__sys_getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
	if (err) {
		if (err == ECONNRESET)
			reset_seen(fd);
		errno = err;
		return -1;
	}
	char t = TOKEN;
	return lf__sys_sendto(fd, &t, 1, MSG_DONTWAIT | (flags & MSG_NOSIGNAL), NULL, 0) < 0 ? -1 : 0;
}

/* A write whose bytes would go into the ring without a system call (the
 * bell already set, or a reader that takes them at once) cannot see that
 * the peer has gone: it looks at the socket when the peer's fin word has
 * moved since its last look (each close of the peer's end moves it after
 * the kernel's close: shm.c, conn_put), or after a read saw the end or an
 * error (a peer that exited or was killed moves nothing; a peer that only
 * shut its writing side is found still there, once). A peer that moves
 * the word for nothing costs its own connection a poll per write. 0, or
 * -1 and errno. */
static int peer_closed(struct lf_shm_conn *c, int fd, int flags)
{
	unsigned fin = atomic_load_explicit(&c->rx.h->fin, memory_order_acquire);

	if (fin == atomic_load_explicit(&c->fin_seen, memory_order_relaxed) &&
	    !atomic_load_explicit(&c->end_seen, memory_order_relaxed))
		return 0;
	if (peer_gone(fd, flags) < 0) {
		atomic_store_explicit(&c->end_seen, true, memory_order_relaxed); /* gone for good: every write looks */
		return -1;
	}
	atomic_store_explicit(&c->end_seen, false, memory_order_relaxed);
	atomic_store_explicit(&c->fin_seen, fin, memory_order_relaxed);
	return 0;
}

/* Waits for room in the ring, in slices of 20 ms between which the socket
 * tells whether the peer has gone. 0: look again; -1: errno. */
static int wait_room(struct lf_shm_conn *c, int fd, int flags, unsigned s0, unsigned i0, uint64_t end)
{
	uint32_t seq = atomic_load(&c->tx.h->space_seq);

	lf__shm_io_flush(c, fd);
	atomic_store(&c->tx.h->want_space, 1);
	lf__shm_spin_room_heavy(); /* want_space, then head */
	long s = lf__ring_space(&c->tx);
	if (s != 0)
		return s < 0 ? lf__shm_broken(c, fd) : 0;
	if (peer_gone(fd, flags) < 0)
		return -1;
	return wait_slice(&c->tx.h->space_seq, seq, s0, i0, end);
}

/* Waits for the end of the reader's give-back (shm_mem.c), as for room. */
static int wait_trim(struct lf_shm_conn *c, unsigned s0, unsigned i0, uint64_t end)
{
	uint32_t seq = atomic_load(&c->tx.h->space_seq);

	atomic_store(&c->tx.h->want_space, 1);
	lf__shm_spin_room_heavy(); /* want_space, then trim */
	if (!atomic_load(&c->tx.h->trim))
		return 0;
	return wait_slice(&c->tx.h->space_seq, seq, s0, i0, end);
}

/* The writer, under txl, with room for the urgent byte: its mark, then
 * the signal on the socket unless one is there (it stands for this mark
 * from now on). 0, or -1 and errno (EAGAIN: the socket is full, or the
 * reader is taking the signal off: as no room; the mark is as it was). */
static int urgent_mark(struct lf_shm_conn *c, int fd, int flags)
{
	uint64_t old = atomic_load(&c->tx.h->urg), mark = c->tx.pos + 1;
	char u = URGENT;

	atomic_store(&c->tx.h->urg, mark);
	for (int i = 0; i < 16; i++) {
		uint64_t s = atomic_load(&c->tx.h->urg_sig);
		if (s == LF_URG_TAKING) { /* a system call or two of the reader's */
			sched_yield();
			continue;
		}
		if (!atomic_compare_exchange_strong(&c->tx.h->urg_sig, &s, mark))
			continue;
		if (s)
			return 0;
		if (lf__sys_sendto(fd, &u, 1, MSG_OOB | MSG_DONTWAIT | (flags & MSG_NOSIGNAL), NULL, 0) == 1)
			return 0;
		int e = errno;
		atomic_store(&c->tx.h->urg_sig, 0);
		atomic_store(&c->tx.h->urg, old);
		errno = e;
		return -1;
	}
	atomic_store(&c->tx.h->urg, old);
	errno = EAGAIN;
	return -1;
}

/* A blocking urgent send that could not place its signal (urgent_mark's
 * EAGAIN: the socket full, or the reader taking a signal off, which a
 * peer can hold for ever, as it can the socket's room): the ring has room,
 * so wait_room would end at once and the send looked again without
 * sleeping. One slice of 1 ms on the socket instead (its end or an error
 * ends it), with the socket's timeout and signals. 0: look again; -1:
 * errno. */
static int wait_signal_room(int fd, int flags, unsigned s0, unsigned i0, uint64_t end)
{
	if (peer_gone(fd, flags) < 0)
		return -1;
	return slice_end(lf__sys_poll1(fd, 0, 1) < 0 && errno == EINTR, s0, i0, end);
}

/* The client's writes before it has the answer: on the stream, counted,
 * k's window at a time, never waiting (the caller waits, and looks for
 * the answer again). false: the answer came first. */
static bool client_stream(struct lf_shm_conn *c, int fd, const struct cur *k, int flags, ssize_t *ret)
{
	pthread_mutex_lock(&c->txl);
	int in = atomic_load(&c->state) != UNDECIDED ? 0 : lf__shm_board_enter(c);
	if (in <= 0) { /* another process took it (the caller's decide adopts), or holds the board: nothing sent */
		pthread_mutex_unlock(&c->txl);
		if (in < 0) {
			errno = EAGAIN;
			*ret = -1;
			return true;
		}
		return false;
	}
	lf__shm_board_dirty(c, true);
	struct msghdr copy = { .msg_iov = (struct iovec *)k->v, .msg_iovlen = k->n };
	ssize_t r = lf__sys_sendmsg(fd, &copy, flags | MSG_DONTWAIT);
	if (r > 0)
		*lf__shm_stream_out(c) += (uint64_t)r;
	lf__shm_board_leave(c);
	pthread_mutex_unlock(&c->txl);
	*ret = r;
	return true;
}

/* The rest of k on the stream (the connection left the ring, or said no
 * after the client's first bytes went there), window by window as the
 * kernel takes them: what was sent (the caller has sent some: flags has
 * MSG_NOSIGNAL). An urgent send's mark goes with its last window only. */
static size_t stream_rest(int fd, struct cur *k, int flags)
{
	size_t sent = 0;

	for (ssize_t r = 1; k->len && r > 0;) {
		struct msghdr rest = { .msg_iov = k->v, .msg_iovlen = k->n };
		size_t len = k->len;
		r = lf__sys_sendmsg(fd, &rest, k->rest ? flags & ~MSG_OOB : flags);
		if (r > 0) {
			sent += (size_t)r;
			if ((cur_skip(k, (size_t)r), (size_t)r < len))
				break;
		}
	}
	return sent;
}

/* A write that failed (errno) after it sent bytes returns their count, as
 * TCP's; a reset its look took off the socket is then the next call's
 * answer (TCP's next write says ECONNRESET). Nothing sent: -1, errno. */
static ssize_t sent(int fd, size_t total, int e0)
{
	if (!total)
		return -1;
	if (errno == ECONNRESET)
		lf__err_keep(fd, ECONNRESET);
	errno = e0;
	return (ssize_t)total;
}

static bool send_held(struct lf_shm_conn *c, int fd, const struct msghdr *m, int flags, ssize_t *ret)
{
	struct lf_fd *f = lf__fd(fd);
	unsigned s0 = atomic_load(&lf__sig_seen), i0 = atomic_load(&lf__sig_interrupt);
	struct cur k;
	size_t total = 0;
	uint64_t end = 0;
	bool again = false; /* no room for a non-blocking write: below */
	int err = 0; /* what the loop below broke on, after bytes */

	if (!c || (atomic_load(&f->flags) & LF_F_SHUT_WR) || m->msg_iovlen > UIO_MAXIOV) /* the kernel's EINVAL */
		return false;
	bool urgent = flags & MSG_OOB;
	int e0 = errno;
	cur_init(&k, m->msg_iov, m->msg_iovlen);
	if (k.bad)
		return false; /* the Unix socket's EINVAL, before any byte */
	/* Before the answer: a blocking write goes on until all is sent, on
	 * the stream and then (the answer Y) in the ring, as TCP's waits for
	 * room; a non-blocking one, or one that a signal or the timeout
	 * ends, returns what went. */
	for (;;) {
		lf__shm_decide(c, fd);
		int st = atomic_load(&c->state);
		if ((st == OFF || st == BROKEN) && !total)
			return false;
		if (st == OFF || st == BROKEN) {
			total += stream_rest(fd, &k, flags);
			errno = e0;
			*ret = (ssize_t)total;
			return true;
		}
		if (st == ON)
			break;
		/* Urgent data waits for the answer (it has no place on the
		 * stream the server reads first): the answer makes POLLIN. */
		ssize_t r;
		if (!urgent && client_stream(c, fd, &k, flags, &r)) {
			if (r > 0) {
				total += (size_t)r;
				cur_skip(&k, (size_t)r);
				flags |= MSG_NOSIGNAL; /* a count now: no SIGPIPE, as TCP's */
			}
			if (!k.len || (r < 0 && errno != EAGAIN) || (r < 0 && must_not_wait(fd, flags))) {
				*ret = r < 0 ? sent(fd, total, e0) : (ssize_t)total;
				return true;
			}
			if (r > 0)
				continue; /* the next window, or the wait */
		}
		if (urgent && must_not_wait(fd, flags)) {
			errno = EAGAIN;
			*ret = -1;
			return true;
		}
		if (!end)
			end = lf__sys_timeout_end(fd, SO_SNDTIMEO); /* one timeout for the whole call, as TCP's */
		if (wait_fd(fd, urgent ? POLLIN : POLLOUT | POLLIN, end, s0, restarts(total, i0)) < 0) {
			*ret = sent(fd, total, e0);
			return true;
		}
	}
	if (urgent && !k.len)
		return false; /* the Unix socket's answer */
	if (peer_closed(c, fd, flags) < 0) {
		*ret = sent(fd, total, e0); /* what went on the stream before the answer */
		return true;
	}
	lf__shm_io_flush(c, fd);
	while (k.len) {
		if (moved(c, f)) { /* closed under the write's wait: no bell on what the number names now */
			if (total)
				break;
			errno = EBADF;
			*ret = -1;
			return true;
		}
		if (atomic_load_explicit(&c->tx_left, memory_order_relaxed)) { /* left the ring (shm_leave.c): the rest on the stream */
			if (!total) {
				errno = e0;
				return false;
			}
			total += stream_rest(fd, &k, flags);
			break;
		}
		pthread_mutex_lock(&c->txl);
		if (atomic_load(&c->tx_left)) {
			pthread_mutex_unlock(&c->txl);
			continue;
		}
		lf__ring_sync(&c->tx, false);
		bool mine = lf__shm_mem_enter(c, fd); /* not while the reader gives pages back */
		long s = mine ? lf__shm_mem_room(c, fd, cur_left(&k)) : 0; /* grown to SO_SNDBUF if need be */
		/* Urgent: the last byte goes on its own, after its mark. A
		 * large write goes in pieces of a quarter ring, each published
		 * at once, so that the reader copies one out while the writer
		 * copies the next in (docs/shm.md, "Large writes"). */
		size_t len = urgent && k.len > 1 && !k.rest ? k.len - 1 : k.len; /* the call's last byte, not a window's */
		if (len > c->tx.size / 4)
			len = c->tx.size / 4;
		int sig = 0;
		if (s > 0 && urgent && cur_left(&k) == 1 && (sig = urgent_mark(c, fd, flags)) < 0)
			s = 0;
		size_t put = s > 0 ? lf__ring_write(&c->tx, k.v, k.n, (size_t)s < len ? (size_t)s : len) : 0;
		if (put && lf__ring_seen(&c->tx) < 0) /* the peer's head, checked once the bytes are out */
			s = LF_RING_BAD;
		/* The reader's leave word shares its head's line, just read. */
		bool asked = put && atomic_load_explicit(&c->tx.h->leave, memory_order_relaxed) == LF_LEAVE_ASK;
		uint64_t t = c->tx.pos;
		if (mine)
			lf__shm_mem_exit(c);
		if (put)
			atomic_fetch_add(&c->ringing, 1); /* its bell is in flight until ring_bell returns (shm_leave.c) */
		pthread_mutex_unlock(&c->txl);
		if (!mine) {
			if (lf__shm_mem_wait(c))
				continue; /* the reader's give-back ended */
			/* One that lasts (a reader descheduled in it, a peer that
			 * holds trim) is a full ring: EAGAIN, or a wait with the
			 * socket's timeout and signals, woken by the reader's
			 * wake after its give-back (punch, shm_mem.c; 20 ms slices). */
			if (must_not_wait(fd, flags)) {
				again = true;
				break;
			}
			if (!end)
				end = lf__sys_timeout_end(fd, SO_SNDTIMEO);
			if (wait_trim(c, s0, restarts(total, i0), end) < 0) {
				if (total) {
					err = errno; /* for sent() */
					break;
				}
				*ret = -1;
				return true;
			}
			continue;
		}
		if (s < 0) {
			if (put)
				atomic_fetch_sub(&c->ringing, 1);
			*ret = lf__shm_broken(c, fd);
			return true;
		}
		if (sig < 0 && errno != EAGAIN) { /* the peer's end (EPIPE, ECONNRESET) */
			if (total) {
				err = errno; /* for sent() */
				break;
			}
			*ret = -1;
			return true;
		}
		if (put) {
			if (atomic_load_explicit(&c->full, memory_order_relaxed))
				lf__shm_set_full(c, false);
			int rb = ring_bell(c, fd, flags, t, false);
			atomic_fetch_sub(&c->ringing, 1);
			if (rb < 0) { /* the peer's end: what went before this push is TCP's count */
				if (total) {
					err = errno; /* for sent() */
					break;
				}
				*ret = -1;
				return true;
			}
			total += put;
			cur_skip(&k, put);
			flags |= MSG_NOSIGNAL; /* a count now: no SIGPIPE, as TCP's */
			if (asked)
				lf__shm_io_answer(c, fd);
			continue;
		}
		if (atomic_load_explicit(&c->tx.h->leave, memory_order_relaxed) == LF_LEAVE_ASK) {
			lf__shm_io_answer(c, fd); /* its reader stopped reading: no room will come */
			if (atomic_load(&c->tx_left))
				continue;
		}
		if (must_not_wait(fd, flags)) {
			again = !sig;
			break;
		}
		if (sig < 0) { /* the socket full, or the reader taking a signal off */
			if (!end)
				end = lf__sys_timeout_end(fd, SO_SNDTIMEO);
			if (wait_signal_room(fd, flags, s0, restarts(total, i0), end) < 0) {
				if (total) {
					err = errno; /* for sent() */
					break;
				}
				*ret = -1;
				return true;
			}
			continue;
		}
		if (lf__shm_spin_room(c))
			continue;
		if (!end)
			end = lf__sys_timeout_end(fd, SO_SNDTIMEO);
		if (wait_room(c, fd, flags, s0, restarts(total, i0), end) < 0) {
			if (total) {
				err = errno; /* for sent() */
				break;
			}
			*ret = -1;
			return true;
		}
	}
	/* A non-blocking writer told there is no room (a full ring, or the
	 * reader giving the empty ring's pages back) waits for the kernel's
	 * EPOLLOUT: epoll knows only the Unix socket, whose EPOLLOUT comes
	 * when the reader takes a byte of ours off it. So one must be there:
	 * the bell rings now (for the bytes in the ring, or none: the reader
	 * takes such a token as that of bytes already read), and the reader
	 * takes it once its ring is empty. Pushes that a polling reader took
	 * at once (hand-offs) and a give-back leave none. */
	if (again) {
		pthread_mutex_lock(&c->txl); /* a bell in flight, as a push's (shm_leave.c) */
		bool left = atomic_load(&c->tx_left);
		if (!left)
			atomic_fetch_add(&c->ringing, 1);
		pthread_mutex_unlock(&c->txl);
		int rb = left ? 0 : ring_bell(c, fd, flags, 0, true);
		if (!left) {
			atomic_fetch_sub(&c->ringing, 1);
			lf__shm_set_full(c, true); /* epoll's level-triggered EPOLLOUT is looked at (shm.c, room_fix) */
		}
		if (rb < 0 && !total) {
			*ret = -1;
			return true;
		}
	}
	if (!total && k.len) {
		errno = EAGAIN;
		*ret = -1;
		return true;
	}
	errno = err; /* the error the loop ended on after bytes, if any: never a stale errno */
	*ret = total ? sent(fd, total, e0) : 0;
	errno = e0;
	return true;
}

/* The data calls hold the connection (lf__shm_use): another thread may
 * close the descriptor while a read waits, as over TCP. */
bool lf__shm_recv(int fd, struct msghdr *m, int flags, ssize_t *ret)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (!c)
		return false;
	bool r = recv_held(c, fd, m, flags, ret);
	lf__shm_done(fd);
	return r;
}

bool lf__shm_send(int fd, const struct msghdr *m, int flags, ssize_t *ret)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (!c)
		return false;
	bool r = send_held(c, fd, m, flags, ret);
	lf__shm_done(fd);
	return r;
}
