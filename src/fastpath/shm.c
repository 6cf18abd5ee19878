/* The shared-memory tier (docs/shm.md): a fast-path connection whose two
 * ends asked for it moves its bytes through two single-producer/single-
 * consumer rings (src/protocol/ring.c) in a sealed memfd that the server
 * made and sent at its claim; the Unix socket stays the connection's
 * identity, its doorbell and its end.
 *
 * The answer: a client that asks binds its hello under a name of kind "T"
 * (protocol 6). The server's claim answers it before accept returns, so
 * before any byte of the server's: one byte on the stream, "Y" with the
 * memfd (SCM_RIGHTS; the client's socket takes descriptors only until it
 * has read this byte) or "N". The client reads the answer at its next call
 * on the socket; until then its writes go on the stream, and when it
 * switches it writes how many (`pre`) into the shared page before its
 * first ring byte, so the server reads exactly that many from the stream
 * before the ring (peeking first: it never takes a token for data).
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
 * Room: a writer that finds its ring full waits on a futex in the shared
 * page, in slices, looking at the socket for the peer's end between them;
 * the reader wakes it after making room. */
#include "internal.h"
#include "loopfast.h"
#include "shm.h"
#include "ring.h"
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

bool lf__shm_global;
bool lf__shm_used;

enum { UNDECIDED, ON, OFF, BROKEN };

struct lf_shm_conn {
	atomic_int refs;        /* first: fdtab.c counts the dups that share it */
	bool server;
	atomic_int state;
	void *map;
	struct lf_ring rx, tx;
	pthread_mutex_t rxl, txl; /* one reader and one writer of the process at a time; never held across a wait */
	uint64_t stream_in;     /* server: stream bytes read before the ring */
	bool stream_done;       /* server: all of them */
	uint64_t stream_out;    /* client: stream bytes written before the switch */
	unsigned owed;          /* tokens given up waiting for (a stopped peer) */
	atomic_bool unsent;     /* a token the socket had no room for (the client's stream bytes fill it) */
};

#define IOV_MAX_SHM 64
#define TOKEN 't'

static void flush(struct lf_shm_conn *c, int fd);

/* What the rings hold now, as seen from this process without a lock: the
 * own position read from the page (a forked process may have moved it). */
static long avail_now(const struct lf_shm_conn *c)
{
	struct lf_ring v = c->rx;
	lf__ring_sync(&v, true);
	return lf__ring_avail(&v);
}

static long space_now(const struct lf_shm_conn *c)
{
	struct lf_ring v = c->tx;
	lf__ring_sync(&v, false);
	return lf__ring_space(&v);
}

static struct lf_shm_conn *conn_of(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);

	if (!f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHM))
		return NULL;
	return f->shm;
}

static struct lf_shm_conn *conn_new(bool server)
{
	struct lf_shm_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	atomic_init(&c->refs, 1);
	c->server = server;
	atomic_init(&c->state, server ? ON : UNDECIDED);
	pthread_mutex_init(&c->rxl, NULL);
	pthread_mutex_init(&c->txl, NULL);
	return c;
}

static void conn_put(struct lf_shm_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	if (c->map)
		munmap(c->map, LF_RING_MAP);
	free(c);
}

static void drop(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (f && f->shm) {
		conn_put(f->shm);
		f->shm = NULL;
	}
}

static void reg(void)
{
	lf__fd_on_drop(LF_F_SHM, drop);
}

static void attach(int fd, struct lf_shm_conn *c)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct lf_fd *f = lf__fd(fd);

	pthread_once(&once, reg);
	f->shm = c;
	atomic_fetch_or(&f->flags, LF_F_SHM);
	lf__shm_used = true;
}

/* A peer that broke the protocol: the connection is reset (both ways),
 * and the next calls go to the Unix socket, which answers as a reset one. */
