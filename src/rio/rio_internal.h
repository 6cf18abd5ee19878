/* Registered I/O internals shared by rio.c (domain, buffers, completion
 * queues) and rio_rq.c (request queues). */
#ifndef LF_RIO_INTERNAL_H
#define LF_RIO_INTERNAL_H

#include "internal.h"
#include "loopfast/rio.h"

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

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

/* Turns one CQE into a result. Returns 1 if *res was filled, 0 if the CQE
 * was internal. Called with cq->cq_lock held. */
int lf__rio_complete(struct lf_rio_cq *cq, const struct io_uring_cqe *cqe,
		     struct lf_rio_result *res);
/* Moves CQEs into the stash so that lf_rio_rq_close() can wait for its own
 * completions without losing other queues'. Called with cq_lock held. */
void lf__rio_cq_stash(struct lf_rio_cq *cq);
/* Frees a request queue whose last completion has been reaped or whose
 * completion queues are gone. Called with rio->lock held. */
void lf__rio_rq_free(struct lf_rio_rq *rq);
/* Checks that a slice lies inside a registered region; returns its address. */
void *lf__rio_slice(struct lf_rio *rio, const struct lf_rio_buf *buf);

#endif
