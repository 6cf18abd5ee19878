/* loopfast registered I/O: Winsock RIO's shape on io_uring.
 *
 * Register large page-aligned buffers once and refer to slices of them
 * (buffer id, offset, length) in I/O calls. Completions go to fixed-size
 * completion queues that are polled (no system call while completions are
 * present), event driven (an eventfd becomes readable once per notify call)
 * or served by a pool of threads (completion-port style). A request queue
 * binds one socket to a receive and a send completion queue, with limits on
 * outstanding receives and sends.
 *
 * Every function returns 0 or a non-negative value on success and -errno on
 * error, like liburing. Objects are not reference counted: close request
 * queues before their completion queues, and both before lf_rio_close().
 */
#ifndef LOOPFAST_RIO_H
#define LOOPFAST_RIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

struct lf_rio;
struct lf_rio_cq;
struct lf_rio_rq;

/* A slice of a registered buffer. */
struct lf_rio_buf {
	uint32_t id;     /* from lf_rio_register_buffer() */
	uint32_t offset; /* bytes from the start of the registered region */
	uint32_t length; /* bytes */
};

/* One completion, as RIORESULT. */
struct lf_rio_result {
	int32_t status;        /* 0 or -errno */
	uint32_t bytes;        /* bytes transferred */
	void *sock_ctx;        /* the request queue's context */
	void *req_ctx;         /* the request's context */
	struct lf_rio_buf buf; /* the slice that holds the data */
	uint32_t flags;        /* LF_RIO_RES_* */
};

/* The result came from a multishot receive: return buf with lf_rio_recycle(). */
#define LF_RIO_RES_MULTISHOT (1u << 0)
/* The request was a send. */
#define LF_RIO_RES_SEND      (1u << 1)
/* A multishot receive goes on after this result; without it, this was its last. */
#define LF_RIO_RES_MORE      (1u << 2)

/* Request flags. */
#define LF_RIO_DEFER (1u << 0) /* queue the request; submit at the next call or lf_rio_commit() */

enum lf_rio_notify_type {
	LF_RIO_POLLED = 0, /* the caller polls lf_rio_dequeue() */
	LF_RIO_EVENT = 1,  /* an eventfd becomes readable after lf_rio_notify() */
	LF_RIO_PORT = 2,   /* a pool of threads dequeues and calls a callback */
};

/* Called by a completion-port thread with a batch of results. */
typedef void (*lf_rio_port_fn)(struct lf_rio_cq *cq, struct lf_rio_result *res,
			       unsigned n, void *arg);

/* lf_rio_notify.flags: a kernel thread (io_uring SQPOLL) submits requests
 * and performs receives for this queue, on another CPU when there is one.
 * It spins while busy (up to 50 ms after the last request) and can add
 * milliseconds of latency when CPUs are scarce: for throughput, not latency. */
#define LF_RIO_CQ_KERNEL_THREAD (1u << 0)
/* lf_rio_notify.flags, LF_RIO_POLLED only: the creating thread is the only
 * one that posts requests to the queue and dequeues from it (other threads
 * get -EPERM). io_uring then defers all completion work until
 * lf_rio_dequeue() finds the queue empty and collects it
 * (IORING_SETUP_DEFER_TASKRUN), its cheapest mode. */
#define LF_RIO_CQ_SINGLE_THREAD (1u << 1)

struct lf_rio_notify {
	enum lf_rio_notify_type type;
	unsigned flags;    /* LF_RIO_CQ_* */
	unsigned threads;  /* LF_RIO_PORT: pool size (1..64) */
	unsigned batch;    /* LF_RIO_PORT: results per callback (0 = 64) */
	lf_rio_port_fn fn; /* LF_RIO_PORT: the callback */
	void *arg;         /* LF_RIO_PORT: passed to fn */
};

/* Opens a registered-I/O domain. Returns 0 or -errno (-ENOSYS: no io_uring; -EPERM: disabled). */
int lf_rio_open(struct lf_rio **rio);
/* Releases the domain. Returns 0, or -EBUSY while queues are still open. */
int lf_rio_close(struct lf_rio *rio);

/* Registers [addr, addr+len). Returns the buffer id (>= 0) or -errno:
 * -EINVAL (not page aligned, empty, over 1 GiB), -ENOSPC (table full). */
int lf_rio_register_buffer(struct lf_rio *rio, void *addr, size_t len);
/* Returns 0, -EINVAL (unknown id) or -EBUSY (I/O in flight on it). */
int lf_rio_deregister_buffer(struct lf_rio *rio, int id);
/* Returns the address of a slice, or NULL if it is not inside a registered buffer. */
void *lf_rio_buf_ptr(struct lf_rio *rio, const struct lf_rio_buf *buf);

