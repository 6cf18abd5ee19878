/* Registered I/O internals shared by the files of src/rio, which call each
 * other in straight layers, each only downwards:
 *
 *   rio_rq.c        request queues: create, close, post, cancel, multishot
 *   rio_cq.c        completion queues: rings, notification, dequeue, port
 *   rio_complete.c  what a completion does to its request; freeing queues
 *   rio.c           the domain, registered buffers, ring tables
 */
#ifndef LF_RIO_INTERNAL_H
#define LF_RIO_INTERNAL_H

#include "loopfast/rio.h"

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* The public calls; everything else is hidden (-fvisibility=hidden), and
 * src/rio/loopfast-rio.map lets out only lf_rio_*. */
#define LF_RIO_EXPORT __attribute__((visibility("default")))

#define LF_RIO_MAX_BUFS 64   /* registered regions per domain */
#define LF_RIO_MAX_FILES 256 /* request queues per completion queue */
#define LF_RIO_MAX_THREADS 64
#define LF_RIO_MAX_SIZE 32768

struct rio_region {
	void *addr;
	size_t len;
	bool used;
	atomic_int inflight; /* requests (and multishot rings) using it */
};

enum rio_kind { RIO_RECV, RIO_RECV_FROM, RIO_SEND, RIO_MSHOT };

/* One outstanding request; its address is the CQE's user_data. */
struct rio_req {
	struct lf_rio_rq *rq;
	void *ctx;
	struct lf_rio_buf buf;
	uint8_t kind;
	bool busy;
	int32_t addr_id; /* region holding the address of a receive-from, or -1 */
	struct msghdr msg;
	struct iovec iov;
	struct sockaddr_storage addr;
	struct rio_req *next_free;
};

struct rio_mshot {
	bool active;       /* the ring is registered */
	bool armed;        /* a multishot SQE is outstanding */
	bool want_rearm;   /* ended on -ENOBUFS: re-arm once slices return */
	bool stopped;      /* lf_rio_cancel(): never re-arm */
	struct io_uring_buf_ring *br;
	uint32_t count, slice_len;
	uint32_t region, base; /* the slice cut into the ring */
	char *base_ptr;
	uint16_t bgid;
	atomic_uint delivered;  /* slices handed out (written under the cq lock) */
	atomic_uint recycled;   /* slices given back */
	struct rio_req req;
};

struct lf_rio_cq {
	struct lf_rio *rio;
	struct io_uring ring;
	enum lf_rio_notify_type type;
	unsigned size, reserved;
	int efd;
	bool armed;
	bool coop;         /* IORING_SETUP_COOP_TASKRUN|TASKRUN_FLAG */
	bool single;       /* LF_RIO_CQ_SINGLE_THREAD: DEFER_TASKRUN, owner only */
	pthread_t owner;
	pthread_mutex_t sq_lock, cq_lock;
	bool fixed[LF_RIO_MAX_BUFS]; /* region registered as a fixed buffer here */
	bool file_used[LF_RIO_MAX_FILES];
	unsigned nrq;      /* open request queues using it */
	struct lf_rio_result *stash; /* results reaped by lf_rio_rq_close() */
	unsigned nstash;
	/* LF_RIO_PORT */
	pthread_t threads[LF_RIO_MAX_THREADS];
	unsigned nthreads, batch;
	lf_rio_port_fn fn;
	void *arg;
	atomic_bool stop;
	struct lf_rio_cq *next;
};

struct lf_rio_rq {
	struct lf_rio *rio;
	struct lf_rio_cq *rcq, *scq;
	int fd, rfile, sfile; /* fixed-file slots in rcq and scq */
	int type;             /* SOCK_STREAM or SOCK_DGRAM */
	void *sock_ctx;
	unsigned max_recv, max_send, nrecv, nsend;
	atomic_bool closing;
	bool orphan;          /* closed but completions still due: freed on the last */
	unsigned pending;     /* CQEs still to come */
	pthread_mutex_t lock;
	struct rio_req *reqs; /* max_recv + max_send */
	struct rio_req *free_recv, *free_send;
	struct rio_mshot ms;
	struct lf_rio_rq *next;
};

struct lf_rio {
	pthread_mutex_t lock;
	struct rio_region bufs[LF_RIO_MAX_BUFS];
	struct lf_rio_cq *cqs;
	struct lf_rio_rq *rqs;
};

/* Returns 0, or -EPERM when a single-thread queue is used by another thread. */
static inline int lf__rio_cq_owner(const struct lf_rio_cq *cq)
{
	return !cq->single || pthread_equal(cq->owner, pthread_self()) ? 0 : -EPERM;
}

/* Returns an SQE of cq's ring, submitting to make room if it is full, or
 * NULL. Called with sq_lock held. */
static inline struct io_uring_sqe *lf__rio_cq_sqe(struct lf_rio_cq *cq)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&cq->ring);

	if (!sqe) {
		io_uring_submit(&cq->ring);
		sqe = io_uring_get_sqe(&cq->ring);
	}
	return sqe;
}

/* rio.c */

/* Checks that a slice lies inside a registered region; returns its address. */
void *lf__rio_slice(struct lf_rio *rio, const struct lf_rio_buf *buf);
/* Installs region `id` in cq's fixed buffer table, or clears it when addr
 * is NULL. Called with rio->lock held. */
void lf__rio_set_fixed(struct lf_rio_cq *cq, int id, void *addr, size_t len);
/* Puts fd in a free slot of cq's fixed-file table. Returns the slot or
 * -errno (-ENOSPC when full). Called with rio->lock held. */
int lf__rio_take_file(struct lf_rio_cq *cq, int fd);
/* Empties a fixed-file slot; does nothing for a NULL cq or a slot < 0. */
void lf__rio_drop_file(struct lf_rio_cq *cq, int slot);

/* rio_complete.c */

/* Turns one CQE into a result. Returns 1 if *res was filled, 0 if the CQE
 * was internal. Called with cq->cq_lock held. */
int lf__rio_complete(struct lf_rio_cq *cq, const struct io_uring_cqe *cqe,
		     struct lf_rio_result *res);
/* Gives a finished (or never submitted) request back to its queue. */
void lf__rio_req_put(struct lf_rio_rq *rq, struct rio_req *r);
/* Arms the multishot receive. Returns 0 or -EBUSY. Called with rq->lock held. */
int lf__rio_ms_arm(struct lf_rio_rq *rq);
/* Takes a request queue off the domain's list. Called with rio->lock held. */
void lf__rio_rq_unlink(struct lf_rio_rq *rq);
/* Frees a request queue whose last completion has been reaped or whose
 * completion queues are gone. Called with rio->lock held. */
void lf__rio_rq_free(struct lf_rio_rq *rq);
/* Frees the closed request queues still waiting for completions on cq,
 * once its ring has exited. Called with rio->lock held. */
void lf__rio_rq_free_orphans(struct lf_rio_cq *cq);

/* rio_cq.c */

/* Moves CQEs into the stash so that lf_rio_rq_close() can wait for its own
 * completions without losing other queues'. Called with cq_lock held. */
void lf__rio_cq_stash(struct lf_rio_cq *cq);

#endif
