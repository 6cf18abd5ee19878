/* The shm tier's rings (src/protocol/ring.c): bytes in order across the
 * wrap, peeks, a full ring, a peer's garbage reported and never acted on,
 * a ring that grows (SO_SNDBUF raised) only when no unread byte would
 * move, and two threads moving 64 MiB through one ring, at one size and
 * growing (the release/acquire pairs: a byte read is a byte written). */
#include "runner.h"
#include "ring.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

static void *page_of(uint32_t area)
{
	void *m = mmap(NULL, LF_RING_MAP_OF(area), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT(m != MAP_FAILED);
	return m;
}

static void *page(void)
{
	return page_of(LF_RING_SIZE);
}

static size_t put(struct lf_ring *w, const void *buf, size_t n)
{
	struct iovec v = { (void *)buf, n };
	long s = lf__ring_space(w);
	ASSERT_GE(s, 0);
	return lf__ring_write(w, &v, 1, n < (size_t)s ? n : (size_t)s);
}

static size_t get(struct lf_ring *r, void *buf, size_t n, bool peek)
{
	struct iovec v = { buf, n };
	long a = lf__ring_avail(r);
	ASSERT_GE(a, 0);
	return lf__ring_read(r, &v, 1, n < (size_t)a ? n : (size_t)a, peek);
}

static void in_order_across_the_wrap(void)
{
	void *m = page();
	struct lf_ring crx, ctx, srx, stx;
	static unsigned char out[100000], in[100000];
	uint64_t next = 0, want = 0;

	lf__ring_views(m, LF_RING_SIZE, false, &crx, &ctx);
	lf__ring_views(m, LF_RING_SIZE, true, &srx, &stx);
	ASSERT(ctx.h == srx.h && stx.h == crx.h && ctx.data == srx.data && ctx.data != crx.data);
	for (int round = 0; round < 40; round++) { /* 40 x 100000 bytes: the ring wraps 15 times */
		for (size_t i = 0; i < sizeof(out); i++)
			out[i] = (unsigned char)(next++ * 7 + 3);
		ASSERT_EQ(put(&ctx, out, sizeof(out)), sizeof(out));
		/* A peek sees the first bytes and leaves them. */
		ASSERT_EQ(get(&srx, in, 10, true), 10);
		ASSERT_EQ(lf__ring_avail(&srx), sizeof(out));
		/* Read through an iovec of three pieces. */
		struct iovec v[3] = { { in, 1 }, { in + 1, 4095 }, { in + 4096, sizeof(in) - 4096 } };
		ASSERT_EQ(lf__ring_read(&srx, v, 3, (size_t)lf__ring_avail(&srx), false), sizeof(in));
		for (size_t i = 0; i < sizeof(in); i++, want++)
			ASSERT_EQ(in[i], (unsigned char)(want * 7 + 3));
	}
	ASSERT_EQ(lf__ring_avail(&srx), 0);
	ASSERT_EQ(lf__ring_avail(&crx), 0); /* the other direction saw nothing */
	munmap(m, LF_RING_MAP);
}

static void full_ring(void)
{
	void *m = page();
	struct lf_ring rx, tx, prx, ptx;
	static unsigned char buf[LF_RING_SIZE + 100];

	lf__ring_views(m, LF_RING_SIZE, false, &rx, &tx);
	lf__ring_views(m, LF_RING_SIZE, true, &prx, &ptx);
	ASSERT_EQ(lf__ring_space(&tx), LF_RING_SIZE);
	ASSERT_EQ(put(&tx, buf, sizeof(buf)), LF_RING_SIZE);
	ASSERT_EQ(lf__ring_space(&tx), 0);
	ASSERT_EQ(put(&tx, buf, 1), 0);
	ASSERT_EQ(lf__ring_avail(&prx), LF_RING_SIZE);
	ASSERT_EQ(get(&prx, buf, 5, false), 5);
	ASSERT_EQ(lf__ring_space(&tx), 5);
	munmap(m, LF_RING_MAP);
}

/* Every word the peer can write, set to garbage: the checks say so, and
 * the end's own position is untouched. */
static void garbage_is_reported(void)
{
	void *m = page();
	struct lf_ring rx, tx;
	unsigned char b[16];

	lf__ring_views(m, LF_RING_SIZE, true, &rx, &tx);
	rx.pos = 1000;
	atomic_store(&rx.h->tail, 999); /* behind the reader */
	ASSERT_EQ(lf__ring_avail(&rx), LF_RING_BAD);
	atomic_store(&rx.h->tail, 1000 + LF_RING_SIZE + 1); /* more than a ring ahead */
	ASSERT_EQ(lf__ring_avail(&rx), LF_RING_BAD);
	atomic_store(&rx.h->tail, 1000 + LF_RING_SIZE); /* exactly full: fine */
	ASSERT_EQ(lf__ring_avail(&rx), LF_RING_SIZE);
	atomic_store(&rx.h->tail, UINT64_MAX);
	ASSERT_EQ(lf__ring_avail(&rx), LF_RING_BAD);
	tx.pos = 5000;
	atomic_store(&tx.h->head, 5001); /* ahead of the writer */
	ASSERT_EQ(lf__ring_space(&tx), LF_RING_BAD);
	atomic_store(&tx.h->head, 5000 - LF_RING_SIZE - 1); /* more than a ring behind */
	ASSERT_EQ(lf__ring_space(&tx), LF_RING_BAD);
	atomic_store(&tx.h->head, 5000);
	ASSERT_EQ(lf__ring_space(&tx), LF_RING_SIZE);
	/* A read never trusts the shared head either: the reader's own
	 * position moves, whatever the peer wrote there. */
	atomic_store(&rx.h->tail, 1010);
	atomic_store(&rx.h->head, 77777);
	ASSERT_EQ(get(&rx, b, sizeof(b), false), 10);
	ASSERT_EQ(rx.pos, 1010);
	munmap(m, LF_RING_MAP);
}

#define AREA (8u * LF_RING_SIZE)

/* n bytes of the pattern from position at, in pieces as room allows. */
static void put_pattern(struct lf_ring *w, uint64_t at, size_t n)
{
	static unsigned char buf[AREA];

	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)((at + i) * 131 >> 3);
	ASSERT_EQ(put(w, buf, n), n);
}

