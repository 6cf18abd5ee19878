/* The shared-memory tier's rings (docs/shm.md): the layout of the memfd
 * two processes share, and the single-producer/single-consumer ring code.
 * Every word of the memfd can be written by the peer: the peer's position
 * is read through the checks here, so that garbage is reported
 * (LF_RING_BAD), and every offset is masked into the ring, so that no
 * value of any word makes a copy reach outside it. Part of the
 * protocol: a change bumps LF_PROTO_VERSION. Pure (no system call); the
 * fuzz target test/fuzz/fuzz_ring.c drives it with a hostile peer. */
#ifndef LF_RING_H
#define LF_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define LF_RING_MAGIC 0x6873464cu /* "LFsh" */
/* Bytes of data per direction to begin with: at least a Unix stream's
 * default buffer (212,992), so that a writer never waits earlier than it
 * would there. A ring grows (a power of two, at most its area) to follow a
 * raised SO_SNDBUF (lf__ring_grow; docs/shm.md, "Memory"). */
#define LF_RING_SIZE (256u * 1024u)
/* The most data area per direction a memfd may hold (the server sizes it
 * by what SO_SNDBUF can reach: net.core.wmem_max). */
#define LF_RING_MAX (64u * 1024u * 1024u)
#define LF_RING_PAGE 4096u
/* The memfd: a page of headers, then the client-to-server ring's data
 * area, then the server-to-client ring's, each `area` bytes. */
#define LF_RING_MAP_OF(area) (LF_RING_PAGE + 2u * (size_t)(area))
#define LF_RING_MAP LF_RING_MAP_OF(LF_RING_SIZE)

/* One direction's shared words, each side's on its own cache line. */
struct lf_ring_hdr {
	_Alignas(64) _Atomic uint64_t tail;  /* writer: bytes ever written */
	_Atomic uint32_t bell;               /* 1: a token is (or is about to be) on the socket */
	_Atomic uint32_t want_space;         /* writer waits for room (futex on space_seq) */
	_Atomic uint64_t pre;                /* client-to-server: bytes the client wrote on the stream first */
	_Atomic uint32_t switched;           /* ... and that number is final */
	_Atomic uint32_t edges;              /* reader: an edge byte for every push (it has an epoll ET registration) */
	_Atomic uint32_t fin;                /* writer: its end is closing (bit 0: close, SHUT_WR; the reader looks at the socket), +2 after each close of its end (the peer's writer looks) */
	_Atomic uint32_t size;               /* writer: the ring's size now, a power of two within the area (0: LF_RING_SIZE); grows only */
	_Atomic uint64_t urg;                /* writer: 1 + the position of its last urgent byte (MSG_OOB), stored before the byte (0: none yet) */
	_Atomic uint64_t urg_sig;            /* the urgent signal (one MSG_OOB byte on the socket): 0 none, 1 + the mark it stands for (writer), LF_URG_TAKING (the reader takes it off) */
	_Atomic uint32_t others;             /* writer's end: how many more processes than one hold it (docs/shm.md, "Who holds an end"); only that end's processes use it */
	_Alignas(64) _Atomic uint64_t head;  /* reader: bytes ever read */
	_Atomic uint64_t taken;              /* reader: the tail up to which the read it is in takes every byte (shm_spin.c) */
	_Atomic uint32_t space_seq;          /* reader bumps it (and wakes) after making room */
	_Atomic uint32_t want_data;          /* reader waits for more bytes (SO_RCVLOWAT; futex on data_seq) */
	_Atomic uint32_t data_seq;           /* writer bumps it (and wakes) after a push it was asked for */
	_Atomic uint32_t leave;              /* leaving the tier (LF_LEAVE_*, docs/shm.md "Leaving the tier"): the reader asks, the writer answers */
	/* Words on lines of their own, so that no side keeps writing a line
	 * the other reads on every message (a cache-line transfer each time,
	 * docs/shm.md "Spinning"): the polling reader stamps awake every
	 * 256 ns, which the writer reads once a push; the writer exchanges
	 * wbusy before every copy and reads trim, which change only at a
	 * give-back (shm_mem.c). taken stays with head and want_data: the
	 * writer reads that one line of the reader's after each push (measured:
	 * taken on a line of its own was slower). */
	_Alignas(64) _Atomic uint32_t awake; /* reader: its clock (ns >> 8, never 0) at its last poll of the empty ring, 0: it sleeps (shm_spin.c) */
	_Alignas(64) _Atomic uint32_t wbusy; /* writer: 1 while it copies; 2 idle (0: it never wrote, or knows no trims) */
	_Alignas(64) _Atomic uint32_t trim;  /* reader: 1 while it gives the empty ring's pages back */
};

struct lf_ring_page {
	uint32_t magic, version, size; /* size: each direction's data area */
	struct lf_ring_hdr ring[2]; /* [0] client to server, [1] server to client */
};

