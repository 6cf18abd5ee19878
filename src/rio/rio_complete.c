/* Registered I/O: what a completion does to its request. A CQE becomes a
 * result here (lf__rio_complete()); the request goes back to its queue's
 * free list, a multishot receive that ended is re-armed, and a request
 * queue closed with completions still due is freed by its last one.
 *
 * Freeing a request queue lives here, below the completion queues, because
 * a completion can be what frees it: so lf_rio_cq_close() reaches down to
 * lf__rio_rq_free_orphans() for queues its ring's exit has cancelled,
 * instead of rio_cq.c and rio_rq.c calling each other. Calls rio.c; called
 * by rio_cq.c (reaping, closing) and rio_rq.c (posting, closing).
 */
#include "rio_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Takes rq off the domain's list. Called with the domain lock held. */
void lf__rio_rq_unlink(struct lf_rio_rq *rq)
{
	struct lf_rio_rq **pp;

	for (pp = &rq->rio->rqs; *pp; pp = &(*pp)->next)
		if (*pp == rq) {
			*pp = rq->next;
			break;
		}
}

/* Called with the domain lock held (or when nothing else can see rq). */
void lf__rio_rq_free(struct lf_rio_rq *rq)
{
	struct lf_rio *rio = rq->rio;

	if (rq->ms.active) {
		if (rq->rcq)
			io_uring_unregister_buf_ring(&rq->rcq->ring, rq->ms.bgid);
		atomic_fetch_sub(&rio->bufs[rq->ms.region].inflight, 1);
		free(rq->ms.br);
	}
	for (unsigned i = 0; i < rq->max_recv + rq->max_send; i++) {
		struct rio_req *r = &rq->reqs[i];
		if (!r->busy)
			continue;
		atomic_fetch_sub(&rio->bufs[r->buf.id].inflight, 1);
		if (r->addr_id >= 0)
			atomic_fetch_sub(&rio->bufs[r->addr_id].inflight, 1);
	}
	lf__rio_drop_file(rq->rcq, rq->rfile);
	if (rq->scq != rq->rcq)
		lf__rio_drop_file(rq->scq, rq->sfile);
	if (rq->rcq)
		rq->rcq->reserved -= rq->max_recv;
	if (rq->scq)
		rq->scq->reserved -= rq->max_send;
	pthread_mutex_destroy(&rq->lock);
	free(rq->reqs);
	free(rq);
}

/* Frees the request queues closed (lf_rio_rq_close() timed out) with
 * completions still due on cq, whose ring has just exited and so cancelled
 * them. Called with the domain lock held. */
void lf__rio_rq_free_orphans(struct lf_rio_cq *cq)
{
	struct lf_rio_rq **rp;

	for (rp = &cq->rio->rqs; *rp;) {
		struct lf_rio_rq *rq = *rp;
		if (rq->closing && (rq->rcq == cq || rq->scq == cq)) {
			*rp = rq->next;
			if (rq->rcq == cq)
				rq->rcq = NULL;
			if (rq->scq == cq)
				rq->scq = NULL;
			rq->pending = 0;
			lf__rio_rq_free(rq);
		} else {
			rp = &rq->next;
		}
	}
}

/* Frees a closed request queue whose last request just completed. The
 * domain lock is read through a saved pointer: rq is gone after the free. */
static void rq_free_orphan(struct lf_rio_rq *rq)
{
	struct lf_rio *rio = rq->rio;

	pthread_mutex_lock(&rio->lock);
	lf__rio_rq_unlink(rq);
	lf__rio_rq_free(rq);
	pthread_mutex_unlock(&rio->lock);
}

/* Gives a finished request back to its queue, and frees the queue if it
 * was closed and this was the last completion it waited for. */
void lf__rio_req_put(struct lf_rio_rq *rq, struct rio_req *r)
{
	bool gone;

	atomic_fetch_sub(&rq->rio->bufs[r->buf.id].inflight, 1);
	if (r->addr_id >= 0)
		atomic_fetch_sub(&rq->rio->bufs[r->addr_id].inflight, 1);
	r->addr_id = -1;
	pthread_mutex_lock(&rq->lock);
	r->busy = false;
	if (r->kind == RIO_SEND) {
		r->next_free = rq->free_send;
		rq->free_send = r;
		rq->nsend--;
	} else {
		r->next_free = rq->free_recv;
		rq->free_recv = r;
		rq->nrecv--;
	}
	rq->pending--;
	gone = rq->orphan && !rq->pending;
	pthread_mutex_unlock(&rq->lock);
	if (gone) {
		rq_free_orphan(rq);
	}
}

