/* Registered I/O: request queues and the requests posted on them, and the
 * multishot receive with a provided buffer ring.
 *
 * A request queue holds one fixed-file slot in each of its completion
 * queues' rings and a preallocated request per outstanding receive and
 * send, so posting allocates nothing. The request's address is the CQE's
 * user_data; user_data 0 marks internal no-ops and cancellations. What a
 * completion does to its request is in rio_complete.c.
 *
 * The top layer of the folder: calls rio.c, rio_complete.c and rio_cq.c;
 * nothing here calls it.
 */
#include "rio_internal.h"
#include "loopfast.h" /* SOL_LOOPFAST, LOOPFAST_TIER: constants only */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A loopfast connection on the shared-memory tier (docs/shm.md) moves its
 * bytes through rings in the two processes' memory, with token bytes on
 * its socket: io_uring's reads and writes on the socket would miss the
 * former and read the latter as data. Such a socket is refused
 * (-EPROTOTYPE), asked through the fast path's public socket option, so
 * RIO needs none of its internals: without loopfast (no interposer) the
 * private level answers ENOPROTOOPT, and any other error of the query
 * but its wait for the server's answer (-EAGAIN on a non-blocking socket,
 * -EINTR) means no rings. 0: not on the tier. */
static int shm_tier(int fd)
{
	int tier = LF_TIER_UDS;
	socklen_t len = sizeof(tier);

	if (getsockopt(fd, SOL_LOOPFAST, LOOPFAST_TIER, &tier, &len) < 0)
		return errno == EAGAIN || errno == EINTR ? -errno : 0;
	return tier == LF_TIER_SHM ? -EPROTOTYPE : 0;
}

LF_RIO_EXPORT int lf_rio_rq_create(struct lf_rio *rio, int fd, unsigned max_recv, unsigned max_send,
			       struct lf_rio_cq *rcq, struct lf_rio_cq *scq,
			       void *sock_ctx, struct lf_rio_rq **out)
{
	struct lf_rio_rq *rq;
	socklen_t len = sizeof(int);
	int type, ret;

	if (!rio || !out || !rcq || !scq || rcq->rio != rio || scq->rio != rio)
		return -EINVAL;
	if (fd < 0)
		return -EBADF;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
		return -errno;
	if (type != SOCK_STREAM && type != SOCK_DGRAM)
		return -EOPNOTSUPP;
	if (type == SOCK_STREAM && (ret = shm_tier(fd)) != 0)
		return ret;
	if (max_recv > LF_RIO_MAX_SIZE || max_send > LF_RIO_MAX_SIZE || !(max_recv + max_send))
		return -EINVAL;

	rq = calloc(1, sizeof(*rq));
	if (!rq)
		return -ENOMEM;
	rq->reqs = calloc(max_recv + max_send, sizeof(*rq->reqs));
	if (!rq->reqs) {
		free(rq);
		return -ENOMEM;
	}
	rq->rio = rio;
	rq->fd = fd;
	rq->type = type;
	rq->sock_ctx = sock_ctx;
	rq->max_recv = max_recv;
	rq->max_send = max_send;
	rq->rfile = rq->sfile = -1;
	pthread_mutex_init(&rq->lock, NULL);
	for (unsigned i = 0; i < max_recv + max_send; i++) {
		struct rio_req *r = &rq->reqs[i];
		r->rq = rq;
		r->addr_id = -1;
		if (i < max_recv) {
			r->next_free = rq->free_recv;
			rq->free_recv = r;
		} else {
			r->next_free = rq->free_send;
			rq->free_send = r;
		}
	}

	pthread_mutex_lock(&rio->lock);
	ret = -ENOSPC;
	if (rcq == scq ? rcq->reserved + max_recv + max_send > rcq->size
		       : rcq->reserved + max_recv > rcq->size || scq->reserved + max_send > scq->size)
		goto fail;
	ret = rq->rfile = lf__rio_take_file(rcq, fd);
	if (ret < 0)
		goto fail;
	if (scq != rcq) {
		ret = rq->sfile = lf__rio_take_file(scq, fd);
		if (ret < 0)
			goto fail;
	} else {
		rq->sfile = rq->rfile;
	}
	rq->rcq = rcq;
	rq->scq = scq;
	rcq->reserved += max_recv;
	scq->reserved += max_send;
	rcq->nrq++;
	if (scq != rcq)
		scq->nrq++;
	rq->next = rio->rqs;
	rio->rqs = rq;
	pthread_mutex_unlock(&rio->lock);
	*out = rq;
	return 0;
fail:
	if (rq->rfile >= 0)
		lf__rio_drop_file(rcq, rq->rfile);
	pthread_mutex_unlock(&rio->lock);
	pthread_mutex_destroy(&rq->lock);
	free(rq->reqs);
	free(rq);
	return ret;
}

