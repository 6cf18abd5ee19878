/* Registered I/O: completion queues. Each owns one io_uring; this file
 * creates and closes it, arms its eventfd, dequeues results (polled, or in
 * a pool of completion-port threads) and keeps the stash that
 * lf_rio_rq_close() fills while it waits for its own completions.
 *
 * Reaping hands each CQE to lf__rio_complete() (rio_complete.c), which
 * turns it into a result and settles its request. Calls rio.c and
 * rio_complete.c; called by rio_rq.c.
 */
#include "rio_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void *port_main(void *arg);

static int cq_start_port(struct lf_rio_cq *cq, const struct lf_rio_notify *n)
{
	if (!n->fn || n->threads < 1 || n->threads > LF_RIO_MAX_THREADS)
		return -EINVAL;
	cq->fn = n->fn;
	cq->arg = n->arg;
	cq->batch = n->batch ? n->batch : 64;
	if (cq->batch > 1024)
		cq->batch = 1024;
	for (unsigned i = 0; i < n->threads; i++) {
		int ret = pthread_create(&cq->threads[i], NULL, port_main, cq);
		if (ret)
			return -ret;
		cq->nthreads++;
	}
	return 0;
}

static void cq_stop_port(struct lf_rio_cq *cq)
{
	struct io_uring_sqe *sqe;

	if (!cq->nthreads)
		return;
	atomic_store(&cq->stop, true);
	/* A no-op completion wakes the thread that waits on the ring; the
	 * others wait on cq_lock and see the flag when they get it. */
	pthread_mutex_lock(&cq->sq_lock);
	sqe = io_uring_get_sqe(&cq->ring);
	if (!sqe) {
		io_uring_submit(&cq->ring);
		sqe = io_uring_get_sqe(&cq->ring);
	}
	if (sqe) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 0);
	}
	io_uring_submit(&cq->ring);
	pthread_mutex_unlock(&cq->sq_lock);
	for (unsigned i = 0; i < cq->nthreads; i++)
		pthread_join(cq->threads[i], NULL);
	cq->nthreads = 0;
}

static void cq_free(struct lf_rio_cq *cq)
{
	if (cq->ring.ring_fd >= 0)
		io_uring_queue_exit(&cq->ring);
	if (cq->efd >= 0)
		close(cq->efd);
	pthread_mutex_destroy(&cq->sq_lock);
	pthread_mutex_destroy(&cq->cq_lock);
	free(cq->stash);
	free(cq);
}

/* Polled queues use cooperative task running: completions are posted when
 * this thread next enters the kernel, and the TASKRUN flag tells the poller
 * when to do so. Event and port queues must not: their waiters sleep in
 * poll() or in another thread, and only a signalled task-work wakeup gets
 * the completions posted (see the notes in lf_rio(3)). */