/* One end's private view of one direction. */
struct lf_ring {
	struct lf_ring_hdr *h;
	unsigned char *data;
	uint64_t pos; /* reader: its head; writer: its tail (never read back from h) */
	uint32_t area;  /* bytes of data area (checked when mapped) */
	uint32_t size;  /* writer: the ring's size, as it stored it in h */
	uint32_t limit; /* writer: the most bytes it lets wait in the ring (<= size) */
	uint64_t seen;  /* writer: a position the reader's head had reached (lf__ring_room) */
};

/* A ring header's leave word: LF_LEAVE_ASK, stored by the reader, asks
 * the writer to move the bytes it has not read onto the stream, after
 * LF_BYTE_COPY; LF_LEAVE_COPY, stored by the writer, says it does (its
 * writes go on the stream from then); LF_LEAVE_DONE, stored by the
 * reader, that it reads the stream. The bytes on the stream that say
 * where each direction leaves: the reader's request (a wake-up only), the
 * writer's copy, and the end of a writer's ring bytes. */
enum { LF_LEAVE_NONE, LF_LEAVE_ASK, LF_LEAVE_COPY, LF_LEAVE_DONE };
#define LF_BYTE_TOKEN 't'
#define LF_BYTE_EDGE 'e'
#define LF_BYTE_ASK 'r'
#define LF_BYTE_COPY 'k'
#define LF_BYTE_LEFT 'l'
/* The stream a leaving reader reads before the writer's copy (n bytes):
 * the index just past LF_BYTE_COPY when every byte before it is a token,
 * an edge byte or a request (*asked: one of those), 0 when all n are
 * such bytes (the copy has not come), -1 for anything else (garbage). */
long lf__leave_scan(const char *b, size_t n, bool *asked);

#define LF_RING_BAD (-1)
#define LF_URG_TAKING UINT64_MAX

/* The ring's size as its writer stored it: a power of two from
 * LF_RING_SIZE to the area, else 0 (garbage). */
uint32_t lf__ring_size(const struct lf_ring *r);
/* Reader: bytes readable (0..the ring's size), or LF_RING_BAD when the peer's
 * tail is behind the reader or more than a ring ahead, or its size is garbage. */
long lf__ring_avail(const struct lf_ring *r);
/* Writer: bytes of room (up to its limit), or LF_RING_BAD when the peer's
 * head is ahead of the writer or more than a ring behind. */
long lf__ring_space(const struct lf_ring *r);
/* Writer: the room lf__ring_space would say, without reading the
 * reader's head (a cache-line transfer from the reader's core, on every
 * message of a ping-pong) while the head it last read leaves at least
 * `want` bytes: the room then is at least that (the head only moves on),
 * and the writer needs no more. Otherwise lf__ring_seen. */
long lf__ring_room(struct lf_ring *r, size_t want);
/* Writer: lf__ring_space, remembering the head it read for lf__ring_room.
 * Called after each write too (the head is checked at every write, as
 * before, but once the bytes are published, off their way). */
long lf__ring_seen(struct lf_ring *r);
/* Writer: lets up to `limit` bytes (at most the area) wait in the ring,
 * growing its size if need be. A size can change only while every unread
 * byte has the same place under both sizes (the ring is empty, or its
 * unread bytes lie in the first `size` bytes of a block of the new size:
 * the first fill is), so that a reader that read the size before the
 * change still reads the right bytes. false: not now (the limit stays).
 * Garbage in head also gives false (the next space says LF_RING_BAD). */
bool lf__ring_grow(struct lf_ring *r, uint32_t limit);
/* Copies up to max bytes (max <= what avail said) into iov[0..n); peek:
 * without consuming. Returns the bytes copied (0: the size is garbage). */
size_t lf__ring_read(struct lf_ring *r, const struct iovec *iov, size_t n, size_t max, bool peek);
/* Copies up to max bytes (max <= what space said) from iov[0..n) and
 * publishes them. Returns the bytes copied. */
size_t lf__ring_write(struct lf_ring *r, const struct iovec *iov, size_t n, size_t max);
/* Takes the end's own position back from the page (reader: head; writer:
 * tail): a forked process that shares the connection may have moved it
 * (and a writer's size: the caller decides, lf__shm_mem_room).
 * Whatever the peer wrote there instead, the copies stay in the ring (the
 * offset is masked) and the checks above still bound every count. */
void lf__ring_sync(struct lf_ring *r, bool reader);
/* Sets the views of both directions on a mapping of LF_RING_MAP_OF(area)
 * bytes (area: a power of two from LF_RING_SIZE to LF_RING_MAX, checked by
 * the caller; server: true for the server's end). */
void lf__ring_views(void *map, uint32_t area, bool server, struct lf_ring *rx, struct lf_ring *tx);

#endif