/* Arms the multishot receive. Called with rq->lock held. */
int lf__rio_ms_arm(struct lf_rio_rq *rq)
{
	struct lf_rio_cq *cq = rq->rcq;
	struct io_uring_sqe *sqe;

	pthread_mutex_lock(&cq->sq_lock);
	sqe = lf__rio_cq_sqe(cq);
	if (!sqe) {
		pthread_mutex_unlock(&cq->sq_lock);
		return -EBUSY;
	}
	io_uring_prep_recv_multishot(sqe, rq->rfile, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = rq->ms.bgid;
	io_uring_sqe_set_data(sqe, &rq->ms.req);
	io_uring_submit(&cq->ring);
	pthread_mutex_unlock(&cq->sq_lock);
	rq->ms.armed = true;
	rq->ms.want_rearm = false;
	rq->pending++;
	return 0;
}

/* A multishot CQE. The kernel ends the multishot (no F_MORE) when the ring
 * runs dry (-ENOBUFS, re-armed here once a slice is back) or on an error,
 * which is reported. */
static int ms_complete(struct lf_rio_rq *rq, const struct io_uring_cqe *cqe,
		       struct lf_rio_result *res)
{
	struct rio_mshot *ms = &rq->ms;
	bool more = cqe->flags & IORING_CQE_F_MORE;
	bool gone = false, report = !rq->closing;

	if (cqe->res >= 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
		uint32_t bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
		res->status = 0;
		res->bytes = (uint32_t)cqe->res;
		res->buf.id = ms->region;
		res->buf.offset = ms->base + bid * ms->slice_len;
		res->buf.length = (uint32_t)cqe->res;
		res->flags = LF_RIO_RES_MULTISHOT;
		/* Only the cq lock holder writes it: no locked increment needed. */
		atomic_store_explicit(&ms->delivered,
				      atomic_load_explicit(&ms->delivered, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	} else {
		res->status = cqe->res < 0 ? cqe->res : 0;
		res->bytes = 0;
		memset(&res->buf, 0, sizeof(res->buf));
		res->flags = 0;
		if ((cqe->res == -ENOBUFS || cqe->res >= 0) && !ms->stopped)
			report = false;
		else if (cqe->res == -ENOBUFS || cqe->res >= 0)
			res->status = -ECANCELED; /* stopped: the multishot's last result */
	}
	res->sock_ctx = rq->sock_ctx;
	res->req_ctx = ms->req.ctx;
	if (!more) {
		pthread_mutex_lock(&rq->lock);
		ms->armed = false;
		rq->pending--;
		if (!rq->closing && !ms->stopped && (cqe->res == -ENOBUFS || cqe->res >= 0)) {
			/* All slices out: wait for lf_rio_recycle(). */
			if (atomic_load(&ms->delivered) - atomic_load(&ms->recycled) >= ms->count)
				ms->want_rearm = true;
			else
				lf__rio_ms_arm(rq);
			more = true; /* for the caller it goes on */
		}
		gone = rq->orphan && !rq->pending;
		pthread_mutex_unlock(&rq->lock);
	}
	if (more)
		res->flags |= LF_RIO_RES_MORE;
	if (gone) {
		rq_free_orphan(rq);
		return 0;
	}
	return report;
}

int lf__rio_complete(struct lf_rio_cq *cq, const struct io_uring_cqe *cqe,
		     struct lf_rio_result *res)
{
	struct rio_req *r = io_uring_cqe_get_data(cqe);
	struct lf_rio_rq *rq;
	bool report;

	(void)cq;
	if (!r)
		return 0;
	rq = r->rq;
	if (r->kind == RIO_MSHOT)
		return ms_complete(rq, cqe, res);
	report = !rq->closing;
	res->status = cqe->res < 0 ? cqe->res : 0;
	res->bytes = cqe->res > 0 ? (uint32_t)cqe->res : 0;
	res->sock_ctx = rq->sock_ctx;
	res->req_ctx = r->ctx;
	res->buf = r->buf;
	res->flags = r->kind == RIO_SEND ? LF_RIO_RES_SEND : 0;
	lf__rio_req_put(rq, r);
	return report;
}
