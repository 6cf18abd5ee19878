/* The RIO servers of seed 002 on loopfast's registered I/O: polled, event
 * driven and completion port (one or N threads). All but rio-posted use one
 * multishot receive over a provided-buffer ring cut from one registered
 * region, so the kernel receives datagram after datagram without a system
 * call per datagram and results are reaped in batches; rio-posted keeps the
 * seed's shape (many outstanding single receives into fixed buffers). */
#include "udp.h"

#include "loopfast/rio.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#define RIO_SLICES 4096 /* multishot slices (and completion queue room) */
#define RIO_POSTED 512  /* rio-posted: outstanding receives */
#define RIO_DEQ 256     /* results per dequeue */

struct rio_server {
	struct udp_run *run;
	struct lf_rio *rio;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	char *mem;
	size_t len;
	int id;
	uint32_t slice;
	int err;
	int donefd; /* completion port: written once the run is over */
};

static void rs_close(struct rio_server *s)
{
	if (s->rq)
		lf_rio_rq_close(s->rq);
	if (s->cq)
		lf_rio_cq_close(s->cq);
	if (s->id >= 0)
		lf_rio_deregister_buffer(s->rio, s->id);
	if (s->rio)
		lf_rio_close(s->rio);
	if (s->mem && s->mem != MAP_FAILED)
		munmap(s->mem, s->len);
	if (s->donefd >= 0)
		close(s->donefd);
}

/* Sets up the domain, one region of `nslices` slices, and a queue pair. */
static int rs_open(struct rio_server *s, struct udp_run *run, unsigned nslices,
		   const struct lf_rio_notify *notify)
{
	int ret;

	*s = (struct rio_server){ .run = run, .id = -1, .donefd = -1 };
	s->slice = (run->size + 63) & ~63u;
	s->len = ((size_t)s->slice * nslices + 4095) & ~(size_t)4095;
	ret = lf_rio_open(&s->rio);
	if (ret < 0)
		return ret;
	s->mem = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (s->mem == MAP_FAILED)
		return -errno;
	s->id = lf_rio_register_buffer(s->rio, s->mem, s->len);
	if (s->id < 0)
		return s->id;
	ret = lf_rio_cq_create(s->rio, nslices, notify, &s->cq);
	if (ret < 0)
		return ret;
	return lf_rio_rq_create(s->rio, run->fd, nslices, 0, s->cq, s->cq, s, &s->rq);
}

static int rs_multishot(struct rio_server *s)
{
	udp_started(s->run);
	struct lf_rio_buf region = { (uint32_t)s->id, 0, s->slice * RIO_SLICES };

	return lf_rio_receive_multishot(s->rq, &region, s->slice, RIO_SLICES, NULL);
}

/* Counts a batch of multishot results and gives the slices back. */
static int rs_handle(struct rio_server *s, struct udp_tally *t, struct lf_rio_result *res, unsigned n)
{
	struct lf_rio_buf back[RIO_DEQ];
	unsigned nb = 0;
	int ret = 0;

	for (unsigned i = 0; i < n; i++) {
		if (res[i].status < 0) {
			if (res[i].status != -ECANCELED)
				ret = res[i].status;
			continue;
		}
		if (!t->stop)
			udp_datagram(s->run, t, lf_rio_buf_ptr(s->rio, &res[i].buf), res[i].bytes);
		if (res[i].flags & LF_RIO_RES_MULTISHOT) {
			back[nb++] = res[i].buf;
			if (nb == RIO_DEQ) {
				lf_rio_recycle(s->rq, back, nb);
				nb = 0;
			}
		}
	}
	if (nb) {
		int r = lf_rio_recycle(s->rq, back, nb);
		if (r < 0)
			ret = r;
	}
	return ret;
}

/* Once the run is over (this thread or another saw the end marker), the
 * ring may still hold datagrams it took from the socket before the marker:
 * cancel the multishot and count everything up to its last result. */
