/* libFuzzer target: the shm tier's ring code (src/protocol/ring.c) against
 * a peer that writes anything into the shared words. The input is a
 * program: each 9-byte step is an operation byte and a 64-bit value. The
 * peer sets the tail, head or size word it shares (any value), or this end
 * reads or writes up to `value` bytes through the checks, as shm.c does,
 * or its writer asks the ring to grow, or the value's bytes are read as
 * the stream a leaving reader takes off before the writer's copy
 * (lf__leave_scan). The rings' data lives in exactly
 * area-sized allocations, so ASan sees any copy outside them. Checked:
 * memory safety; avail and space are LF_RING_BAD or within the area; a
 * grown ring's size is a power of two within the area, its limit within
 * it; a read or a write moves the end's own position by what it returned,
 * never more than the check allowed. */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry */

/* An area of four initial rings, so that growth is driven too. */
#define AREA (4u * LF_RING_SIZE)
static unsigned char scratch[AREA + 1];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Allocated once (each exactly an area: ASan still sees a copy past
	 * it), so that an input costs its steps, not two 1 MiB mallocs. */
	static struct lf_ring_hdr *h;
	static unsigned char *rxd, *txd;

	if (!h && (!(h = aligned_alloc(64, 2 * sizeof(*h))) || !(rxd = malloc(AREA)) || !(txd = malloc(AREA))))
		abort();
	memset(h, 0, 2 * sizeof(*h));
	struct lf_ring rx = { &h[0], rxd, 0, AREA, LF_RING_SIZE, LF_RING_SIZE, 0 };
	struct lf_ring tx = { &h[1], txd, 0, AREA, LF_RING_SIZE, LF_RING_SIZE, 0 };
	for (size_t at = 0; at + 9 <= size; at += 9) {
		uint64_t v;
		memcpy(&v, data + at + 1, sizeof(v));
		switch (data[at] % 8) {
		case 0:
			atomic_store(&rx.h->tail, v); /* the peer's tail: anything */
			break;
		case 1:
			atomic_store(&tx.h->head, v); /* the peer's head: anything */
			break;
		case 2: { /* read up to v bytes, maybe peeking, in two pieces */
			long a = lf__ring_avail(&rx);
			if (a != LF_RING_BAD && (a < 0 || a > (long)AREA))
				abort();
			if (a <= 0)
				break;
			size_t want = (size_t)(v % (AREA + 1)), max = want < (size_t)a ? want : (size_t)a;
			struct iovec iov[2] = { { scratch, max / 3 }, { scratch + max / 3, AREA + 1 - max / 3 } };
			uint64_t pos = rx.pos;
			bool peek = v >> 63;
			size_t got = lf__ring_read(&rx, iov, 2, max, peek);
			if (got != max || rx.pos != (peek ? pos : pos + got))
				abort();
			break;
		}
		case 3: { /* write up to v bytes, the room counted as the library does (from the head last read) */
			lf__ring_sync(&tx, false); /* as the library does: a size the page says grew is taken */
			size_t want = (size_t)(v % (AREA + 1));
			long s = lf__ring_room(&tx, want ? want : 1);
			if (s != LF_RING_BAD && (s < 0 || s > (long)tx.limit || tx.limit > tx.size || tx.size > AREA))
				abort();
			if (s <= 0)
				break;
			size_t max = want < (size_t)s ? want : (size_t)s;
			struct iovec iov = { scratch, AREA + 1 };
			uint64_t pos = tx.pos;
			if (lf__ring_write(&tx, &iov, 1, max) != max || tx.pos != pos + max ||
			    (max && atomic_load(&tx.h->tail) != tx.pos))
				abort();
			s = lf__ring_seen(&tx); /* the head checked after the write */
			if (s != LF_RING_BAD && (s < 0 || s > (long)tx.limit))
				abort();
			break;
		}
		case 4: /* the peer writes either ring's size word: anything */
			atomic_store(&(v >> 63 ? tx : rx).h->size, (uint32_t)v);
			break;
		case 5: /* the writer asks for a limit of up to the area and more */
			lf__ring_grow(&tx, (uint32_t)(v % (2 * AREA)));
			if (tx.limit > tx.size || tx.size > AREA || (tx.size & (tx.size - 1)))
				abort();
			break;
		case 7: { /* a leaving reader's look at the stream before the copy: the value's bytes as the peer sent them */
			char b[sizeof(v)];
			bool asked = false, any = false;
			memcpy(b, &v, sizeof(b));
			long k = lf__leave_scan(b, sizeof(b), &asked);
			if (k < -1 || k > (long)sizeof(b) || (k > 0 && b[k - 1] != LF_BYTE_COPY))
				abort();
			for (long i = 0; i < (k > 0 ? k - 1 : k == 0 ? (long)sizeof(b) : 0); i++) {
				if (b[i] != LF_BYTE_TOKEN && b[i] != LF_BYTE_EDGE && b[i] != LF_BYTE_ASK)
					abort(); /* taken off the stream: only what may stand before the copy */
				any = any || b[i] == LF_BYTE_ASK;
			}
			if (k >= 0 && any != asked)
				abort();
			break;
		}
		default: /* this end's position far along (a long-lived connection) */
			rx.pos += v & 0xffffffff;
			tx.pos += v >> 32;
			atomic_store(&tx.h->tail, tx.pos); /* as a write would have */
			break;
		}
	}
	return 0;
}