static void rq_cancel(struct lf_rio_cq *cq, void *req)
{
	struct io_uring_sqe *sqe;

	pthread_mutex_lock(&cq->sq_lock);
	sqe = lf__rio_cq_sqe(cq);
	if (sqe) {
		io_uring_prep_cancel64(sqe, (uintptr_t)req, 0);
		io_uring_sqe_set_data64(sqe, 0);
		io_uring_submit(&cq->ring);
	}
	pthread_mutex_unlock(&cq->sq_lock);
}

static unsigned rq_pending(struct lf_rio_rq *rq)
{
	unsigned p;

	pthread_mutex_lock(&rq->lock);
	p = rq->pending;
	pthread_mutex_unlock(&rq->lock);
	return p;
}

static void cq_collect(struct lf_rio_cq *cq)
{
	if (cq->type == LF_RIO_PORT) {
		usleep(1000); /* the pool reaps */
		return;
	}
	pthread_mutex_lock(&cq->cq_lock);
	lf__rio_cq_stash(cq);
	pthread_mutex_unlock(&cq->cq_lock);
}

/* Cancels what is outstanding and waits up to two seconds for the
 * cancellations to complete, parking other queues' completions in the
 * stash. If they do not (a completion-port callback that never returns),
 * the queue is freed by whoever reaps its last completion. */