static int rs_finish(struct rio_server *s, struct udp_tally *t)
{
	struct lf_rio_result res[RIO_DEQ];
	uint64_t deadline = udp_now_ns() + 2000000000ull;
	int due = lf_rio_cancel(s->rq), ret = 0;

	while (due > 0 && udp_now_ns() < deadline) {
		int n = lf_rio_dequeue(s->cq, res, RIO_DEQ);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++)
			if (!(res[i].flags & LF_RIO_RES_MORE))
				due--;
		if (n)
			ret = rs_handle(s, t, res, (unsigned)n);
	}
	udp_flush(s->run, t);
	return ret;
}

static int serve_polled(struct udp_run *run, unsigned flags)
{
	struct lf_rio_notify nt = { .type = LF_RIO_POLLED, .flags = flags };
	struct rio_server s;
	struct lf_rio_result res[RIO_DEQ];
	struct udp_tally t = { 0 };
	int ret = rs_open(&s, run, RIO_SLICES, &nt);

	if (!ret)
		ret = rs_multishot(&s);
	while (!ret) {
		int n = lf_rio_dequeue(s.cq, res, RIO_DEQ);
		if (n < 0) {
			ret = n;
			break;
		}
		if (n)
			ret = rs_handle(&s, &t, res, (unsigned)n);
		else
			__builtin_ia32_pause();
		if (!udp_flush(run, &t)) {
			ret = rs_finish(&s, &t);
			break;
		}
	}
	rs_close(&s);
	return ret;
}

struct polled_thread {
	struct udp_run *run;
	pthread_t th;
	int ret;
};

static void *polled_main(void *arg)
{
	struct polled_thread *p = arg;

	p->ret = serve_polled(p->run, LF_RIO_CQ_SINGLE_THREAD);
	atomic_store(&p->run->stop, true);
	return NULL;
}

/* N polled threads, each with its own completion queue and multishot
 * receive on the same socket: one io_uring per thread, so the kernel's
 * receive work runs on every CPU (one ring serialises it). */
