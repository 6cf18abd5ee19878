/* The shared-memory tier's polling (docs/shm.md, "Spinning"): what lets
 * a round trip between two ends that poll make no system call, while the
 * doorbell's invariant (shm_io.c: the socket holds a token while the ring
 * holds data) holds whenever a call returns.
 *
 * - A reader that polls says when (`awake` in its half of the page: its
 *   clock at its last poll of the empty ring); a writer that finds the
 *   bell clear waits a moment for a reader that polled that recently to
 *   take every byte, and then owes no token (lf__shm_spin_handed_off).
 * - A non-blocking read of an empty ring answers EAGAIN without looking at
 *   the socket while nothing can have come since its last look
 *   (lf__shm_spin_quiet).
 * - A blocking read spins on its ring under --spin-us (lf__shm_spin).
 * - The room wake-up's barrier is asymmetric, so that a read does not wait
 *   for its store of head to reach the writer (lf__shm_spin_room_light,
 *   lf__shm_spin_room_heavy).
 * Called by shm_io.c (reads and writes) and shm.c (poll). */
#include "internal.h"
#include "shm.h"
#include "shm_conn.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>

/* A look at the socket less than LOOK_NS ago found nothing, and since then
 * this thread has handled no signal, the process has made no wait (poll,
 * select, epoll: lf__shm_waits), the peer has not begun to close (fin,
 * set before its close or SHUT_WR), and no token is owed: what a look now
 * would find can only be the end of a peer that died without closing
 * (kill -9, _exit), and a polling reader sees it at its next look, at most
 * LOOK_NS later (docs/shm.md, "Spinning"). Under rxl. */
#define LOOK_NS 20000u

bool lf__shm_spin_quiet(const struct lf_shm_conn *c, uint64_t now)
{
	if (c->owed || atomic_load_explicit(&c->rx.h->edges, memory_order_relaxed) ||
	    atomic_load_explicit(&c->rx.h->fin, memory_order_relaxed) || c->looked_thread != (const void *)&lf__sig_seen ||
	    c->looked_sig != atomic_load_explicit(&lf__sig_seen, memory_order_relaxed) ||
	    c->looked_waits != atomic_load_explicit(&lf__shm_waits, memory_order_acquire))
		return false;
	return now - c->looked_ns < LOOK_NS;
}

/* A non-blocking read that finds its ring empty, quiet, within AGAIN_NS of
 * its last look here (polled_ns: the end of that look, whatever it found)
 * is one of a loop that polls (sockperf, a spinning
 * event loop): it looks at the ring up to AGAIN_SPIN_NS before it answers
 * EAGAIN, so that bytes that come meanwhile are taken at once, not after
 * the rest of this call, the program's turn and the next call's start
 * (half of the tier's spinning round trip over the floor went there,
 * docs/shm.md "Spinning"). With it such a call costs about what the
 * kernel's own EAGAIN costs here (a recv on an empty TCP or Unix socket:
 * 0.17-0.23 us; the tier's call 0.15-0.24 us with the look, 0.10-0.18
 * without, measured in turns), so that a polling program waits no longer
 * in a call than it did over TCP (looks of 70, 150 and 300 ns gained no
 * more). A read after a wait of the process (an event
 * loop's reads after epoll_wait) is not quiet and never gets here; one
 * after more than AGAIN_NS of other work answers at once. A program that
 * polls several sockets in rounds under AGAIN_NS pays the look on each
 * empty one: what the kernel's EAGAIN cost it over TCP. Under rxl, which a
 * second reader of the socket waits for meanwhile (as for the kernel's
 * socket lock). */
#define AGAIN_NS 1000u
#define AGAIN_SPIN_NS 50u

bool lf__shm_spin_again(struct lf_shm_conn *c, uint64_t now)
{
	bool again = now - c->polled_ns < AGAIN_NS;

	c->polled_ns = now;
	if (!again)
		return false;
	uint64_t end = now + AGAIN_SPIN_NS;
	while (lf__shm_avail(c) == 0) /* the clock each turn, no pause: a pause costs 5-40 ns by CPU model */
		if ((c->polled_ns = lf__sys_now_ns()) >= end)
			return false;
	return true;
}

void lf__shm_spin_looked(struct lf_shm_conn *c, unsigned waits)
{
	c->looked_ns = lf__sys_now_ns();
	c->looked_waits = waits;
	c->looked_sig = atomic_load_explicit(&lf__sig_seen, memory_order_relaxed);
	c->looked_thread = &lf__sig_seen;
}