LF_RIO_EXPORT int lf_rio_rq_close(struct lf_rio_rq *rq)
{
	struct lf_rio *rio;
	struct timespec t0, t;

	if (!rq)
		return -EINVAL;
	if (lf__rio_cq_owner(rq->rcq) || lf__rio_cq_owner(rq->scq))
		return -EPERM;
	rio = rq->rio;
	pthread_mutex_lock(&rq->lock);
	if (rq->closing) {
		pthread_mutex_unlock(&rq->lock);
		return -EBADF;
	}
	rq->closing = true;
	pthread_mutex_unlock(&rq->lock);
	pthread_mutex_lock(&rio->lock);
	rq->rcq->nrq--;
	if (rq->scq != rq->rcq)
		rq->scq->nrq--;
	pthread_mutex_unlock(&rio->lock);

	for (unsigned i = 0; i < rq->max_recv + rq->max_send; i++)
		if (rq->reqs[i].busy)
			rq_cancel(rq->reqs[i].kind == RIO_SEND ? rq->scq : rq->rcq, &rq->reqs[i]);
	if (rq->ms.armed)
		rq_cancel(rq->rcq, &rq->ms.req);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (rq_pending(rq)) {
		cq_collect(rq->rcq);
		if (rq->scq != rq->rcq)
			cq_collect(rq->scq);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 2) {
			pthread_mutex_lock(&rq->lock);
			bool left = rq->pending;
			rq->orphan = left;
			pthread_mutex_unlock(&rq->lock);
			if (left)
				return -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_lock(&rio->lock);
	lf__rio_rq_unlink(rq);
	lf__rio_rq_free(rq);
	pthread_mutex_unlock(&rio->lock);
	return 0;
}

static int rq_post(struct lf_rio_rq *rq, enum rio_kind kind, const struct lf_rio_buf *buf,
		   const struct lf_rio_buf *abuf, const struct sockaddr *to, socklen_t tolen,
		   unsigned flags, void *ctx)
{
	struct lf_rio_cq *cq;
	struct io_uring_sqe *sqe;
	struct rio_req *r;
	void *p, *ap = NULL;
	int file;

	if (!rq)
		return -EINVAL;
	if (rq->closing)
		return -EBADF;
	if (flags & ~LF_RIO_DEFER)
		return -EINVAL;
	p = lf__rio_slice(rq->rio, buf);
	if (!p)
		return -EINVAL;
	if (abuf) {
		ap = lf__rio_slice(rq->rio, abuf);
		if (!ap || abuf->length < sizeof(struct sockaddr_storage))
			return -EINVAL;
	}
	if (to && (tolen < sizeof(sa_family_t) || tolen > sizeof(struct sockaddr_storage)))
		return -EINVAL;
	if (lf__rio_cq_owner(kind == RIO_SEND ? rq->scq : rq->rcq))
		return -EPERM;

	pthread_mutex_lock(&rq->lock);
	r = kind == RIO_SEND ? rq->free_send : rq->free_recv;
	if (kind != RIO_SEND && rq->nrecv >= rq->max_recv)
		r = NULL; /* a multishot receive's slices count as receives */
	if (!r || atomic_load(&rq->closing)) {
		pthread_mutex_unlock(&rq->lock);
		return r ? -EBADF : -ENOBUFS;
	}
	if (kind == RIO_SEND) {
		rq->free_send = r->next_free;
		rq->nsend++;
	} else {
		rq->free_recv = r->next_free;
		rq->nrecv++;
	}
	rq->pending++;
	r->busy = true;
	pthread_mutex_unlock(&rq->lock);

	r->kind = kind;
	r->ctx = ctx;
	r->buf = *buf;
	atomic_fetch_add(&rq->rio->bufs[buf->id].inflight, 1);
	if (abuf) {
		r->addr_id = abuf->id;
		atomic_fetch_add(&rq->rio->bufs[abuf->id].inflight, 1);
	}
	cq = kind == RIO_SEND ? rq->scq : rq->rcq;
	file = kind == RIO_SEND ? rq->sfile : rq->rfile;

	pthread_mutex_lock(&cq->sq_lock);
	sqe = lf__rio_cq_sqe(cq);
	if (!sqe) {
		pthread_mutex_unlock(&cq->sq_lock);
		lf__rio_req_put(rq, r);
		return -EBUSY;
	}
	switch (kind) {
	case RIO_RECV:
		if (cq->fixed[buf->id])
			io_uring_prep_read_fixed(sqe, file, p, buf->length, 0, buf->id);
		else
			io_uring_prep_recv(sqe, file, p, buf->length, 0);
		break;
	case RIO_RECV_FROM:
		memset(&r->msg, 0, sizeof(r->msg));
		r->iov.iov_base = p;
		r->iov.iov_len = buf->length;
		r->msg.msg_iov = &r->iov;
		r->msg.msg_iovlen = 1;
		r->msg.msg_name = ap;
		r->msg.msg_namelen = ap ? abuf->length : 0;
		io_uring_prep_recvmsg(sqe, file, &r->msg, 0);
		break;
	default:
		io_uring_prep_send(sqe, file, p, buf->length, MSG_NOSIGNAL);
		if (to) {
			memcpy(&r->addr, to, tolen);
			sqe->addr2 = (uintptr_t)&r->addr;
			sqe->addr_len = (__u16)tolen;
		}
		break;
	}
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, r);
	if (!(flags & LF_RIO_DEFER))
		io_uring_submit(&cq->ring);
	/* lf_rio_rq_close() may have scanned for outstanding requests between
	 * our slot allocation and this submission: cancel it ourselves. */
	if (atomic_load(&rq->closing)) {
		struct io_uring_sqe *c = lf__rio_cq_sqe(cq);
		if (c) {
			io_uring_prep_cancel64(c, (uintptr_t)r, 0);
			io_uring_sqe_set_data64(c, 0);
		}
		io_uring_submit(&cq->ring);
	}
	pthread_mutex_unlock(&cq->sq_lock);
	return 0;
}