static int broken(struct lf_shm_conn *c, int fd)
{
	atomic_store(&c->state, BROKEN);
	lf__sys_shutdown(fd, SHUT_RDWR);
	errno = ECONNRESET;
	return -1;
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

/* ---- negotiation */

bool lf__shm_wants(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	bool w = lf__shm_global || (f && (atomic_load(&f->flags) & LF_F_TIER));

	if (w)
		lf__shm_used = true;
	return w;
}

/* The server's memfd: made, sized, initialised, mapped, then sealed so
 * that its size can never change under the client's mapping. */
static struct lf_shm_conn *make_rings(int *mfd)
{
	struct lf_shm_conn *c = conn_new(true);
	int fd = memfd_create("loopfast-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *map = MAP_FAILED;

	if (!c || fd < 0 || ftruncate(fd, LF_RING_MAP) ||
	    (map = mmap(NULL, LF_RING_MAP, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ||
	    lf__sys_fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		if (map != MAP_FAILED)
			munmap(map, LF_RING_MAP);
		if (fd >= 0)
			lf__sys_close(fd);
		free(c);
		return NULL;
	}
	struct lf_ring_page *p = map;
	p->magic = LF_RING_MAGIC;
	p->version = LF_PROTO_VERSION;
	p->size = LF_RING_SIZE;
	c->map = map;
	lf__ring_views(map, true, &c->rx, &c->tx);
	*mfd = fd;
	return c;
}

struct lf_shm_conn *lf__shm_offer(int unx, int lfd, bool asked, bool *fail)
{
	struct lf_fd *l = lf__fd(lfd);
	struct lf_shm_conn *c = NULL;
	int mfd = -1;

	*fail = false;
	if (!asked)
		return NULL;
	if (lf__shm_global || (l && (atomic_load(&l->flags) & LF_F_TIER)))
		c = make_rings(&mfd);
	char v = c ? 'Y' : 'N';
	struct iovec iov = { &v, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (c) {
		m.msg_control = cm.buf;
		m.msg_controllen = sizeof(cm.buf);
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &mfd, sizeof(int));
	}
	ssize_t r = lf__sys_sendmsg(unx, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (mfd >= 0)
		lf__sys_close(mfd);
	if (r != 1) {
		if (c)
			conn_put(c);
		*fail = true;
		return NULL;
	}
	return c;
}

void lf__shm_put(struct lf_shm_conn *c)
{
	if (c)
		conn_put(c);
}

void lf__shm_attach(int fd, struct lf_shm_conn *c)
{
	if (c)
		attach(fd, c);
}

/* The client's map of the server's memfd: only a sealed memfd of exactly
 * the rings' size (a smaller file would fault past its end). */
static void *map_offer(int mfd)
{
	struct stat st;
	int seals = lf__sys_fcntl(mfd, F_GET_SEALS, 0);
	int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

	if (seals < 0 || (seals & need) != need || fstat(mfd, &st) || st.st_size != LF_RING_MAP)
		return NULL;
	void *map = mmap(NULL, LF_RING_MAP, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (map == MAP_FAILED)
		return NULL;
	const struct lf_ring_page *p = map;
	if (p->magic != LF_RING_MAGIC || p->version != LF_PROTO_VERSION || p->size != LF_RING_SIZE) {
		munmap(map, LF_RING_MAP);
		return NULL;
	}
	return map;
}

/* The client takes the server's answer if it has come (never waits). */
static void decide(struct lf_shm_conn *c, int fd)
{
	if (atomic_load(&c->state) != UNDECIDED)
		return;
	pthread_mutex_lock(&c->txl);
	if (atomic_load(&c->state) != UNDECIDED) {
		pthread_mutex_unlock(&c->txl);
		return;
	}
	char v = 0;
	struct iovec iov = { &v, 1 };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	int e0 = errno;
	ssize_t r = lf__sys_recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
		errno = e0;
		pthread_mutex_unlock(&c->txl);
		return;
	}
	int mfd = -1, extra = 0;
	for (struct cmsghdr *h = r > 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int x;
			memcpy(&x, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
			if (mfd < 0)
				mfd = x;
			else
				lf__sys_close(x), extra++;
		}
	}
	lf__sys_no_rights(fd);
	if (r <= 0) {
		/* The end, or an error, before any answer: the Unix stream's. */
		if (r < 0)
			__atomic_store_n(&lf__fd(fd)->pend_err, errno, __ATOMIC_RELEASE);
		atomic_store(&c->state, OFF);
	} else if (v == 'N' && mfd < 0) {
		atomic_store(&c->state, OFF);
	} else if (v == 'Y' && mfd >= 0 && !extra && !(m.msg_flags & MSG_CTRUNC) && (c->map = map_offer(mfd))) {
		lf__ring_views(c->map, false, &c->rx, &c->tx);
		atomic_store_explicit(&c->tx.h->pre, c->stream_out, memory_order_relaxed);
		atomic_store_explicit(&c->tx.h->switched, 1, memory_order_release);
		atomic_store(&c->state, ON);
	} else {
		if (lf__debug_on)
			lf__debug("fd %d: a bad shm answer from the server: reset", fd);
		broken(c, fd);
	}
	if (mfd >= 0)
		lf__sys_close(mfd);
	errno = e0;
	pthread_mutex_unlock(&c->txl);
}

void lf__shm_attach_client(int fd)
{
	struct lf_shm_conn *c = conn_new(false);

	if (!c) { /* no memory: the answer stays on the stream; reset rather than misread it */
		lf__sys_shutdown(fd, SHUT_RDWR);
		return;
	}
	attach(fd, c);
	decide(c, fd);
}

/* ---- reading */

struct cur {
	struct iovec v[IOV_MAX_SHM];
	size_t n, len;
};

static void cur_init(struct cur *k, const struct iovec *iov, size_t n)
{
	k->n = n < IOV_MAX_SHM ? n : IOV_MAX_SHM;
	k->len = 0;
	for (size_t i = 0; i < k->n; i++) {
		k->v[i] = iov[i];
		k->len += iov[i].iov_len;
	}
}

static void cur_skip(struct cur *k, size_t by)
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
 * it comes (read_once), never waited for. 0, or LF_RING_BAD. */
static int take_token(struct lf_shm_conn *c, int fd)
{
	char b;
	ssize_t r = lf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);

	if (r == 1)
		return b == TOKEN ? 0 : LF_RING_BAD;
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		c->owed++;
	return 0; /* or the peer is gone: its end will be read */
}

/* The reader found its ring empty: clear the bell, and with it the token,
 * unless the ring filled again meanwhile (Dekker: the writer stores tail
 * then loads bell; we store bell then load tail). Under rxl. */
static int settle(struct lf_shm_conn *c, int fd)
{
	uint32_t b = atomic_load(&c->rx.h->bell), zero = 0;

	if (b == 0)
		return 0;
	if (b != 1)
		return LF_RING_BAD;
	atomic_store(&c->rx.h->bell, 0);
	atomic_thread_fence(memory_order_seq_cst);
	long a = lf__ring_avail(&c->rx);
	if (a < 0)
		return LF_RING_BAD;
	if (a > 0 && atomic_compare_exchange_strong(&c->rx.h->bell, &zero, 1))
		return 0; /* the token stays, for the bytes now there */
	return take_token(c, fd);
}

static void wake_writer(struct lf_shm_conn *c)
{
	atomic_thread_fence(memory_order_seq_cst);
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
				return broken(c, fd);
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

/* One non-blocking read: >0 bytes, 0 the end, -1 errno (EAGAIN: wait). */
static ssize_t read_once(struct lf_shm_conn *c, int fd, const struct cur *k, int flags)
{
	bool peek = flags & MSG_PEEK;

	if (c->server && !c->stream_done) {
		ssize_t r = server_stream(c, fd, k, flags);
		if (r != -2)
			return r;
	}
	for (int tries = 0; tries < 3; tries++) {
		pthread_mutex_lock(&c->rxl);
		lf__ring_sync(&c->rx, true);
		long a = lf__ring_avail(&c->rx);
		if (a == 0 && settle(c, fd) == LF_RING_BAD)
			a = LF_RING_BAD;
		else if (a == 0)
			a = lf__ring_avail(&c->rx);
		if (a < 0) {
			pthread_mutex_unlock(&c->rxl);
			return broken(c, fd);
		}
		if (a > 0) {
			size_t got = lf__ring_read(&c->rx, k->v, k->n, (size_t)a < k->len ? (size_t)a : k->len, peek);
			int s = 0;
			if (!peek && got == (size_t)a)
				s = settle(c, fd);
			if (!peek)
				wake_writer(c);
			pthread_mutex_unlock(&c->rxl);
			if (s == LF_RING_BAD)
				return broken(c, fd);
			return (ssize_t)got;
		}
		pthread_mutex_unlock(&c->rxl);
		/* Empty, bell clear: the socket holds the end, a token of a push
		 * that raced us, one we owe, or nothing. */
		char b;
		ssize_t r = lf__sys_recvfrom(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL);
		if (r <= 0)
			return r;
		pthread_mutex_lock(&c->rxl);
		bool stray = lf__ring_avail(&c->rx) == 0 && atomic_load(&c->rx.h->bell) == 0;
		bool owed = stray && c->owed;
		if (owed) {
			c->owed--;
			lf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);
		}
		pthread_mutex_unlock(&c->rxl);
		if (stray && !owed)
			break;
	}
	return broken(c, fd); /* a byte on the socket that no push explains */
}

/* Waits for POLLIN (read) or room (write) as a blocking call does: the
 * socket's timeout (EAGAIN), signals (EINTR unless SA_RESTART and no
 * timeout). 0: look again; -1: errno. */
static int wait_fd(int fd, short ev, int opt, unsigned s0, unsigned i0)
{
	struct timeval tv = { 0, 0 };
	socklen_t l = sizeof(tv);
	int ms = -1;

	if (!lf__sys_getsockopt(fd, SOL_SOCKET, opt, &tv, &l) && (tv.tv_sec || tv.tv_usec))
		ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
	int r = ev ? lf__sys_poll1(fd, ev, ms) : 0;
	if (r == 0 && ev) {
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

static bool nonblocking(int fd, int flags)
{
	struct lf_fd *f = lf__fd(fd);
	return (flags & MSG_DONTWAIT) || (atomic_load(&f->flags) & LF_F_NONBLOCK);
}

/* A blocking read spins first when the socket has a budget (spin.c's
 * rules, simplified: no back-off). */
static void spin(struct lf_shm_conn *c, int fd)
{
	struct lf_fd *f = lf__fd(fd);
	unsigned s0 = atomic_load(&lf__sig_seen);

	if (!f->spin_us || !(c->stream_done || !c->server) || atomic_load(&c->state) != ON)
		return;
	uint64_t end = lf__sys_now_ns() + f->spin_us * 1000ull;
	while (avail_now(c) == 0 && atomic_load(&lf__sig_seen) == s0 && lf__sys_now_ns() < end)
		__builtin_ia32_pause();
}

/* SO_RCVLOWAT on a blocking read: wait until the ring holds `target`
 * bytes, or the end, an error, a signal or the timeout. The socket cannot
 * say it (its token stands for "not empty"), so the writer wakes a futex
 * after each push while the reader asks (want_data). 0: read now; -1:
 * errno. */
static int wait_mark(struct lf_shm_conn *c, int fd, size_t target, unsigned s0, unsigned i0)
{
	struct timeval tv = { 0, 0 };
	socklen_t l = sizeof(tv);
	uint64_t end = 0;

	if (!lf__sys_getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) && (tv.tv_sec || tv.tv_usec))
		end = lf__sys_now_ns() + (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
	for (;;) {
		uint32_t seq = atomic_load(&c->rx.h->data_seq);
		atomic_store(&c->rx.h->want_data, 1);
		atomic_thread_fence(memory_order_seq_cst);
		long a = avail_now(c);
		if (a < 0 || (size_t)a >= target)
			return 0; /* enough (or garbage: the read resets) */
		char b;
		ssize_t r = lf__sys_recvfrom(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL);
		if (r == 0 || (r < 0 && errno != EAGAIN))
			return 0; /* the end, or an error: the read says which */
		struct timespec ts = { 0, 20000000 }; /* slices: the peer's end comes on the socket */
		if (futex(&c->rx.h->data_seq, FUTEX_WAIT, seq, &ts) < 0 && errno == EINTR &&
		    atomic_load(&lf__sig_seen) != s0 && (atomic_load(&lf__sig_interrupt) != i0 || end)) {
			errno = EINTR;
			return -1;
		}
		if (end && lf__sys_now_ns() >= end) {
			errno = EAGAIN;
			return -1;
		}
	}
}

bool lf__shm_recv(int fd, struct msghdr *m, int flags, ssize_t *ret)
{
	struct lf_shm_conn *c = conn_of(fd);
	struct cur k;
	size_t total = 0;
	unsigned s0 = atomic_load(&lf__sig_seen), i0 = atomic_load(&lf__sig_interrupt);
	struct lf_fd *f = lf__fd(fd);
	bool shut = atomic_load(&f->flags) & LF_F_SHUT_RD;

	if (!c || (flags & (MSG_OOB | MSG_ERRQUEUE)))
		return false;
	decide(c, fd);
	int st = atomic_load(&c->state);
	if (st == OFF || st == BROKEN)
		return false;
	cur_init(&k, m->msg_iov, m->msg_iovlen);
	if (flags & MSG_TRUNC) { /* TCP discards the bytes (the buffer may be NULL): read them into scratch */
		static __thread char scratch[65536];
		size_t len = k.len < sizeof(scratch) ? k.len : sizeof(scratch);
		k.n = 1;
		k.len = len;
		k.v[0] = (struct iovec){ scratch, len };
	}
	m->msg_flags = 0;
	int e0 = errno;
	flush(c, fd);
	static uint32_t lowat_bit;
	if (!lowat_bit)
		lowat_bit = lf__carried_bit(SO_RCVLOWAT);
	int lowat = 1;
	socklen_t ll = sizeof(lowat);
	if ((f->sockset & lowat_bit) && atomic_load(&c->state) == ON && (!c->server || c->stream_done) && !shut &&
	    !(flags & MSG_PEEK) && !nonblocking(fd, flags) && !lf__sys_getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &ll) &&
	    lowat > 1 && wait_mark(c, fd, (size_t)lowat < k.len ? (size_t)lowat : k.len, s0, i0) < 0) {
		*ret = -1;
		return true;
	}
	for (;;) {
		ssize_t r;
		if (atomic_load(&c->state) == UNDECIDED) {
			errno = EAGAIN;
			r = -1;
		} else {
			r = k.len ? read_once(c, fd, &k, flags) : 0;
		}
		if (r > 0) {
			total += (size_t)r;
			cur_skip(&k, (size_t)r);
			if (!(flags & MSG_WAITALL) || (flags & MSG_PEEK) || !k.len)
				break;
			continue;
		}
		if (r == 0)
			break; /* the end (after what WAITALL got) */
		if (errno != EAGAIN || shut || nonblocking(fd, flags)) {
			if (total || (shut && errno == EAGAIN))
				break; /* SHUT_RD: TCP reads 0 where it would wait */
			*ret = -1;
			return true;
		}
		spin(c, fd);
		if (atomic_load(&c->state) == ON && avail_now(c) != 0)
			continue;
		if (wait_fd(fd, POLLIN, SO_RCVTIMEO, s0, i0) < 0) {
			if (total)
				break;
			*ret = -1;
			return true;
		}
		decide(c, fd);
		if (atomic_load(&c->state) == OFF)
			return false; /* the server said no: the stream's from here */
	}
	errno = e0;
	*ret = (ssize_t)total;
	return true;
}

/* ---- writing */

/* After publishing bytes: one token if the bell was clear. -1: errno of
 * the peer's end (EPIPE, ECONNRESET; SIGPIPE as the kernel sends it). */
static int ring_bell(struct lf_shm_conn *c, int fd, int flags)
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
		return broken(c, fd);
	if (b == 1 || !atomic_compare_exchange_strong(&c->tx.h->bell, &zero, 1))
		return 0;
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

static void flush(struct lf_shm_conn *c, int fd)
{
	char t = TOKEN;

	if (atomic_load_explicit(&c->unsent, memory_order_relaxed) && atomic_exchange(&c->unsent, false) &&
	    lf__sys_sendto(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0) < 0 && errno == EAGAIN)
		atomic_store(&c->unsent, true);
}

/* Waits for room in the ring, in slices of 20 ms between which the socket
 * tells whether the peer has gone. 0: look again; -1: errno. */
static int wait_room(struct lf_shm_conn *c, int fd, int flags, unsigned s0, unsigned i0, uint64_t end)
{
	uint32_t seq = atomic_load(&c->tx.h->space_seq);

	flush(c, fd);
	atomic_store(&c->tx.h->want_space, 1);
	atomic_thread_fence(memory_order_seq_cst);
	long s = lf__ring_space(&c->tx);
	if (s != 0)
		return s < 0 ? broken(c, fd) : 0;
	int rev = lf__sys_poll1(fd, 0, 0);
	if (rev > 0 && (rev & (POLLHUP | POLLERR))) {
		char t = TOKEN; /* the kernel's answer to a write now: EPIPE (and SIGPIPE) or the reset */
		if (lf__sys_sendto(fd, &t, 1, MSG_DONTWAIT | (flags & MSG_NOSIGNAL), NULL, 0) < 0)
			return -1;
	}
	struct timespec ts = { 0, 20000000 };
	if (futex(&c->tx.h->space_seq, FUTEX_WAIT, seq, &ts) < 0 && errno == EINTR &&
	    atomic_load(&lf__sig_seen) != s0 && (atomic_load(&lf__sig_interrupt) != i0 || end)) {
		errno = EINTR;
		return -1;
	}
	if (end && lf__sys_now_ns() >= end) {
		errno = EAGAIN;
		return -1;
	}
	return 0;
}

static uint64_t send_deadline(int fd)
{
	struct timeval tv = { 0, 0 };
	socklen_t l = sizeof(tv);

	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) || !(tv.tv_sec || tv.tv_usec))
		return 0;
	return lf__sys_now_ns() + (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

/* The client's writes before it has the answer: on the stream, counted. */
static bool client_stream(struct lf_shm_conn *c, int fd, const struct msghdr *m, int flags, ssize_t *ret)
{
	pthread_mutex_lock(&c->txl);
	if (atomic_load(&c->state) != UNDECIDED) {
		pthread_mutex_unlock(&c->txl);
		return false;
	}
	struct msghdr copy = { .msg_iov = m->msg_iov, .msg_iovlen = m->msg_iovlen };
	ssize_t r = lf__sys_sendmsg(fd, &copy, flags | MSG_DONTWAIT);
	if (r > 0)
		c->stream_out += (uint64_t)r;
	pthread_mutex_unlock(&c->txl);
	*ret = r;
	return r >= 0 || errno != EAGAIN || nonblocking(fd, flags);
}

bool lf__shm_send(int fd, const struct msghdr *m, int flags, ssize_t *ret)
{
	struct lf_shm_conn *c = conn_of(fd);
	struct lf_fd *f = lf__fd(fd);
	unsigned s0 = atomic_load(&lf__sig_seen), i0 = atomic_load(&lf__sig_interrupt);
	struct cur k;
	size_t total = 0;
	uint64_t end = 0;

	if (!c || (atomic_load(&f->flags) & LF_F_SHUT_WR))
		return false;
	if (flags & MSG_OOB) { /* urgent data has no place in the ring */
		errno = EOPNOTSUPP;
		*ret = -1;
		return true;
	}
	for (;;) {
		decide(c, fd);
		int st = atomic_load(&c->state);
		if (st == OFF || st == BROKEN)
			return false;
		if (st == ON)
			break;
		if (client_stream(c, fd, m, flags, ret))
			return true;
		if (wait_fd(fd, POLLOUT | POLLIN, SO_SNDTIMEO, s0, i0) < 0) {
			*ret = -1;
			return true;
		}
	}
	cur_init(&k, m->msg_iov, m->msg_iovlen);
	int e0 = errno;
	flush(c, fd);
	while (k.len) {
		pthread_mutex_lock(&c->txl);
		lf__ring_sync(&c->tx, false);
		long s = lf__ring_space(&c->tx);
		size_t put = s > 0 ? lf__ring_write(&c->tx, k.v, k.n, (size_t)s < k.len ? (size_t)s : k.len) : 0;
		pthread_mutex_unlock(&c->txl);
		if (s < 0) {
			*ret = broken(c, fd);
			return true;
		}
		if (put) {
			if (ring_bell(c, fd, flags) < 0) {
				*ret = -1;
				return true;
			}
			total += put;
			cur_skip(&k, put);
			continue;
		}
		if (nonblocking(fd, flags))
			break;
		if (!end)
			end = send_deadline(fd);
		if (wait_room(c, fd, flags, s0, i0, end) < 0) {
			if (total)
				break;
			*ret = -1;
			return true;
		}
	}
	if (!total && k.len) {
		errno = EAGAIN;
		*ret = -1;
		return true;
	}
	errno = e0;
	*ret = (ssize_t)total;
	return true;
}

/* ---- what waits and ioctl see */

bool lf__shm_inq(int fd, int *out)
{
	struct lf_shm_conn *c = conn_of(fd);

	if (!c)
		return false;
	decide(c, fd);
	int st = atomic_load(&c->state);
	if (st == OFF || st == BROKEN)
		return false;
	if (st == UNDECIDED) {
		*out = 0;
		return true;
	}
	if (c->server && !c->stream_done) {
		int q = 0;
		lf__sys_ioctl(fd, FIONREAD, &q);
		if (atomic_load_explicit(&c->rx.h->switched, memory_order_acquire)) {
			uint64_t pre = atomic_load(&c->rx.h->pre);
			q = pre > c->stream_in ? (int)(pre - c->stream_in) : 0;
			long a = avail_now(c);
			q += a > 0 ? (int)a : 0;
		}
		*out = q;
		return true;
	}
	long a = avail_now(c);
	*out = a > 0 ? (int)a : 0;
	return true;
}

/* What POLLIN and POLLOUT mean on the tier: readable when a read would
 * not wait (the socket's answer, once the client's answer byte is taken
 * and any token that only raced a read is set aside), writable when the
 * ring has room. */
static void poll_fix(struct pollfd *p, bool *full)
{
	struct lf_shm_conn *c = conn_of(p->fd);

	if (!c)
		return;
	decide(c, p->fd);
	flush(c, p->fd);
	int st = atomic_load(&c->state);
	if (st == ON && (p->events & (POLLOUT | POLLWRNORM)) && space_now(c) == 0) {
		p->revents &= (short)~(POLLOUT | POLLWRNORM);
		*full = true;
	}
	if ((p->revents & (POLLIN | POLLRDNORM)) && !lf__fd_shut_rd(p->fd) &&
	    (st == OFF || (st == ON && avail_now(c) == 0 && (!c->server || c->stream_done)))) {
		char b;
		if (lf__sys_recvfrom(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL) < 0 && errno == EAGAIN)
			p->revents &= (short)~(POLLIN | POLLRDNORM);
	}
}

int lf__shm_poll(struct pollfd *fds, unsigned long n, long long timeout_ns, const void *mask,
		 int (*wait)(struct pollfd *, unsigned long, long long, const void *))
{
	uint64_t start = lf__sys_now_ns();
	bool any = false;

	for (unsigned long i = 0; i < n && !any; i++)
		any = conn_of(fds[i].fd) != NULL;
	if (!any)
		return wait(fds, n, timeout_ns, mask);
	for (;;) {
		bool full = false;
		for (unsigned long i = 0; i < n; i++) {
			fds[i].revents = 0;
			poll_fix(&fds[i], &full); /* takes answers; notes full rings */
		}
		long long left = timeout_ns < 0 ? -1 : timeout_ns - (long long)(lf__sys_now_ns() - start);
		if (timeout_ns >= 0 && left < 0)
			left = 0;
		/* A full ring has no kernel event: look again every millisecond. */
		long long slice = full && (left < 0 || left > 1000000) ? 1000000 : left;
		int r = wait(fds, n, slice, mask);
		if (r <= 0) {
			if (r < 0 || slice == left)
				return r;
			continue;
		}
		int k = 0;
		for (unsigned long i = 0; i < n; i++) {
			if (fds[i].revents)
				poll_fix(&fds[i], &full);
			k += fds[i].revents != 0;
		}
		if (k || slice == 0)
			return k;
	}
}

/* ---- opting in */

int lf__shm_set_tier(int fd, int tier)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f)
		return -EBADF;
	if (tier != LF_TIER_UDS && tier != LF_TIER_SHM)
		return -EINVAL;
	if (atomic_load(&f->flags) & LF_F_FAST)
		return -EISCONN; /* a connection's path is chosen once */
	if (tier == LF_TIER_SHM) {
		atomic_fetch_or(&f->flags, LF_F_TIER);
		lf__shm_used = true;
		lf__signals_wrap();
	} else {
		atomic_fetch_and(&f->flags, ~LF_F_TIER);
	}
	return 0;
}

int lf__shm_get_tier(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	struct lf_shm_conn *c = conn_of(fd);

	if (c) {
		decide(c, fd);
		return atomic_load(&c->state) == ON ? LF_TIER_SHM : LF_TIER_UDS;
	}
	return f && (atomic_load(&f->flags) & LF_F_TIER) && !(atomic_load(&f->flags) & LF_F_FAST) ? LF_TIER_SHM
												    : LF_TIER_UDS;
}
