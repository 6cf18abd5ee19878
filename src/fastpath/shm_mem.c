/* The shared-memory tier's memory (docs/shm.md, "Memory"): an idle
 * connection holds at most 64 KiB of its memfd, whatever it carried.
 *
 * Each ring's pages come into being as the writer first writes them (the
 * memfd starts as holes), so the ring grows at once, under load, to its
 * whole size (LF_RING_SIZE, more than a Unix stream's default buffer) and
 * never further. Giving them back is the reader's job: it is the one that
 * sees the ring go empty (the writer's last write is followed by nothing),
 * and it does so there, once at least KEEP bytes have passed since its last
 * give-back, by punching the whole ring's data (madvise MADV_REMOVE: the
 * pages leave the memfd and every process's page tables; the seals
 * F_SEAL_SHRINK | F_SEAL_GROW do not forbid it, since the size stays).
 *
 * An empty ring is all free space, and free space is the writer's: a copy
 * into a page while it is punched would lose the bytes. So the two hold a
 * handshake in the page (Dekker, as the doorbell): the writer sets wbusy
 * to 1 (an atomic exchange: a full barrier) and then reads trim before it
 * copies, and sets wbusy back to 2 once the copy is published; the reader
 * takes trim 0 -> 1 (a CAS: a full barrier) and then reads wbusy and tail,
 * and punches only if the writer is not copying (2) and the ring is still
 * empty. Either the reader sees the writer's 1 (or its published tail), or
 * the writer sees the reader's trim and waits for it to end. A writer that
 * never said 2 (one that knows no trims) is never punched under.
 *
 * Cost: on the writer's path an exchange and a load per copy, no system
 * call; on the reader's, one madvise per KEEP bytes or more, only where it
 * found its ring empty (it has already read a token, and is about to wait or
 * return with nothing). A writer that meets a give-back spins a little
 * under its lock, then yields a few times without the lock and looks
 * again; after that it is treated as a full ring (shm_io.c: EAGAIN when
 * non-blocking, else a wait woken by the reader's wake after its
 * give-back (lf__shm_wake_writer, in punch), with the
 * socket's SO_SNDTIMEO and signals). A peer that holds trim forever
 * (hostile, or stopped between its madvise and its release) only makes
 * the writer wait as for a full ring. */
#include "internal.h"
#include "shm_conn.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>

/* Bytes that may pass through a ring without a give-back: fewer than KEEP
 * bytes touch at most 7 pages, so an idle connection holds at most the
 * header page and 2 x 28 KiB: 60 KiB. */
#define KEEP (24u * 1024u)

bool lf__shm_mem_enter(struct lf_shm_conn *c, int fd)
{
	struct lf_ring_hdr *h = c->tx.h;

	for (int i = 0; i < 100; i++) {
		atomic_exchange(&h->wbusy, W_COPY);
		if (!atomic_load(&h->trim))
			return true;
		atomic_store_explicit(&h->wbusy, W_IDLE, memory_order_release);
		__builtin_ia32_pause();
	}
	/* A peer gone mid-give-back (its descriptors closed: it runs no more)
	 * holds trim forever, and nothing punches any more. */
	int rev = lf__sys_poll1(fd, 0, 0);
	if (rev > 0 && (rev & (POLLHUP | POLLERR))) {
		atomic_exchange(&h->wbusy, W_COPY);
		return true;
	}
	return false;
}

bool lf__shm_mem_wait(struct lf_shm_conn *c)
{
	for (int i = 0; i < 10; i++) {
		if (!atomic_load(&c->tx.h->trim))
			return true;
		sched_yield();
	}
	return false;
}

void lf__shm_mem_exit(struct lf_shm_conn *c)
{
	atomic_store_explicit(&c->tx.h->wbusy, W_IDLE, memory_order_release);
}

/* A ring that grew (below) is punched whole: its grown part, then its
 * first LF_RING_SIZE bytes (a size that is garbage: the whole area). */
static void punch(struct lf_shm_conn *c, uint64_t now)
{
	struct lf_ring *r = &c->rx;
	uint32_t zero = 0;

	if (!atomic_compare_exchange_strong(&r->h->trim, &zero, 1))
		return;
	uint32_t n = lf__ring_size(r) ? lf__ring_size(r) : r->area;
	if (atomic_load(&r->h->wbusy) == W_IDLE && atomic_load(&r->h->tail) == r->pos &&
	    (n <= LF_RING_SIZE || !madvise(r->data + LF_RING_SIZE, n - LF_RING_SIZE, MADV_REMOVE)) &&
	    !madvise(r->data, LF_RING_SIZE, MADV_REMOVE)) {
		c->trimmed = r->pos;
		c->trim_ns = now;
		c->emptied = 0;
	}
	atomic_store_explicit(&r->h->trim, 0, memory_order_release);
	lf__shm_wake_writer(c); /* one that met the give-back may wait for its end (shm_io.c, wait_trim) */
}