/* `awake` holds the reader's CLOCK_MONOTONIC at its last poll of its empty
 * ring, or at its end's last write while it polls (lf__shm_spin_busy), in
 * units of 2^8 ns (stored at most once a unit, not at every poll), never
 * 0; 0: it is about to sleep (a blocking read, poll). A writer counts the
 * reader as polling only while that time is within POLL_NS of its own
 * clock: a reader that stopped polling without saying so (it read until
 * EAGAIN and sleeps in epoll_wait, which knows no connection) is seen
 * asleep 2 us later, with nothing to clear. POLL_NS is under a wake-up
 * here (an epoll ping-pong's peer writes 2-3 us after its reader's last
 * EAGAIN) and over a spinning ping-pong's round trip (a reader's last
 * poll or write before the answer comes: under 1 us), docs/shm.md. The
 * peer writes the word: any value costs the writer at most one HANDOFF_NS
 * wait a push (lf__shm_spin_handed_off), never a token. */
#define STAMP_SHIFT 8
#define POLL_NS 2000u

static uint32_t stamp(uint64_t ns)
{
	uint32_t s = (uint32_t)(ns >> STAMP_SHIFT);
	return s ? s : 1;
}

void lf__shm_spin_wake(struct lf_shm_conn *c, uint64_t now)
{
	uint32_t s = stamp(now);

	if (atomic_load_explicit(&c->rx.h->awake, memory_order_relaxed) != s)
		atomic_store_explicit(&c->rx.h->awake, s, memory_order_relaxed);
}

/* A thread that writes while its end's reader polls (awake not 0) is
 * about to poll for the answer: its write renews the time, so that a ping-
 * pong whose reader last polled before its own write still hands off.
 * Its clock (0: none taken), for the hand-off's look that follows. */
uint64_t lf__shm_spin_busy(struct lf_shm_conn *c)
{
	if (!atomic_load_explicit(&c->rx.h->awake, memory_order_relaxed))
		return 0;
	uint64_t now = lf__sys_now_ns();
	lf__shm_spin_wake(c, now);
	return now;
}

void lf__shm_spin_sleep(struct lf_shm_conn *c)
{
	if (atomic_load(&c->state) == ON && atomic_load_explicit(&c->rx.h->awake, memory_order_relaxed))
		atomic_store_explicit(&c->rx.h->awake, 0, memory_order_relaxed);
}

/* A blocking read spins on its ring first when the socket has a budget
 * (spin.c's rules, simplified: no back-off). */
void lf__shm_spin(struct lf_shm_conn *c, int fd)
{
	struct lf_fd *f = lf__fd(fd);
	unsigned s0 = atomic_load(&lf__sig_seen);

	if (!f->spin_us || !(c->stream_done || !c->server) || atomic_load(&c->state) != ON)
		return;
	uint64_t now = lf__sys_now_ns(), end = now + f->spin_us * 1000ull;
	lf__shm_spin_wake(c, now);
	for (unsigned i = 1; lf__shm_avail(c) == 0 && atomic_load(&lf__sig_seen) == s0; i++) {
		if (i % 8 == 0) { /* the clock costs more than a look at the ring */
			if ((now = lf__sys_now_ns()) >= end)
				break;
			lf__shm_spin_wake(c, now);
		}
		__builtin_ia32_pause();
	}
}

/* A writer that found the bell clear, while its reader polls the ring (its
 * `awake` within POLL_NS of now): waits up to HANDOFF_NS, on its own
 * clock, for the reader to be taking every byte up to t, and then needs no
 * token: once that read returns, the ring is empty and the bell clear, as
 * after a read that settled. Otherwise (the reader takes only part, or
 * none: it stopped polling, or says it sleeps) it rings as always. Only a
 * wait, never a skipped token for bytes that no read is taking. Not with
 * edges (each push is an edge there).
 *
 * The proof is `taken`, which a read that found bytes stores before it
 * copies them, when it takes them all (not a peek, and its buffer holds
 * them): a read that holds the reader's lock and will return every byte
 * up to that tail. Its head, stored after the copy, would reach the
 * writer a copy later (a cache-line transfer from the ring's data, then
 * the head's line taken from the writer that spins on it and fetched
 * back): a ping-pong's writer then often came back to read its answer
 * after the answer had arrived. A reader killed between the two loses
 * the bytes as a dead reader does; a peer that writes the word only
 * loses its own wake-ups. */
#define HANDOFF_NS 5000u

