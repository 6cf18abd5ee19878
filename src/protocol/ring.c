/* The shared-memory tier's single-producer/single-consumer rings (ring.h).
 * The writer copies bytes in and publishes them with a release store of
 * tail; the reader copies them out after an acquire load of tail and
 * gives the room back with a release store of head. Positions are 64-bit
 * byte counts that never wrap in practice; the offset in the ring is the
 * count modulo LF_RING_SIZE (a power of two), so no value of any shared
 * word makes a copy reach outside the ring; a peer that writes garbage
 * into the positions gets LF_RING_BAD from the checks. */
#include "ring.h"

#include <string.h>

_Static_assert((LF_RING_SIZE & (LF_RING_SIZE - 1)) == 0, "the ring's size is a power of two");
_Static_assert(sizeof(struct lf_ring_page) <= LF_RING_PAGE, "the headers fit their page");

long lf__ring_avail(const struct lf_ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->h->tail, memory_order_acquire);
	uint64_t n = tail - r->pos;

	return n > LF_RING_SIZE ? LF_RING_BAD : (long)n;
}

long lf__ring_space(const struct lf_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->h->head, memory_order_acquire);
	uint64_t used = r->pos - head;

	return used > LF_RING_SIZE ? LF_RING_BAD : (long)(LF_RING_SIZE - used);
}

/* Copies len bytes between the ring at position pos and buf, in at most
 * two pieces (the ring wraps). */
static void ring_copy(unsigned char *data, uint64_t pos, unsigned char *buf, size_t len, bool out)
{
	size_t off = (size_t)(pos & (LF_RING_SIZE - 1)), first = LF_RING_SIZE - off;

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
static size_t ring_iov(unsigned char *data, uint64_t pos, const struct iovec *iov, size_t n, size_t max, bool out)
{
	size_t done = 0;

	for (size_t i = 0; i < n && done < max; i++) {
		size_t len = iov[i].iov_len < max - done ? iov[i].iov_len : max - done;
		if (len)
			ring_copy(data, pos + done, iov[i].iov_base, len, out);
		done += len;
	}
	return done;
}

size_t lf__ring_read(struct lf_ring *r, const struct iovec *iov, size_t n, size_t max, bool peek)
{
	size_t done = ring_iov(r->data, r->pos, iov, n, max, true);

	if (!peek && done) {
		r->pos += done;
		atomic_store_explicit(&r->h->head, r->pos, memory_order_release);
	}
	return done;
}

size_t lf__ring_write(struct lf_ring *r, const struct iovec *iov, size_t n, size_t max)
{
	size_t done = ring_iov(r->data, r->pos, iov, n, max, false);

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

void lf__ring_views(void *map, bool server, struct lf_ring *rx, struct lf_ring *tx)
{
	struct lf_ring_page *p = map;
	unsigned char *c2s = (unsigned char *)map + LF_RING_PAGE, *s2c = c2s + LF_RING_SIZE;

	*rx = (struct lf_ring){ &p->ring[server ? 0 : 1], server ? c2s : s2c, 0 };
	*tx = (struct lf_ring){ &p->ring[server ? 1 : 0], server ? s2c : c2s, 0 };
}