/* A stream whose reader keeps up finds its ring empty after every write:
 * a give-back each time would have the writer fault every page in again
 * (a fault per 4 KiB carried: 64 KiB writes went at a third of the Unix
 * stream's rate). So a ring gives its pages back at most once per
 * GIVE_BACK_NS; one found empty sooner is due, and its give-back is made
 * when the process has waited that long for anything: the tier's own
 * blocking reads, and poll, select and epoll (wait.c), cut their waits in
 * slices of GIVE_BACK_NS while any is due, and sweep the due rings after
 * each wait that timed out (lf__shm_mem_sweep: those whose last give-back
 * is GIVE_BACK_NS old). The list of due rings is the
 * process's, under due_lock; a connection leaves it before it is freed
 * (lf__shm_mem_forget). */
#define GIVE_BACK_NS (10u * 1000u * 1000u)

static pthread_mutex_t due_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lf_shm_conn *due_list;
atomic_int lf__shm_due;

static void due_out(struct lf_shm_conn *c)
{
	if (!c->due_prev)
		return;
	*c->due_prev = c->due_next;
	if (c->due_next)
		c->due_next->due_prev = c->due_prev;
	c->due_prev = NULL;
	atomic_fetch_sub(&lf__shm_due, 1);
}

/* A ring already due (under rxl: the sweep takes it off the list only
 * with rxl held) reads the clock once in DUE_LOOKS finds, not at each:
 * a polling reader finds its ring empty at every poll, and the clock and
 * the list's lock there were 0.15 us of a spinning round trip
 * (docs/shm.md, "Cache lines"). */
#define DUE_LOOKS 64u

/* Small messages (under SMALL bytes a read that emptied the ring, on
 * average, since the last
 * give-back: a ping-pong, a request stream) give their pages back at once,
 * as before the pace: the writer's next copies then go into pages faulted
 * in on its own CPU, where a reused line last read by the reader costs a
 * transfer on each message's path (the latency a ping-pong waits for); a
 * fault per 4 KiB is a few ns a message. Large ones (a stream of 64 KiB
 * writes) are paced: there the copies' transfers overlap, and the faults
 * were the cost. */
#define SMALL 4096u

void lf__shm_mem_idle(struct lf_shm_conn *c)
{
	uint64_t passed = c->rx.pos - c->trimmed;

	if (passed < KEEP)
		return;
	if (c->due_prev && ++c->due_looks % DUE_LOOKS)
		return;
	uint64_t now = lf__sys_now_ns();
	if (now - c->trim_ns >= GIVE_BACK_NS || passed < (uint64_t)c->emptied * SMALL) {
		punch(c, now);
		return;
	}
	pthread_mutex_lock(&due_lock);
	if (!c->due_prev) {
		c->due_next = due_list;
		if (due_list)
			due_list->due_prev = &c->due_next;
		c->due_prev = &due_list;
		due_list = c;
		atomic_fetch_add(&lf__shm_due, 1);
	}
	pthread_mutex_unlock(&due_lock);
}

/* After a wait of the process: the due rings whose time has come give
 * their pages back (a ring whose reader is busy, rxl taken, is left for
 * the next sweep; its reader decides again anyway). */
void lf__shm_mem_sweep(void)
{
	if (!atomic_load_explicit(&lf__shm_due, memory_order_relaxed))
		return;
	uint64_t now = lf__sys_now_ns();
	pthread_mutex_lock(&due_lock);
	for (struct lf_shm_conn *c = due_list, *next; c; c = next) {
		next = c->due_next;
		if (now - c->trim_ns < GIVE_BACK_NS || pthread_mutex_trylock(&c->rxl))
			continue;
		due_out(c);
		if (c->rx.pos - c->trimmed >= KEEP)
			punch(c, now);
		pthread_mutex_unlock(&c->rxl);
	}
	pthread_mutex_unlock(&due_lock);
}

/* The slice a wait of left ns (-1: no end) is cut to while rings are due. */
int64_t lf__shm_mem_slice(int64_t left)
{
	if (!atomic_load_explicit(&lf__shm_due, memory_order_relaxed))
		return left;
	return left >= 0 && left < GIVE_BACK_NS ? left : GIVE_BACK_NS;
}