void lf__shm_spin_taking(struct lf_shm_conn *c, uint64_t t)
{
	atomic_store_explicit(&c->rx.h->taken, t, memory_order_relaxed);
}

/* The reader's word is older than POLL_NS: it has stopped polling (a
 * spinning reader stamps it at least once a microsecond), or never began
 * since its own write renewed it (lf__shm_spin_busy: a server that works
 * a while after its answer before it reads again). */
static bool stale(struct lf_shm_conn *c, uint64_t now)
{
	uint32_t s = atomic_load_explicit(&c->tx.h->awake, memory_order_relaxed);
	return stamp(now) - s + (POLL_NS >> STAMP_SHIFT) > 2 * (POLL_NS >> STAMP_SHIFT);
}

bool lf__shm_spin_handed_off(struct lf_shm_conn *c, uint64_t t, uint64_t now)
{
	uint32_t s = atomic_load_explicit(&c->tx.h->awake, memory_order_relaxed);

	if (!s || atomic_load_explicit(&c->tx.h->edges, memory_order_relaxed))
		return false;
	if (!now)
		now = lf__sys_now_ns();
	uint64_t end = now + HANDOFF_NS;
	if (stale(c, now)) /* unsigned: within POLL_NS either way */
		return false;
	for (unsigned i = 1;; i++) {
		if ((int64_t)(atomic_load_explicit(&c->tx.h->taken, memory_order_relaxed) - t) >= 0)
			return true;
		/* Whether the reader went to sleep, and the clock, now and then
		 * only: the reader stamps awake while it polls, and a look at
		 * each turn would take that line from it every time. */
		if (i % 8 == 0 && !atomic_load_explicit(&c->tx.h->awake, memory_order_relaxed))
			break;
		if (i % 64 == 0 && ((now = lf__sys_now_ns()) >= end || stale(c, now)))
			break;
		__builtin_ia32_pause();
	}
	return false;
}

/* A read that emptied its ring lingers a moment before it settles (gives
 * the token back, shm_io.c): a writer that streams pushes again soon, and
 * then the token stays for those bytes, the read returns what it took, and
 * neither side makes a system call. A read that settles instead costs the
 * reader a token read and a sleep, and the writer's next push a token and
 * the reader's wake-up; and that wake-up (a Unix socket's, the kernel's
 * "sync" kind) puts the reader on the writer's CPU, where it preempts the
 * writer: at 64-byte writes the two then took turns on one CPU every
 * 13 us, 20 writes a turn.
 *
 * So the linger polls the ring for LINGER_NS (a writer on another CPU),
 * then yields the CPU once (a writer preempted on this one runs its slice
 * first), and looks again; while the writer says it copies into the ring
 * (wbusy, shm_mem.c: a large write) it goes on so, up to COPY_NS. One that
 * finds nothing makes the next settles skip it, 1, 3, 7 ... up to 1023 of
 * them (a request/response peer writes only once this read has returned:
 * its reads linger about once in a thousand); one that finds bytes starts
 * again. The words are the peer's: a peer that holds wbusy at 1 costs this
 * reader at most COPY_NS and a yield in a read that empties the ring, and
 * then the same back-off (a review measured 22 us a read, every read, when
 * a writer's wbusy kept the back-off off), never a byte or a wake-up. */
#define LINGER_NS 1000u
#define COPY_NS 20000u
#define LINGER_BACKOFF 10u
/* A yield that kept this thread off its CPU this long gave it to other
 * work (a machine whose CPUs are all busy), not only to the peer: there a
 * sleep, whose wake-up the scheduler favours, comes back sooner, and the
 * lingers stop yielding for a while (poll_yield). */
#define YIELD_NS 1000000u

/* Polls look(c) for LINGER_NS, then yields once and looks again; goes on
 * so while more(c), up to max_ns. Backs off as said above (b: the side's
 * counts); a slow yield makes the next lingers poll only, 1, 3, 7 ... up
 * to 1023 of them, until a yield is quick again. look's answer (0:
 * nothing came). */
