/* Registered I/O: the domain and what is registered with the kernel. The
 * domain's table of registered regions lives here, and so do the two tables
 * every completion queue's ring keeps: fixed buffers (each registered region
 * installed in place, so that a request names it by index and the kernel
 * skips pinning pages per call) and fixed files (a slot per request queue).
 *
 * This is the lowest layer of the folder: it calls no other file here.
 * Completion queues live in rio_cq.c, request queues in rio_rq.c and what a
 * completion does to its request in rio_complete.c.
 */
#include "rio_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RIO_MAX_REGION (1ul << 30)

LF_RIO_EXPORT int lf_rio_open(struct lf_rio **out)
{
	struct lf_rio *rio;
	struct io_uring probe;
	int ret;

	if (!out)
		return -EINVAL;
	/* Fail early and clearly where io_uring is disabled or missing. */
	ret = io_uring_queue_init(2, &probe, 0);
	if (ret < 0)
		return ret; /* -ENOSYS: absent; -EPERM: disabled (sysctl, seccomp) */
	io_uring_queue_exit(&probe);
	rio = calloc(1, sizeof(*rio));
	if (!rio)
		return -ENOMEM;
	pthread_mutex_init(&rio->lock, NULL);
	*out = rio;
	return 0;
}

LF_RIO_EXPORT int lf_rio_close(struct lf_rio *rio)
{
	if (!rio)
		return -EINVAL;
	pthread_mutex_lock(&rio->lock);
	if (rio->cqs || rio->rqs) {
		pthread_mutex_unlock(&rio->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&rio->lock);
	pthread_mutex_destroy(&rio->lock);
	free(rio);
	return 0;
}

/* Installs (or clears, with addr NULL) region `id` in one ring's fixed
 * buffer table. Failure only means the region is used unfixed there (for
 * example when RLIMIT_MEMLOCK is small); I/O still works. */
void lf__rio_set_fixed(struct lf_rio_cq *cq, int id, void *addr, size_t len)
{
	struct iovec iov = { .iov_base = addr, .iov_len = len };
	__u64 tag = 0;

	if (!addr && !cq->fixed[id])
		return;
	cq->fixed[id] = io_uring_register_buffers_update_tag(&cq->ring, id, &iov, &tag, 1) == 1 && addr;
}

LF_RIO_EXPORT int lf_rio_register_buffer(struct lf_rio *rio, void *addr, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	int id = -ENOSPC;

	if (!rio || !addr || !len || len > RIO_MAX_REGION || ((uintptr_t)addr & (page - 1)))
		return -EINVAL;
	pthread_mutex_lock(&rio->lock);
	for (int i = 0; i < LF_RIO_MAX_BUFS; i++) {
		struct rio_region *r = &rio->bufs[i];
		if (r->used) {
			char *a = r->addr, *b = addr;
			if (b < a + r->len && a < b + len) {
				id = -EEXIST;
				break;
			}
		} else if (id == -ENOSPC) {
			id = i;
		}
	}
	if (id >= 0) {
		struct rio_region *r = &rio->bufs[id];
		r->addr = addr;
		r->len = len;
		r->used = true;
		atomic_store(&r->inflight, 0);
		for (struct lf_rio_cq *cq = rio->cqs; cq; cq = cq->next)
			lf__rio_set_fixed(cq, id, addr, len);
	}
	pthread_mutex_unlock(&rio->lock);
	return id;
}

LF_RIO_EXPORT int lf_rio_deregister_buffer(struct lf_rio *rio, int id)
{
	int ret = 0;

	if (!rio || id < 0 || id >= LF_RIO_MAX_BUFS)
		return -EINVAL;
	pthread_mutex_lock(&rio->lock);
	if (!rio->bufs[id].used)
		ret = -EINVAL;
	else if (atomic_load(&rio->bufs[id].inflight) > 0)
		ret = -EBUSY;
	else {
		for (struct lf_rio_cq *cq = rio->cqs; cq; cq = cq->next)
			lf__rio_set_fixed(cq, id, NULL, 0);
		memset(&rio->bufs[id], 0, sizeof(rio->bufs[id]));
	}
	pthread_mutex_unlock(&rio->lock);
	return ret;
}

/* The fast path reads the table without the domain lock: a region may only
 * be deregistered while nothing uses it, which the caller guarantees by
 * calling from the thread that owns the slice. */
void *lf__rio_slice(struct lf_rio *rio, const struct lf_rio_buf *buf)
{
	struct rio_region *r;

	if (!buf || buf->id >= LF_RIO_MAX_BUFS)
		return NULL;
	r = &rio->bufs[buf->id];
	if (!r->used || buf->offset > r->len || buf->length > r->len - buf->offset)
		return NULL;
	return (char *)r->addr + buf->offset;
}

LF_RIO_EXPORT void *lf_rio_buf_ptr(struct lf_rio *rio, const struct lf_rio_buf *buf)
{
	return rio ? lf__rio_slice(rio, buf) : NULL;
}

/* Request queues name their socket by a slot in each completion queue's
 * fixed-file table, which saves a file lookup per request. */
int lf__rio_take_file(struct lf_rio_cq *cq, int fd)
{
	for (int i = 0; i < LF_RIO_MAX_FILES; i++) {
		if (cq->file_used[i])
			continue;
		int ret = io_uring_register_files_update(&cq->ring, i, &fd, 1);
		if (ret < 0)
			return ret;
		cq->file_used[i] = true;
		return i;
	}
	return -ENOSPC;
}

void lf__rio_drop_file(struct lf_rio_cq *cq, int slot)
{
	int none = -1;

	if (!cq || slot < 0)
		return;
	io_uring_register_files_update(&cq->ring, slot, &none, 1);
	cq->file_used[slot] = false;
}