/* Creates a completion queue of `size` entries (1..32768). Returns 0 or -errno. */
int lf_rio_cq_create(struct lf_rio *rio, unsigned size,
		     const struct lf_rio_notify *notify, struct lf_rio_cq **cq);
/* Stops the pool (LF_RIO_PORT) and frees the queue. Returns 0 or -EBUSY
 * while request queues still use it. Not callable from a pool thread. */
int lf_rio_cq_close(struct lf_rio_cq *cq);
/* Returns the eventfd of an LF_RIO_EVENT queue, or -EINVAL. */
int lf_rio_cq_eventfd(struct lf_rio_cq *cq);
/* Arms an LF_RIO_EVENT queue: its eventfd becomes readable once completions
 * are present (at once if some already are). Returns 0 or -errno. */
int lf_rio_notify(struct lf_rio_cq *cq);
/* Moves up to `max` completions into `res` without blocking; enters the
 * kernel only when io_uring has deferred work for this thread. Returns the
 * number of results (0 if none) or -errno. Not for LF_RIO_PORT queues. */
int lf_rio_dequeue(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned max);
/* Blocks until at least one completion is present (or timeout_ms passes,
 * -1 = forever), then dequeues as lf_rio_dequeue(). Returns n, 0 on timeout. */
int lf_rio_dequeue_wait(struct lf_rio_cq *cq, struct lf_rio_result *res,
			unsigned max, int timeout_ms);

/* Creates a request queue for socket `fd`. It reserves max_recv in
 * recv_cq and max_send in send_cq: -ENOSPC if that takes either past its
 * size (or 256 request queues use it). Returns 0 or -EBADF, -ENOTSOCK,
 * -EINVAL, -ENOSPC, -ENOMEM, -EPROTOTYPE (a loopfast connection on the
 * shared-memory tier: getsockopt SOL_LOOPFAST LOOPFAST_TIER says 1). */
int lf_rio_rq_create(struct lf_rio *rio, int fd, unsigned max_recv, unsigned max_send,
		     struct lf_rio_cq *recv_cq, struct lf_rio_cq *send_cq,
		     void *sock_ctx, struct lf_rio_rq **rq);
/* Cancels outstanding requests, waits for them and frees the queue.
 * Returns 0 or -errno. The socket stays open: the caller closes it. */
int lf_rio_rq_close(struct lf_rio_rq *rq);

/* Receives into a registered slice. Returns 0 or -EINVAL (slice not
 * registered), -ENOBUFS (max_recv outstanding), -EBADF (queue closed). */
int lf_rio_receive(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
		   unsigned flags, void *req_ctx);
/* As lf_rio_receive(), and the sender's address is written to `addr`
 * (a registered slice of at least sizeof(struct sockaddr_storage), or NULL). */
int lf_rio_receive_from(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
			const struct lf_rio_buf *addr, unsigned flags, void *req_ctx);
/* Sends a registered slice. Returns 0 or -errno as lf_rio_receive(). */
int lf_rio_send(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
		unsigned flags, void *req_ctx);
/* Sends a registered slice to `to` (UDP). */
int lf_rio_send_to(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
		   const struct sockaddr *to, socklen_t tolen, unsigned flags, void *req_ctx);
/* Cancels the queue's outstanding requests, keeping the queue. Each still
 * completes once (-ECANCELED, or its data if it finished first) and a
 * multishot receive is not re-armed; its last result has status
 * -ECANCELED. Returns how many results are still due (requests plus an
 * armed multishot), or -errno. */
int lf_rio_cancel(struct lf_rio_rq *rq);
/* Submits requests queued with LF_RIO_DEFER. Returns 0 or -errno. */
int lf_rio_commit(struct lf_rio_rq *rq);

/* Starts a multishot receive: `region` (a registered slice) is cut into
 * `count` slices of `slice_len` bytes that the kernel fills one message
 * each (a provided buffer ring); each result names its slice, which the
 * caller returns with lf_rio_recycle(). At most one per request queue; it
 * uses `count` of the queue's receives (count is a power of two, <= 32768).
 * Returns 0 or -errno (-EEXIST if one is active, -ENOBUFS if fewer than
 * `count` receives are free). */
int lf_rio_receive_multishot(struct lf_rio_rq *rq, const struct lf_rio_buf *region,
			     uint32_t slice_len, uint32_t count, void *req_ctx);
/* Gives slices from multishot results back to the kernel. Returns 0 or -EINVAL. */
int lf_rio_recycle(struct lf_rio_rq *rq, const struct lf_rio_buf *bufs, unsigned n);

#ifdef __cplusplus
}
#endif
#endif