/* Always under the lock, even when c looks off the list: a sweep takes c
 * off (due_prev NULL) before it punches, and holds due_lock until it is
 * done with c; a look without the lock let a close free c and unmap its
 * page under the sweep's punch and wake (a review's probe: 199 of 200
 * children died of SIGSEGV). */
void lf__shm_mem_forget(struct lf_shm_conn *c)
{
	pthread_mutex_lock(&due_lock);
	due_out(c);
	pthread_mutex_unlock(&due_lock);
}

void lf__shm_mem_fork_prepare(void) { pthread_mutex_lock(&due_lock); }
void lf__shm_mem_fork_after(void) { pthread_mutex_unlock(&due_lock); }

/* The ring follows SO_SNDBUF. A Unix stream takes bytes while what it
 * holds (counted with each buffer's overhead, skb truesize) is below the
 * socket's SO_SNDBUF (the value getsockopt reports: twice what was set,
 * within net.core.wmem_max unless SO_SNDBUFFORCE), and then the whole of
 * the write's next buffer, up to SLACK bytes: so it never holds more than
 * SO_SNDBUF + SLACK bytes of data (212,992 + 20,160 measured by default,
 * with 64 KiB writes). The ring lets that many wait, at least
 * LF_RING_SIZE, at most its area, so that a writer never gets EAGAIN or
 * waits earlier than on the Unix stream. */
#define SLACK (36u * 1024u) /* SKB_MAX_HEAD(0) + UNIX_SKB_FRAGS_SZ (32 KiB), rounded up */

uint32_t lf__shm_mem_want(int sndbuf)
{
	uint64_t w = sndbuf > 0 ? (uint64_t)sndbuf + SLACK : 0;

	return w < LF_RING_SIZE ? LF_RING_SIZE : w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

void lf__shm_mem_sndbuf(struct lf_shm_conn *c, int fd)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (!lf__sys_getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &l))
		atomic_store_explicit(&c->want, lf__shm_mem_want(v), memory_order_relaxed);
}

/* The ring's size that holds want bytes. */
static uint32_t size_for(const struct lf_ring *r, uint32_t want)
{
	uint32_t m = LF_RING_SIZE;

	while (m < want && m < r->area)
		m *= 2;
	return m;
}

/* A size in the page larger than this process's (the writer's half of
 * the page, which the peer can write too) is taken only if this end's
 * SO_SNDBUF asks for it: another process of this end (a fork) grew the
 * ring for the socket they share. Any other is a peer's: LF_RING_BAD (a
 * reset), so that a peer cannot make this writer spread its bytes over
 * more of the area than its own SO_SNDBUF would. */
static bool size_taken(struct lf_shm_conn *c, int fd)
{
	uint32_t m = lf__ring_size(&c->tx);

	if (m <= c->tx.size)
		return true; /* the same, or garbage the writer does not use (its reader resets) */
	if (fd >= 0 && size_for(&c->tx, atomic_load_explicit(&c->want, memory_order_relaxed)) < m)
		lf__shm_mem_sndbuf(c, fd);
	if (size_for(&c->tx, atomic_load_explicit(&c->want, memory_order_relaxed)) < m)
		return false;
	c->tx.size = m;
	return true;
}

/* The ring grows (lf__ring_grow) when its limit is below what SO_SNDBUF
 * asks: known from the application's setsockopt (interpose.c), or, when
 * the ring is full, read from the socket (one getsockopt per full ring:
 * a fork's other process or a listener may have set it). A growth that
 * must wait (the unread bytes would move) is tried again at the next
 * write. The reader's head is read only when the head last read leaves
 * less than len bytes (lf__ring_room). */
long lf__shm_mem_room(struct lf_shm_conn *c, int fd, size_t len)
{
	if (!size_taken(c, fd))
		return LF_RING_BAD;
	uint32_t w = atomic_load_explicit(&c->want, memory_order_relaxed);
	if (w > c->tx.limit)
		lf__ring_grow(&c->tx, w);
	long s = lf__ring_room(&c->tx, len);
	if (s != 0 || fd < 0)
		return s;
	lf__shm_mem_sndbuf(c, fd);
	w = atomic_load_explicit(&c->want, memory_order_relaxed);
	return w > c->tx.limit && lf__ring_grow(&c->tx, w) ? lf__ring_space(&c->tx) : 0;
}
