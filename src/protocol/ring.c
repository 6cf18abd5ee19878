/* The shared-memory tier's single-producer/single-consumer rings (ring.h).
 * The writer copies bytes in and publishes them with a release store of
 * tail; the reader copies them out after an acquire load of tail and
 * gives the room back with a release store of head. Positions are 64-bit
 * byte counts that never wrap in practice; the offset in the ring is the
 * count modulo the ring's size (a power of two, checked to lie within the
 * area the mapping holds), so no value of any shared word makes a copy
 * reach outside the area; a peer that writes garbage into the positions
 * or the size gets LF_RING_BAD from the checks. */
#include "ring.h"

#include <string.h>

_Static_assert((LF_RING_SIZE & (LF_RING_SIZE - 1)) == 0, "the ring's size is a power of two");
_Static_assert(sizeof(struct lf_ring_page) <= LF_RING_PAGE, "the headers fit their page");
_Static_assert(sizeof(struct lf_ring_hdr) == 320, "five cache lines a direction (docs/shm.md)");

static bool size_ok(uint32_t m, uint32_t area)
{
	return !(m & (m - 1)) && m >= LF_RING_SIZE && m <= area;
}

uint32_t lf__ring_size(const struct lf_ring *r)
{
	uint32_t v = atomic_load_explicit(&r->h->size, memory_order_acquire), m = v ? v : LF_RING_SIZE;

	return size_ok(m, r->area) ? m : 0;
}

/* The size is read after tail: a reader that sees bytes placed under a
 * new size sees the size too (the writer stored it first). */
long lf__ring_avail(const struct lf_ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->h->tail, memory_order_acquire);
	uint64_t n = tail - r->pos, size = lf__ring_size(r);

	return n > size ? LF_RING_BAD : (long)n;
}

static long space_at(const struct lf_ring *r, uint64_t head)
{
	uint64_t used = r->pos - head;

	return used > r->size ? LF_RING_BAD : used >= r->limit ? 0 : (long)(r->limit - used);
}

long lf__ring_space(const struct lf_ring *r)
{
	return space_at(r, atomic_load_explicit(&r->h->head, memory_order_acquire));
}

/* The head seen is kept only while it makes sense with this position
 * (at most a ring behind: a forked process of this end may have moved
 * the position since); a hostile reader's head is checked by
 * lf__ring_space when it is read, as before. */
long lf__ring_room(struct lf_ring *r, size_t want)
{
	uint64_t used = r->pos - r->seen;

	if (used < r->limit && r->limit - used >= want)
		return (long)(r->limit - used);
	return lf__ring_seen(r);
}

long lf__ring_seen(struct lf_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->h->head, memory_order_acquire);
	long s = space_at(r, head);

	if (s >= 0)
		r->seen = head;
	return s;
}

bool lf__ring_grow(struct lf_ring *r, uint32_t limit)
{
	uint32_t m = r->size;

	if (limit > r->area)
		limit = r->area;
	if (limit <= r->limit)
		return true;
	while (m < limit)
		m *= 2;
	if (m != r->size) {
		uint64_t head = atomic_load_explicit(&r->h->head, memory_order_acquire), used = r->pos - head;
		uint64_t block = ~(uint64_t)(r->size - 1);
		if (used > r->size || (used && (((head ^ (r->pos - 1)) & block) || (head & (m - 1)) >= r->size)))
			return false;
		atomic_store_explicit(&r->h->size, m, memory_order_release);
		r->size = m;
	}
	r->limit = limit;
	return true;
}

/* Copies len bytes between the ring (of size bytes) at position pos and
 * buf, in at most two pieces (the ring wraps). */
static void ring_copy(unsigned char *data, uint32_t size, uint64_t pos, unsigned char *buf, size_t len, bool out)
{
	size_t off = (size_t)(pos & (size - 1)), first = size - off;

	if (first > len)
		first = len;
	if (out) {
		memcpy(buf, data + off, first);
		memcpy(buf + first, data, len - first);
	} else {
		memcpy(data + off, buf, first);
		memcpy(data, buf + first, len - first);
	}
}

/* Walks iov[0..n) for up to max bytes, copying each piece. */
static size_t ring_iov(unsigned char *data, uint32_t size, uint64_t pos, const struct iovec *iov, size_t n, size_t max,
		       bool out)
{
	size_t done = 0;

	for (size_t i = 0; i < n && done < max; i++) {
		size_t len = iov[i].iov_len < max - done ? iov[i].iov_len : max - done;
		if (len)
			ring_copy(data, size, pos + done, iov[i].iov_base, len, out);
		done += len;
	}
	return done;
}

size_t lf__ring_read(struct lf_ring *r, const struct iovec *iov, size_t n, size_t max, bool peek)
{
	uint32_t size = lf__ring_size(r);
	size_t done = size ? ring_iov(r->data, size, r->pos, iov, n, max, true) : 0;

	if (!peek && done) {
		r->pos += done;
		atomic_store_explicit(&r->h->head, r->pos, memory_order_release);
	}
	return done;
}

size_t lf__ring_write(struct lf_ring *r, const struct iovec *iov, size_t n, size_t max)
{
	size_t done = ring_iov(r->data, r->size, r->pos, iov, n, max, false);

	if (done) {
		r->pos += done;
		atomic_store_explicit(&r->h->tail, r->pos, memory_order_release);
	}
	return done;
}

void lf__ring_sync(struct lf_ring *r, bool reader)
{
	r->pos = atomic_load_explicit(reader ? &r->h->head : &r->h->tail, memory_order_relaxed);
}

void lf__ring_views(void *map, uint32_t area, bool server, struct lf_ring *rx, struct lf_ring *tx)
{
	struct lf_ring_page *p = map;
	unsigned char *c2s = (unsigned char *)map + LF_RING_PAGE, *s2c = c2s + area;

	*rx = (struct lf_ring){ &p->ring[server ? 0 : 1], server ? c2s : s2c, 0, area, LF_RING_SIZE, LF_RING_SIZE, 0 };
	*tx = (struct lf_ring){ &p->ring[server ? 1 : 0], server ? s2c : c2s, 0, area, LF_RING_SIZE, LF_RING_SIZE, 0 };
}

long lf__leave_scan(const char *b, size_t n, bool *asked)
{
	for (size_t i = 0; i < n; i++) {
		if (b[i] == LF_BYTE_COPY)
			return (long)i + 1;
		if (b[i] == LF_BYTE_ASK)
			*asked = true;
		else if (b[i] != LF_BYTE_TOKEN && b[i] != LF_BYTE_EDGE)
			return -1;
	}
	return 0;
}