LF_RIO_EXPORT int lf_rio_cq_create(struct lf_rio *rio, unsigned size,
			       const struct lf_rio_notify *notify, struct lf_rio_cq **out)
{
	struct io_uring_params p;
	struct lf_rio_cq *cq;
	enum lf_rio_notify_type type = notify ? notify->type : LF_RIO_POLLED;
	int ret;

	if (!rio || !out || !size || size > LF_RIO_MAX_SIZE || type > LF_RIO_PORT)
		return -EINVAL;
	if (type == LF_RIO_PORT && (!notify->fn || notify->threads < 1 ||
				    notify->threads > LF_RIO_MAX_THREADS))
		return -EINVAL;
	if (notify && (notify->flags & ~(LF_RIO_CQ_KERNEL_THREAD | LF_RIO_CQ_SINGLE_THREAD)))
		return -EINVAL;
	if (notify && (notify->flags & LF_RIO_CQ_SINGLE_THREAD) &&
	    (type != LF_RIO_POLLED || (notify->flags & LF_RIO_CQ_KERNEL_THREAD)))
		return -EINVAL;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->stash = calloc(size, sizeof(*cq->stash));
	if (!cq->stash) {
		free(cq);
		return -ENOMEM;
	}
	cq->rio = rio;
	cq->type = type;
	cq->size = size;
	cq->efd = -1;
	pthread_mutex_init(&cq->sq_lock, NULL);
	pthread_mutex_init(&cq->cq_lock, NULL);

	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP;
	p.cq_entries = size < 256 ? 256 : size;
	if (notify && (notify->flags & LF_RIO_CQ_KERNEL_THREAD)) {
		p.flags |= IORING_SETUP_SQPOLL;
		p.sq_thread_idle = 50;
	} else if (notify && (notify->flags & LF_RIO_CQ_SINGLE_THREAD)) {
		p.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
			   IORING_SETUP_TASKRUN_FLAG;
		cq->single = true;
		cq->coop = true;
		cq->owner = pthread_self();
	} else if (type == LF_RIO_POLLED) {
		p.flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
		cq->coop = true;
	}
	ret = io_uring_queue_init_params(128, &cq->ring, &p);
	if (ret == -EINVAL && cq->single) {
		/* A kernel without DEFER_TASKRUN (< 6.1): cooperative instead. */
		p.flags &= ~(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
		p.flags |= IORING_SETUP_COOP_TASKRUN;
		ret = io_uring_queue_init_params(128, &cq->ring, &p);
	}
	if (ret < 0 && cq->coop) {
		p.flags &= ~(IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
		cq->coop = false;
		ret = io_uring_queue_init_params(128, &cq->ring, &p);
	}
	if (ret < 0) {
		cq->ring.ring_fd = -1; /* no ring to exit */
		cq_free(cq);
		return ret;
	}
	ret = io_uring_register_files_sparse(&cq->ring, LF_RIO_MAX_FILES);
	if (ret >= 0 && io_uring_register_buffers_sparse(&cq->ring, LF_RIO_MAX_BUFS) < 0)
		memset(cq->fixed, 0, sizeof(cq->fixed)); /* fixed buffers unavailable: plain I/O */
	if (ret >= 0 && type == LF_RIO_EVENT) {
		cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		ret = cq->efd < 0 ? -errno : io_uring_register_eventfd(&cq->ring, cq->efd);
		if (ret >= 0)
			io_uring_cq_eventfd_toggle(&cq->ring, false);
	}
	if (ret < 0) {
		cq_free(cq);
		return ret;
	}

	pthread_mutex_lock(&rio->lock);
	for (int i = 0; i < LF_RIO_MAX_BUFS; i++)
		if (rio->bufs[i].used)
			lf__rio_set_fixed(cq, i, rio->bufs[i].addr, rio->bufs[i].len);
	cq->next = rio->cqs;
	rio->cqs = cq;
	pthread_mutex_unlock(&rio->lock);

	if (type == LF_RIO_PORT) {
		ret = cq_start_port(cq, notify);
		if (ret < 0) {
			lf_rio_cq_close(cq);
			return ret;
		}
	}
	*out = cq;
	return 0;
}

LF_RIO_EXPORT int lf_rio_cq_close(struct lf_rio_cq *cq)
{
	struct lf_rio *rio;
	struct lf_rio_cq **pp;

	if (!cq)
		return -EINVAL;
	rio = cq->rio;
	pthread_mutex_lock(&rio->lock);
	if (cq->nrq) {
		pthread_mutex_unlock(&rio->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&rio->lock);
	cq_stop_port(cq);

	pthread_mutex_lock(&rio->lock);
	for (pp = &rio->cqs; *pp; pp = &(*pp)->next)
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	/* Request queues closed without all their completions reaped: the
	 * ring's exit cancels what is left, so they can go now. */
	io_uring_queue_exit(&cq->ring);
	memset(&cq->ring, 0, sizeof(cq->ring));
	cq->ring.ring_fd = -1;
	lf__rio_rq_free_orphans(cq);
	pthread_mutex_unlock(&rio->lock);
	cq_free(cq);
	return 0;
}

LF_RIO_EXPORT int lf_rio_cq_eventfd(struct lf_rio_cq *cq)
{
	if (!cq || cq->type != LF_RIO_EVENT)
		return -EINVAL;
	return cq->efd;
}

LF_RIO_EXPORT int lf_rio_notify(struct lf_rio_cq *cq)
{
	uint64_t v;
	bool ready;

	if (!cq || cq->type != LF_RIO_EVENT)
		return -EINVAL;
	pthread_mutex_lock(&cq->cq_lock);
	while (read(cq->efd, &v, sizeof(v)) == sizeof(v))
		;
	cq->armed = true;
	io_uring_cq_eventfd_toggle(&cq->ring, true);
	ready = cq->nstash || io_uring_cq_ready(&cq->ring) || io_uring_cq_has_overflow(&cq->ring);
	pthread_mutex_unlock(&cq->cq_lock);
	if (ready && eventfd_write(cq->efd, 1) < 0)
		return -errno;
	return 0;
}

/* Moves CQEs into results. Called with cq_lock held. */
static unsigned cq_reap(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned max)
{
	struct io_uring_cqe *cqes[64];
	unsigned n = 0;

	if (cq->nstash) {
		unsigned k = cq->nstash < max ? cq->nstash : max;
		memcpy(res, cq->stash, k * sizeof(*res));
		memmove(cq->stash, cq->stash + k, (cq->nstash - k) * sizeof(*res));
		cq->nstash -= k;
		n = k;
	}
	while (n < max) {
		unsigned want = max - n < 64 ? max - n : 64;
		unsigned got = io_uring_peek_batch_cqe(&cq->ring, cqes, want);
		if (!got)
			break;
		for (unsigned i = 0; i < got; i++)
			n += lf__rio_complete(cq, cqes[i], &res[n]);
		io_uring_cq_advance(&cq->ring, got);
	}
	return n;
}

/* Enters the kernel only when completions are waiting to be posted by this
 * thread (IORING_SQ_TASKRUN) or have overflowed into the kernel's list; a
 * single-thread queue (deferred task work) also whenever its ring is empty. */
static void cq_flush(struct lf_rio_cq *cq)
{
	unsigned flags = IO_URING_READ_ONCE(*cq->ring.sq.kflags);

	if ((flags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) ||
	    (cq->single && !io_uring_cq_ready(&cq->ring)))
		io_uring_get_events(&cq->ring);
}

LF_RIO_EXPORT int lf_rio_dequeue(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned max)
{
	unsigned n;

	if (!cq || (!res && max))
		return -EINVAL;
	if (cq->type == LF_RIO_PORT)
		return -EINVAL;
	if (lf__rio_cq_owner(cq))
		return -EPERM;
	pthread_mutex_lock(&cq->cq_lock);
	cq_flush(cq);
	n = cq_reap(cq, res, max);
	if (cq->armed) {
		/* One notification per lf_rio_notify(), as RIO. */
		io_uring_cq_eventfd_toggle(&cq->ring, false);
		cq->armed = false;
	}
	pthread_mutex_unlock(&cq->cq_lock);
	return (int)n;
}

LF_RIO_EXPORT int lf_rio_dequeue_wait(struct lf_rio_cq *cq, struct lf_rio_result *res,
				  unsigned max, int timeout_ms)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	int n;

	if (!max)
		return -EINVAL;
	n = lf_rio_dequeue(cq, res, max);
	if (n)
		return n;
	ts.tv_sec = timeout_ms / 1000;
	ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
	pthread_mutex_lock(&cq->cq_lock);
	int ret = io_uring_wait_cqe_timeout(&cq->ring, &cqe, timeout_ms < 0 ? NULL : &ts);
	pthread_mutex_unlock(&cq->cq_lock);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return ret;
	return lf_rio_dequeue(cq, res, max);
}

/* Completion-port threads take turns: one holds cq_lock and sleeps in the
 * kernel until completions arrive (a leader/followers pool, as an IOCP's
 * LIFO waiters), reaps a batch, releases the lock and runs the callback
 * while the next thread waits. */
static void *port_main(void *arg)
{
	struct lf_rio_cq *cq = arg;
	struct lf_rio_result *res = calloc(cq->batch, sizeof(*res));
	struct io_uring_cqe *cqe;

	if (!res)
		return NULL;
	for (;;) {
		unsigned n = 0;

		pthread_mutex_lock(&cq->cq_lock);
		while (!atomic_load(&cq->stop)) {
			n = cq_reap(cq, res, cq->batch);
			if (n)
				break;
			io_uring_wait_cqe(&cq->ring, &cqe);
		}
		pthread_mutex_unlock(&cq->cq_lock);
		if (!n)
			break;
		cq->fn(cq, res, n, cq->arg);
	}
	free(res);
	return NULL;
}

void lf__rio_cq_stash(struct lf_rio_cq *cq)
{
	struct io_uring_cqe *cqe;

	io_uring_get_events(&cq->ring);
	while (cq->nstash < cq->size && !io_uring_peek_cqe(&cq->ring, &cqe)) {
		cq->nstash += lf__rio_complete(cq, cqe, &cq->stash[cq->nstash]);
		io_uring_cqe_seen(&cq->ring, cqe);
	}
}