static void get_pattern(struct lf_ring *r, size_t n)
{
	static unsigned char buf[AREA];
	uint64_t at = r->pos;

	ASSERT_EQ(get(r, buf, n, false), n);
	for (size_t i = 0; i < n; i++)
		if (buf[i] != (unsigned char)((at + i) * 131 >> 3))
			ASSERT_EQ(buf[i], (unsigned char)((at + i) * 131 >> 3));
}

/* The first fill grows in place (its bytes keep their offsets); a ring
 * whose unread bytes wrapped grows only once they are read. */
static void grows_without_moving_a_byte(void)
{
	void *m = page_of(AREA);
	struct lf_ring rx, tx, unused;

	lf__ring_views(m, AREA, false, &unused, &tx);
	lf__ring_views(m, AREA, true, &rx, &unused);
	ASSERT_EQ(lf__ring_size(&rx), LF_RING_SIZE);
	put_pattern(&tx, 0, LF_RING_SIZE);
	ASSERT_EQ(lf__ring_space(&tx), 0);
	ASSERT(lf__ring_grow(&tx, LF_RING_SIZE * 3 / 2)); /* full, never wrapped: grows */
	ASSERT_EQ(tx.size, 2 * LF_RING_SIZE);
	ASSERT_EQ(lf__ring_size(&rx), 2 * LF_RING_SIZE);
	ASSERT_EQ(lf__ring_space(&tx), LF_RING_SIZE / 2);
	put_pattern(&tx, tx.pos, LF_RING_SIZE / 2);
	get_pattern(&rx, LF_RING_SIZE / 2 + 100);
	put_pattern(&tx, tx.pos, LF_RING_SIZE / 2 + 100); /* wraps the new size */
	ASSERT_EQ(lf__ring_space(&tx), 0);
	ASSERT(!lf__ring_grow(&tx, 3 * LF_RING_SIZE)); /* its unread bytes would move */
	ASSERT_EQ(tx.size, 2 * LF_RING_SIZE);
	ASSERT_EQ(lf__ring_space(&tx), 0);
	get_pattern(&rx, (size_t)lf__ring_avail(&rx));
	ASSERT(lf__ring_grow(&tx, 3 * LF_RING_SIZE)); /* empty: grows */
	ASSERT_EQ(lf__ring_size(&rx), 4 * LF_RING_SIZE);
	put_pattern(&tx, tx.pos, 3 * LF_RING_SIZE);
	ASSERT_EQ(lf__ring_space(&tx), 0);
	get_pattern(&rx, 3 * LF_RING_SIZE);
	ASSERT(lf__ring_grow(&tx, UINT32_MAX)); /* at most the area */
	ASSERT_EQ(tx.size, AREA);
	ASSERT_EQ(tx.limit, AREA);
	munmap(m, LF_RING_MAP_OF(AREA));
}

/* The size word is the peer's too: anything but a power of two within
 * the area is garbage (no read, avail says so); the writer's own size is
 * never made smaller by it. */
static void garbage_size_is_reported(void)
{
	void *m = page_of(AREA);
	struct lf_ring rx, tx;
	unsigned char b[16];
	uint32_t bad[] = { 3, LF_RING_SIZE / 2, LF_RING_SIZE + 1, 2 * AREA, UINT32_MAX };

	lf__ring_views(m, AREA, true, &rx, &tx);
	atomic_store(&rx.h->tail, 10);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		atomic_store(&rx.h->size, bad[i]);
		ASSERT_EQ(lf__ring_size(&rx), 0);
		ASSERT_EQ(lf__ring_avail(&rx), LF_RING_BAD);
		struct iovec v = { b, sizeof(b) };
		ASSERT_EQ(lf__ring_read(&rx, &v, 1, 10, false), 0);
		ASSERT_EQ(rx.pos, 0);
		atomic_store(&tx.h->size, bad[i]);
		lf__ring_sync(&tx, false);
		ASSERT_EQ(tx.size, LF_RING_SIZE);
	}
	munmap(m, LF_RING_MAP_OF(AREA));
}