LF_RIO_EXPORT int lf_rio_receive(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
			     unsigned flags, void *req_ctx)
{
	return rq_post(rq, RIO_RECV, buf, NULL, NULL, 0, flags, req_ctx);
}

LF_RIO_EXPORT int lf_rio_receive_from(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
				  const struct lf_rio_buf *addr, unsigned flags, void *req_ctx)
{
	return rq_post(rq, RIO_RECV_FROM, buf, addr, NULL, 0, flags, req_ctx);
}

LF_RIO_EXPORT int lf_rio_send(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
			  unsigned flags, void *req_ctx)
{
	return rq_post(rq, RIO_SEND, buf, NULL, NULL, 0, flags, req_ctx);
}

LF_RIO_EXPORT int lf_rio_send_to(struct lf_rio_rq *rq, const struct lf_rio_buf *buf,
			     const struct sockaddr *to, socklen_t tolen, unsigned flags, void *req_ctx)
{
	if (!to)
		return -EINVAL;
	return rq_post(rq, RIO_SEND, buf, NULL, to, tolen, flags, req_ctx);
}

/* The checks every call on a whole request queue starts with: a queue,
 * still open, used from a thread allowed to touch its completion queues. */
static int rq_check(struct lf_rio_rq *rq)
{
	if (!rq)
		return -EINVAL;
	if (rq->closing)
		return -EBADF;
	if (lf__rio_cq_owner(rq->rcq) || lf__rio_cq_owner(rq->scq))
		return -EPERM;
	return 0;
}

LF_RIO_EXPORT int lf_rio_cancel(struct lf_rio_rq *rq)
{
	struct rio_req *busy[256];
	unsigned nbusy = 0, due = 0;
	bool ms = false;

	int bad = rq_check(rq);
	if (bad)
		return bad;
	pthread_mutex_lock(&rq->lock);
	rq->ms.stopped = true;
	rq->ms.want_rearm = false;
	ms = rq->ms.armed;
	due = rq->pending;
	pthread_mutex_unlock(&rq->lock);
	for (unsigned i = 0; i < rq->max_recv + rq->max_send; i++) {
		if (rq->reqs[i].busy)
			busy[nbusy++] = &rq->reqs[i];
		if (nbusy == 256 || (nbusy && i + 1 == rq->max_recv + rq->max_send)) {
			for (unsigned k = 0; k < nbusy; k++)
				rq_cancel(busy[k]->kind == RIO_SEND ? rq->scq : rq->rcq, busy[k]);
			nbusy = 0;
		}
	}
	if (ms)
		rq_cancel(rq->rcq, &rq->ms.req);
	return (int)due;
}

LF_RIO_EXPORT int lf_rio_commit(struct lf_rio_rq *rq)
{
	int ret = 0, r2 = 0;

	int bad = rq_check(rq);
	if (bad)
		return bad;
	pthread_mutex_lock(&rq->rcq->sq_lock);
	ret = io_uring_submit(&rq->rcq->ring);
	pthread_mutex_unlock(&rq->rcq->sq_lock);
	if (rq->scq != rq->rcq) {
		pthread_mutex_lock(&rq->scq->sq_lock);
		r2 = io_uring_submit(&rq->scq->ring);
		pthread_mutex_unlock(&rq->scq->sq_lock);
	}
	return ret < 0 ? ret : r2 < 0 ? r2 : 0;
}