int udp_serve_rio_polled_mt(struct udp_run *run)
{
	struct polled_thread p[64];
	unsigned n = 0;
	int ret = 0;

	for (; n < run->threads && n < 64; n++) {
		p[n] = (struct polled_thread){ .run = run };
		if (pthread_create(&p[n].th, NULL, polled_main, &p[n])) {
			atomic_store(&run->stop, true);
			ret = -EAGAIN;
			break;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		pthread_join(p[i].th, NULL);
		if (p[i].ret && !ret)
			ret = p[i].ret;
	}
	return ret;
}

int udp_serve_rio_polled(struct udp_run *run)
{
	return serve_polled(run, LF_RIO_CQ_SINGLE_THREAD);
}

/* As rio-polled, with the receives done by an io_uring SQPOLL kernel
 * thread: the datagrams are copied on one CPU while this thread counts
 * them on another. */
int udp_serve_rio_sqpoll(struct udp_run *run)
{
	return serve_polled(run, LF_RIO_CQ_KERNEL_THREAD);
}

/* The seed's polled RIO server: RIO_POSTED receives into fixed slices, each
 * re-posted (deferred, then committed once per batch) after its datagram is
 * counted. */
int udp_serve_rio_posted(struct udp_run *run)
{
	struct lf_rio_notify nt = { .type = LF_RIO_POLLED, .flags = LF_RIO_CQ_SINGLE_THREAD };
	struct rio_server s;
	struct lf_rio_result res[RIO_DEQ];
	struct udp_tally t = { 0 };
	int ret = rs_open(&s, run, RIO_POSTED, &nt);

	if (!ret)
		udp_started(run);
	for (unsigned i = 0; !ret && i < RIO_POSTED; i++) {
		struct lf_rio_buf b = { (uint32_t)s.id, i * s.slice, s.slice };
		ret = lf_rio_receive(s.rq, &b, LF_RIO_DEFER, NULL);
	}
	if (!ret)
		ret = lf_rio_commit(s.rq);
	while (!ret) {
		int n = lf_rio_dequeue(s.cq, res, RIO_DEQ);
		if (n < 0) {
			ret = n;
			break;
		}
		for (int i = 0; i < n && !ret; i++) {
			if (res[i].status < 0) {
				ret = res[i].status;
				break;
			}
			struct lf_rio_buf b = res[i].buf;
			if (!t.stop)
				udp_datagram(run, &t, lf_rio_buf_ptr(s.rio, &b), res[i].bytes);
			ret = lf_rio_receive(s.rq, &b, LF_RIO_DEFER, NULL);
		}
		if (n > 0 && !ret)
			ret = lf_rio_commit(s.rq);
		if (!n)
			__builtin_ia32_pause();
		if (!udp_flush(run, &t))
			break;
	}
	rs_close(&s);
	return ret;
}

/* Waits on the eventfd, dequeues until the queue is empty, re-arms. */
int udp_serve_rio_event(struct udp_run *run)
{
	struct lf_rio_notify nt = { .type = LF_RIO_EVENT };
	struct rio_server s;
	struct lf_rio_result res[RIO_DEQ];
	struct udp_tally t = { 0 };
	struct pollfd pfd = { .events = POLLIN };
	int ret = rs_open(&s, run, RIO_SLICES, &nt);

	if (!ret)
		ret = rs_multishot(&s);
	if (!ret) {
		pfd.fd = lf_rio_cq_eventfd(s.cq);
		ret = lf_rio_notify(s.cq);
	}
	while (!ret) {
		int n = poll(&pfd, 1, 100);
		if (n < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		do {
			n = lf_rio_dequeue(s.cq, res, RIO_DEQ);
			if (n > 0)
				ret = rs_handle(&s, &t, res, (unsigned)n);
			if (!udp_flush(run, &t))
				break;
		} while (n == RIO_DEQ && !ret);
		if (n < 0)
			ret = n;
		if (atomic_load(&run->stop))
			break;
		if (!ret)
			ret = lf_rio_notify(s.cq);
	}
	rs_close(&s);
	return ret;
}

static void port_cb(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned n, void *arg)
{
	struct rio_server *s = arg;
	struct udp_tally t = { 0 };
	int ret;

	(void)cq;
	/* Counted even after another thread saw the end marker: these
	 * datagrams were queued before it. */
	ret = rs_handle(s, &t, res, n);
	if (ret < 0)
		s->err = ret;
	if (!udp_flush(s->run, &t) || ret < 0) {
		uint64_t one = 1;
		atomic_store(&s->run->stop, true);
		if (write(s->donefd, &one, sizeof(one)) < 0)
			s->err = -errno;
	}
}

/* Completion-port server: the pool runs port_cb; this thread only waits
 * for the end (checking the stop flag every 100 ms). */
int udp_serve_rio_port(struct udp_run *run)
{
	struct lf_rio_notify nt = { .type = LF_RIO_PORT, .threads = run->threads,
				    .batch = RIO_DEQ, .fn = port_cb };
	struct rio_server s;
	struct pollfd pfd = { .events = POLLIN };
	int ret, efd = eventfd(0, EFD_CLOEXEC);

	if (efd < 0)
		return -errno;
	/* The pool calls back with &s; it starts inside rs_open(), after s is
	 * reset, and sees no completion before the multishot is armed. */
	nt.arg = &s;
	ret = rs_open(&s, run, RIO_SLICES, &nt);
	s.donefd = efd;
	pfd.fd = efd;
	if (!ret)
		ret = rs_multishot(&s);
	while (!ret && !atomic_load(&run->stop))
		if (poll(&pfd, 1, 100) < 0 && errno != EINTR)
			ret = -errno;
	if (!ret)
		ret = s.err;
	rs_close(&s);
	return ret;
}