/* The writer's room from the head it last read (lf__ring_room): read
 * again only when that leaves less than the write, or when its own
 * position is more than a ring past it (another process of its end
 * wrote); lf__ring_seen checks the head as lf__ring_space does. */
static void room_from_the_head_last_read(void)
{
	void *m = page();
	struct lf_ring rx, tx;

	lf__ring_views(m, LF_RING_SIZE, true, &rx, &tx);
	ASSERT_EQ(lf__ring_room(&tx, 1), LF_RING_SIZE);
	tx.pos = 100; /* wrote 100 */
	atomic_store(&tx.h->head, (uint64_t)1 << 40); /* garbage, not read while the room it knew covers the write */
	ASSERT_EQ(lf__ring_room(&tx, 10), LF_RING_SIZE - 100);
	ASSERT_EQ(lf__ring_room(&tx, LF_RING_SIZE), LF_RING_BAD); /* short: read, and checked */
	ASSERT_EQ(lf__ring_seen(&tx), LF_RING_BAD);
	ASSERT_EQ(tx.seen, 0);
	atomic_store(&tx.h->head, 100);
	ASSERT_EQ(lf__ring_seen(&tx), LF_RING_SIZE);
	ASSERT_EQ(tx.seen, 100);
	tx.pos = 100 + 3 * (uint64_t)LF_RING_SIZE; /* a fork's other process wrote three rings */
	atomic_store(&tx.h->head, tx.pos - 10);
	ASSERT_EQ(lf__ring_room(&tx, 1), LF_RING_SIZE - 10); /* read again, not a wrapped count */
	ASSERT_EQ(tx.seen, tx.pos - 10);
	munmap(m, LF_RING_MAP);
}

struct flow {
	struct lf_ring r;
	uint64_t bytes, sum;
	bool grow; /* the writer asks for more room before each write (a growth that
		    * would move unread bytes is refused; those of the first fill never do) */
};

static void *producer(void *arg)
{
	struct flow *f = arg;
	unsigned char buf[3001];
	uint64_t n = 0;

	while (n < f->bytes) {
		size_t len = sizeof(buf) < f->bytes - n ? sizeof(buf) : (size_t)(f->bytes - n);
		for (size_t i = 0; i < len; i++)
			buf[i] = (unsigned char)((n + i) * 131 >> 3);
		size_t k = 0;
		while (k < len) {
			if (f->grow) /* 4 KiB more each time: its sizes change while the reader reads */
				lf__ring_grow(&f->r, f->r.limit + 4096);
			k += put(&f->r, buf + k, len - k);
		}
		n += len;
	}
	return NULL;
}

static void threads_move(uint32_t area, bool grow)
{
	void *m = page_of(area);
	struct flow w = { .bytes = 64u << 20, .grow = grow }, rd;
	struct lf_ring unused;
	unsigned char buf[4096];
	pthread_t t;

	lf__ring_views(m, area, false, &unused, &w.r);
	lf__ring_views(m, area, true, &rd.r, &unused);
	ASSERT_EQ(pthread_create(&t, NULL, producer, &w), 0);
	for (uint64_t n = 0; n < w.bytes;) {
		size_t k = get(&rd.r, buf, sizeof(buf), false);
		for (size_t i = 0; i < k; i++)
			if (buf[i] != (unsigned char)((n + i) * 131 >> 3))
				ASSERT_EQ(buf[i], (unsigned char)((n + i) * 131 >> 3));
		n += k;
	}
	pthread_join(t, NULL);
	ASSERT_EQ(lf__ring_avail(&rd.r), 0);
	if (grow)
		ASSERT_EQ(lf__ring_size(&rd.r), area);
	munmap(m, LF_RING_MAP_OF(area));
}

static void threads_move_64_mib(void)
{
	threads_move(LF_RING_SIZE, false);
}

static void threads_move_64_mib_growing(void)
{
	threads_move(AREA, true);
}

static const struct lf_test tests[] = {
	{ "in_order_across_the_wrap", in_order_across_the_wrap, 0 },
	{ "full_ring", full_ring, 0 },
	{ "garbage_is_reported", garbage_is_reported, 0 },
	{ "threads_move_64_mib", threads_move_64_mib, 60 },
	{ "grows_without_moving_a_byte", grows_without_moving_a_byte, 0 },
	{ "garbage_size_is_reported", garbage_size_is_reported, 0 },
	{ "threads_move_64_mib_growing", threads_move_64_mib_growing, 60 },
	{ "room_from_the_head_last_read", room_from_the_head_last_read, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