LF_RIO_EXPORT int lf_rio_receive_multishot(struct lf_rio_rq *rq, const struct lf_rio_buf *region,
				       uint32_t slice_len, uint32_t count, void *req_ctx)
{
	struct rio_mshot *ms;
	struct io_uring_buf_reg reg;
	char *base;
	size_t ring_bytes;
	int ret;

	if (!rq || !region)
		return -EINVAL;
	if (rq->closing)
		return -EBADF;
	if (lf__rio_cq_owner(rq->rcq))
		return -EPERM;
	ms = &rq->ms;
	base = lf__rio_slice(rq->rio, region);
	if (!base || !slice_len || !count || count > LF_RIO_MAX_SIZE || (count & (count - 1)) ||
	    (uint64_t)slice_len * count > region->length)
		return -EINVAL;
	pthread_mutex_lock(&rq->lock);
	ret = -EEXIST;
	if (ms->active)
		goto out;
	ret = -ENOBUFS;
	if (rq->nrecv + count > rq->max_recv)
		goto out;
	ring_bytes = (size_t)count * sizeof(struct io_uring_buf);
	ring_bytes = (ring_bytes + 4095) & ~(size_t)4095;
	ret = -ENOMEM;
	if (posix_memalign((void **)&ms->br, 4096, ring_bytes))
		goto out;
	memset(ms->br, 0, ring_bytes);
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uintptr_t)ms->br;
	reg.ring_entries = count;
	reg.bgid = (uint16_t)rq->rfile;
	ret = io_uring_register_buf_ring(&rq->rcq->ring, &reg, 0);
	if (ret < 0) {
		free(ms->br);
		ms->br = NULL;
		goto out;
	}
	ms->bgid = reg.bgid;
	ms->count = count;
	ms->slice_len = slice_len;
	ms->region = region->id;
	ms->base = region->offset;
	ms->base_ptr = base;
	atomic_store(&ms->delivered, 0);
	atomic_store(&ms->recycled, 0);
	ms->req.rq = rq;
	ms->req.kind = RIO_MSHOT;
	ms->req.ctx = req_ctx;
	io_uring_buf_ring_init(ms->br);
	for (uint32_t i = 0; i < count; i++)
		io_uring_buf_ring_add(ms->br, base + (size_t)i * slice_len, slice_len, (unsigned short)i,
				      io_uring_buf_ring_mask(count), (int)i);
	io_uring_buf_ring_advance(ms->br, (int)count);
	ms->active = true;
	ms->stopped = false;
	rq->nrecv += count;
	atomic_fetch_add(&rq->rio->bufs[region->id].inflight, 1);
	ret = lf__rio_ms_arm(rq);
out:
	pthread_mutex_unlock(&rq->lock);
	return ret;
}

LF_RIO_EXPORT int lf_rio_recycle(struct lf_rio_rq *rq, const struct lf_rio_buf *bufs, unsigned n)
{
	struct rio_mshot *ms;
	int mask, ret = 0;

	if (!rq || (!bufs && n))
		return -EINVAL;
	ms = &rq->ms;
	if (!ms->active)
		return -EINVAL;
	if (lf__rio_cq_owner(rq->rcq))
		return -EPERM;
	mask = io_uring_buf_ring_mask(ms->count);
	for (unsigned i = 0; i < n; i++) {
		uint32_t off = bufs[i].offset - ms->base;
		if (bufs[i].id != ms->region || bufs[i].offset < ms->base ||
		    off % ms->slice_len || off / ms->slice_len >= ms->count)
			return -EINVAL;
	}
	pthread_mutex_lock(&rq->lock);
	if (n > atomic_load(&ms->delivered) - atomic_load(&ms->recycled)) {
		pthread_mutex_unlock(&rq->lock);
		return -EINVAL; /* more than are out: a slice given back twice */
	}
	for (unsigned i = 0; i < n; i++) {
		uint32_t bid = (bufs[i].offset - ms->base) / ms->slice_len;
		io_uring_buf_ring_add(ms->br, ms->base_ptr + (size_t)bid * ms->slice_len,
				      ms->slice_len, (unsigned short)bid, mask, (int)i);
	}
	io_uring_buf_ring_advance(ms->br, (int)n);
	atomic_fetch_add(&ms->recycled, n);
	if (ms->want_rearm && !rq->closing && !ms->stopped)
		ret = lf__rio_ms_arm(rq);
	pthread_mutex_unlock(&rq->lock);
	return ret;
}
