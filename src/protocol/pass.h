/* The record that goes with a tier socket passed with SCM_RIGHTS
 * (docs/shm.md, "Passing the socket"): the sender puts before the
 * message's descriptors a small sealed memfd named LF_PASS_NAME holding
 * this record, then each passed connection's memfd, and the record says
 * which of the received descriptors is which. Positions in the order
 * the application sees (its descriptors, the memfds, the record last;
 * shm_pass.c's take_record maps them to the array that came), never
 * descriptor numbers: a record can name only descriptors of its own
 * message. The receiver parses it with
 * lf__pass_parse (pure, fuzzed: test/fuzz/fuzz_pass.c), since any
 * process that can send to its socket can write one. */
#ifndef LF_PASS_H
#define LF_PASS_H

#include <stddef.h>
#include <stdint.h>

#define LF_PASS_NAME "loopfast-pass"
#define LF_PASS_MAGIC 0x3173736150664cULL /* "LfPass1" */
#define LF_PASS_RECS 128   /* connections one message may carry (LF_SHM_EXEC_FDS) */
#define LF_PASS_FDS 253    /* the kernel's SCM_MAX_FD */
#define LF_PASS_FLAGS 31u  /* the flags a record may carry (shm_conn.h) */

struct lf_pass_hdr {
	uint64_t magic;
	uint32_t napp; /* the application's descriptors: positions [0, napp) */
	uint32_t n;    /* records that follow */
};

/* One passed tier socket. */
struct lf_pass_rec {
	uint64_t ino, mino; /* the socket's inode, its memfd's */
	uint64_t count;     /* the server's stream bytes read before the ring */
	uint32_t sock;      /* the socket's position */
	int32_t mfd;        /* its memfd's position, -1: the socket of an earlier record (a dup) */
	uint32_t owed;
	uint8_t kind;       /* 's' server, 'c' client */
	uint8_t flags;
	uint16_t pad;
};

#define LF_PASS_SIZE(n) (sizeof(struct lf_pass_hdr) + (size_t)(n) * sizeof(struct lf_pass_rec))

/* buf, len: the record memfd's bytes; nfds: the descriptors received
 * with it (it the last). The records, into out (LF_PASS_RECS of them),
 * and the header into *h, when every field checks out: the application's
 * descriptors come first and the memfds after them, each memfd position
 * named once and every one named, each socket position at most once, a
 * dup only of a socket named before. Returns the number of records, -1
 * for anything else. */
int lf__pass_parse(const void *buf, size_t len, size_t nfds, struct lf_pass_hdr *h, struct lf_pass_rec *out);

#endif