static long poll_yield(struct lf_shm_conn *c, struct lf_linger *b, long (*look)(struct lf_shm_conn *),
		       bool (*more)(struct lf_shm_conn *), uint64_t max_ns, bool always_back_off)
{
	/* A reader backs off also while more(c): wbusy is the peer's word,
	 * and a read that would return at once must not pay for it every
	 * time. A writer that waits for room lingers while the head moves. */
	if (b->skip && (always_back_off || !more(c))) {
		b->skip--;
		return 0;
	}
	bool may_yield = !b->yskip, yielded = false, slow = false;
	if (b->yskip)
		b->yskip--;
	uint64_t start = lf__sys_now_ns(), now = start, poll_end;
	long a = 0;
	do {
		poll_end = now + LINGER_NS;
		for (unsigned i = 1; !(a = look(c)); i++) {
			if (i % 8 == 0 && (now = lf__sys_now_ns()) >= poll_end)
				break;
			__builtin_ia32_pause();
		}
		if (a || !may_yield)
			break;
		uint64_t before = now;
		sched_yield();
		now = lf__sys_now_ns();
		yielded = true;
		slow = slow || now - before >= YIELD_NS;
	} while (!(a = look(c)) && more(c) && now - start < max_ns);
	if (slow) {
		if (b->yfails < LINGER_BACKOFF)
			b->yfails++;
		b->yskip = (1u << b->yfails) - 1;
	} else if (yielded) {
		b->yfails = 0;
	}
	if (a) {
		b->fails = b->skip = 0;
		return a;
	}
	if (b->fails < LINGER_BACKOFF)
		b->fails++;
	b->skip = (1u << b->fails) - 1;
	return 0;
}

static long rx_avail(struct lf_shm_conn *c) { return lf__ring_avail(&c->rx); }
static bool rx_copying(struct lf_shm_conn *c) { return atomic_load_explicit(&c->rx.h->wbusy, memory_order_relaxed) == W_COPY; }

bool lf__shm_spin_linger(struct lf_shm_conn *c)
{
	return poll_yield(c, &c->linger_rx, rx_avail, rx_copying, COPY_NS, true) > 0; /* garbage: settle says so */
}

/* A blocking write that finds its ring full does the same before it
 * sleeps for room (shm_io.c, wait_room): a reader that keeps up makes
 * room within a copy, and the writer's sleep cost a futex wake on the
 * reader's side and a wake-up on its own (at 64 KiB writes, one of each a
 * write). It polls up to COPY_NS while the reader reads (head moved since
 * the writer last looked), else LINGER_NS and a yield. Not for a
 * non-blocking write (EAGAIN at once, as the Unix stream says). Outside
 * txl: its counts, and its read of seen, are a guess (two writer threads
 * may each linger once more than one would). */
static long tx_space(struct lf_shm_conn *c) { return lf__ring_space(&c->tx); }
static bool rx_reading(struct lf_shm_conn *c)
{
	return atomic_load_explicit(&c->tx.h->head, memory_order_relaxed) != c->tx.seen;
}

bool lf__shm_spin_room(struct lf_shm_conn *c)
{
	return poll_yield(c, &c->linger_tx, tx_space, rx_reading, COPY_NS, false) != 0; /* garbage: the next look says so */
}

/* The room wake-up's barrier (docs/shm.md, "Room"). A reader that made
 * room stores head, then reads want_space; a writer about to sleep for
 * room stores want_space, then reads head (store, then load, on both
 * sides: Dekker). A full fence on the reader's side made every read wait
 * for its store of head to reach the writer, whose hand-off is reading
 * that line: one cache-line transfer a message on the round trip's path.
 * So the barrier is asymmetric: once the reader's process is registered
 * for membarrier's MEMBARRIER_CMD_GLOBAL_EXPEDITED its side is the
 * compiler's only, and the writer, about to sleep, issues that command,
 * which returns only once every running thread of every registered process
 * has passed a full barrier (a thread not running is in one): either the
 * reader's load of want_space came after it and sees 1, or its store of
 * head came before it and the writer sees the room. A process that cannot
 * register (no membarrier, a seccomp filter) keeps the full fence. */
static atomic_int light; /* in this process: 1 registered, -1 could not, 0 not tried */

void lf__shm_spin_fork_child(void)
{
	atomic_store_explicit(&light, 0, memory_order_relaxed);
}

void lf__shm_spin_room_light(void)
{
	int l = atomic_load_explicit(&light, memory_order_relaxed);

	if (!l) {
		int e = errno;
		l = lf__sys_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 ? 1 : -1;
		errno = e;
		atomic_store_explicit(&light, l, memory_order_relaxed);
	}
	if (l > 0)
		atomic_signal_fence(memory_order_seq_cst);
	else
		atomic_thread_fence(memory_order_seq_cst);
}

void lf__shm_spin_room_heavy(void)
{
	int e = errno;

	atomic_thread_fence(memory_order_seq_cst);
	lf__sys_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
	errno = e;
}
