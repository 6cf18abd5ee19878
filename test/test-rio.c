/* Registered I/O tests of the domain, registered buffers and completion
 * queues: event notification, the completion-port pool, single-thread
 * queues, and the stash that keeps other queues' results while one closes.
 * The request queues' own tests are in test-rio-rq.c. */
#include "rio_fixture.h"

#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdatomic.h>

static void test_register_errors(void)
{
	struct fixture f;
	struct lf_rio_buf b;

	setup(&f);
	ASSERT_EQ(lf_rio_register_buffer(f.rio, f.mem + 1, 4096), -EINVAL);
	ASSERT_EQ(lf_rio_register_buffer(f.rio, f.mem, 0), -EINVAL);
	ASSERT_EQ(lf_rio_register_buffer(f.rio, f.mem + 4096, 4096), -EEXIST);
	ASSERT_EQ(lf_rio_deregister_buffer(f.rio, 63), -EINVAL);
	ASSERT_EQ(lf_rio_deregister_buffer(f.rio, -1), -EINVAL);
	b = (struct lf_rio_buf){ f.id, REGION - 10, 10 };
	ASSERT(lf_rio_buf_ptr(f.rio, &b) == f.mem + REGION - 10);
	b.length = 11;
	ASSERT(lf_rio_buf_ptr(f.rio, &b) == NULL);
	b = (struct lf_rio_buf){ 7, 0, 10 };
	ASSERT(lf_rio_buf_ptr(f.rio, &b) == NULL);
	teardown(&f);
}

static void test_event_notify(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[4];
	struct lf_rio_notify n = { .type = LF_RIO_EVENT };
	struct sockaddr_in sa, ca;
	struct pollfd pfd;
	int s, c;

	setup(&f);
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, &n, &cq), 0);
	pfd.fd = lf_rio_cq_eventfd(cq);
	pfd.events = POLLIN;
	ASSERT_GE(pfd.fd, 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 4, 0, cq, cq, NULL, &rq), 0);
	for (unsigned i = 0; i < 2; i++) {
		struct lf_rio_buf b = { f.id, i * 4096, 4096 };
		ASSERT_EQ(lf_rio_receive(rq, &b, 0, NULL), 0);
	}
	ASSERT_EQ(lf_rio_notify(cq), 0);
	ASSERT_EQ(poll(&pfd, 1, 50), 0);
	send_n(c, &sa, 1, 10);
	ASSERT_EQ(poll(&pfd, 1, 5000), 1);
	ASSERT_EQ(lf_rio_dequeue(cq, res, 4), 1);

	/* Not armed: a completion does not signal. The eventfd still holds the
	 * signal above until read; once read, a completion that arrives and is
	 * dequeued while the queue is not armed must leave it unsignalled. */
	uint64_t v;
	ASSERT_EQ(read(pfd.fd, &v, sizeof(v)), sizeof(v));
	ASSERT_EQ(poll(&pfd, 1, 0), 0);
	send_n(c, &sa, 1, 10);
	ASSERT_EQ(drain(cq, res, 1), 1);
	ASSERT_EQ(poll(&pfd, 1, 0), 0);
	struct lf_rio_buf again = { f.id, 0, 4096 };
	ASSERT_EQ(lf_rio_receive(rq, &again, 0, NULL), 0);

	/* Arming with one present (or arriving later) does. */
	send_n(c, &sa, 1, 10);
	usleep(20000);
	ASSERT_EQ(lf_rio_notify(cq), 0);
	ASSERT_EQ(poll(&pfd, 1, 5000), 1);
	ASSERT_EQ(lf_rio_dequeue(cq, res, 4), 1);

	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s);
	close(c);
	teardown(&f);
}

struct port_state {
	atomic_uint count;
	atomic_uint bytes;
	struct lf_rio_rq *rq;
	struct fixture *f;
	atomic_uint threads_seen;
	atomic_uint calls;
};

/* Counts results and gives the buffers back. The first call then waits
 * (at most 10 s) until another port thread has run the callback too: the
 * port must hand further completions to another thread while one is busy. */
static void port_cb(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned n, void *arg)
{
	static __thread bool seen;
	struct port_state *st = arg;

	(void)cq;
	if (!seen) {
		seen = true;
		atomic_fetch_add(&st->threads_seen, 1);
	}
	for (unsigned i = 0; i < n; i++) {
		ASSERT_EQ(res[i].status, 0);
		atomic_fetch_add(&st->count, 1);
		atomic_fetch_add(&st->bytes, res[i].bytes);
		int ret = lf_rio_receive(st->rq, &res[i].buf, 0, NULL);
		ASSERT(ret == 0 || ret == -EBADF); /* -EBADF: the queue is closing */
	}
	if (atomic_fetch_add(&st->calls, 1) == 0)
		for (int i = 0; i < 10000 && atomic_load(&st->threads_seen) < 2; i++)
			usleep(1000);
}

static void test_port_threads(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct port_state st = { 0 };
	struct lf_rio_notify n = { .type = LF_RIO_PORT, .threads = 4, .fn = port_cb, .arg = &st };
	struct sockaddr_in sa, ca;
	int s, c;

	setup(&f);
	st.f = &f;
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 64, &n, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 32, 0, cq, cq, NULL, &st.rq), 0);
	for (unsigned i = 0; i < 32; i++) {
		struct lf_rio_buf b = { f.id, i * 2048, 2048 };
		ASSERT_EQ(lf_rio_receive(st.rq, &b, 0, NULL), 0);
	}
	send_n(c, &sa, 2000, 64);
	for (int i = 0; i < 20000 && atomic_load(&st.count) < 2000; i++)
		usleep(1000);
	ASSERT_EQ(atomic_load(&st.count), 2000);
	ASSERT_EQ(atomic_load(&st.bytes), 2000 * 64);
	ASSERT_GE(atomic_load(&st.threads_seen), 2);
	ASSERT_EQ(lf_rio_rq_close(st.rq), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s);
	close(c);
	teardown(&f);
}

static void test_many_queues_one_cq(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq[3];
	struct lf_rio_result res[8];
	struct sockaddr_in sa[3], ca;
	int s[3], c;

	setup(&f);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 6, NULL, &cq), 0);
	for (uintptr_t i = 0; i < 3; i++) {
		struct lf_rio_buf b = { f.id, i * 4096, 4096 };
		s[i] = udp_bound(&sa[i]);
		ASSERT_EQ(lf_rio_rq_create(f.rio, s[i], 2, 0, cq, cq, (void *)i, &rq[i]), 0);
		ASSERT_EQ(lf_rio_receive(rq[i], &b, 0, NULL), 0);
	}
	send_n(c, &sa[2], 1, 20);
	send_n(c, &sa[0], 1, 20);
	usleep(20000);
	/* Closing queue 1 (nothing arrived for it) keeps the others' results. */
	ASSERT_EQ(lf_rio_rq_close(rq[1]), 0);
	ASSERT_EQ(drain(cq, res, 2), 2);
	ASSERT((uintptr_t)res[0].sock_ctx + (uintptr_t)res[1].sock_ctx == 2);
	ASSERT_EQ(lf_rio_rq_close(rq[0]), 0);
	ASSERT_EQ(lf_rio_rq_close(rq[2]), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	for (int i = 0; i < 3; i++)
		close(s[i]);
	close(c);
	teardown(&f);
}

static void nop_cb(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned n, void *arg)
{
	(void)cq, (void)res, (void)n, (void)arg;
}

static void test_cq_errors(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_result res[1];
	struct lf_rio_notify port0 = { .type = LF_RIO_PORT, .threads = 0, .fn = nop_cb };
	struct lf_rio_notify nofn = { .type = LF_RIO_PORT, .threads = 2 };
	struct lf_rio_notify flags = { .type = LF_RIO_POLLED, .flags = 0x80 };
	struct lf_rio_notify type = { .type = (enum lf_rio_notify_type)7 };
	struct lf_rio_notify port = { .type = LF_RIO_PORT, .threads = 3, .fn = nop_cb };

	setup(&f);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, &port0, &cq), -EINVAL);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, &nofn, &cq), -EINVAL);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, &flags, &cq), -EINVAL);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, &type, &cq), -EINVAL);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 40000, NULL, &cq), -EINVAL);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, &port, &cq), 0);
	ASSERT_EQ(lf_rio_dequeue(cq, res, 1), -EINVAL); /* the pool dequeues */
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	ASSERT_EQ(lf_rio_cq_close(NULL), -EINVAL);
	ASSERT_EQ(lf_rio_close(NULL), -EINVAL);
	teardown(&f);
}

struct other_thread {
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_buf buf;
	int dequeue, receive, close;
};

static void *other_main(void *arg)
{
	struct other_thread *o = arg;
	struct lf_rio_result res[1];

	o->dequeue = lf_rio_dequeue(o->cq, res, 1);
	o->receive = lf_rio_receive(o->rq, &o->buf, 0, NULL);
	o->close = lf_rio_rq_close(o->rq);
	return NULL;
}

/* A single-thread queue (deferred task work) delivers the same results,
 * and refuses other threads with -EPERM instead of misbehaving. */
static void test_single_thread_queue(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[16];
	struct lf_rio_notify st = { .type = LF_RIO_POLLED, .flags = LF_RIO_CQ_SINGLE_THREAD };
	struct lf_rio_notify bad = { .type = LF_RIO_EVENT, .flags = LF_RIO_CQ_SINGLE_THREAD };
	struct lf_rio_buf region = { 0, 0, 16 * 2048 };
	struct sockaddr_in sa, ca;
	struct other_thread o;
	pthread_t th;
	unsigned got = 0;
	int s, c;

	setup(&f);
	region.id = f.id;
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 32, &bad, &cq), -EINVAL);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 32, &st, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 17, 0, cq, cq, NULL, &rq), 0);
	ASSERT_EQ(lf_rio_receive_multishot(rq, &region, 2048, 16, NULL), 0);
	send_n(c, &sa, 50, 64);
	for (int spins = 0; got < 50 && spins < 5000; spins++) {
		int n = lf_rio_dequeue_wait(cq, res, 16, 1);
		ASSERT_GE(n, 0);
		struct lf_rio_buf back[16];
		for (int i = 0; i < n; i++) {
			ASSERT_EQ(res[i].bytes, 64);
			back[i] = res[i].buf;
		}
		ASSERT_EQ(lf_rio_recycle(rq, back, n), 0);
		got += n;
	}
	ASSERT_EQ(got, 50);

	o = (struct other_thread){ .cq = cq, .rq = rq, .buf = { f.id, 65536, 64 } };
	ASSERT_EQ(pthread_create(&th, NULL, other_main, &o), 0);
	ASSERT_EQ(pthread_join(th, NULL), 0);
	ASSERT_EQ(o.dequeue, -EPERM);
	ASSERT_EQ(o.receive, -EPERM);
	ASSERT_EQ(o.close, -EPERM);

	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s);
	close(c);
	teardown(&f);
}

/* Posts every request a queue reserved: `recvs` receives, `sends` sends
 * to `to`, each on its own 2 KiB slice from `*off`. */
static void post_all(struct fixture *f, struct lf_rio_rq *rq, unsigned recvs, unsigned sends,
		     const struct sockaddr_in *to, uint32_t *off)
{
	for (unsigned i = 0; i < recvs + sends; i++, *off += 2048) {
		struct lf_rio_buf b = { f->id, *off, i < recvs ? 2048 : 32 };
		if (i < recvs)
			ASSERT_EQ(lf_rio_receive(rq, &b, 0, NULL), 0);
		else
			ASSERT_EQ(lf_rio_send_to(rq, &b, (const struct sockaddr *)to, sizeof(*to), 0, NULL), 0);
	}
}

/* A completion queue of size N takes request queues whose outstanding
 * receives and sends add up to at most N (RIOCreateRequestQueue's
 * WSAENOBUFS; -ENOSPC here, as lf_rio(3) says), counted over all its
 * request queues. A refused queue leaves nothing behind, the ones that fit
 * fill the queue to the brim and every request completes, and closing one
 * gives exactly its share back. */
static void test_cq_reservations(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq[3], *no;
	struct lf_rio_result res[16];
	struct sockaddr_in sa[3], ca;
	unsigned per[2][2] = { { 0 } };
	uint32_t off = 0;
	int s[3], c, fds;

	setup(&f);
	c = udp_bound(&ca);
	for (int i = 0; i < 3; i++)
		s[i] = udp_bound(&sa[i]);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, NULL, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[0], 3, 2, cq, cq, (void *)0, &rq[0]), 0); /* 5 of 8 */
	fds = open_fds();
	/* More refusals than the ring has fixed-file slots (256): a refusal
	 * that kept one would make the last create below fail. */
	for (int i = 0; i < 300; i++)
		ASSERT_EQ(lf_rio_rq_create(f.rio, s[1], 2, 2, cq, cq, NULL, &no), -ENOSPC);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[1], 4, 0, cq, cq, NULL, &no), -ENOSPC);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[1], 0, 4, cq, cq, NULL, &no), -ENOSPC);
	ASSERT_EQ(open_fds(), fds);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[1], 2, 1, cq, cq, (void *)1, &rq[1]), 0); /* 8 of 8 */
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[2], 1, 0, cq, cq, NULL, &no), -ENOSPC);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[2], 0, 1, cq, cq, NULL, &no), -ENOSPC);

	/* The two that fit use all they reserved, and all of it completes. */
	post_all(&f, rq[0], 3, 2, &ca, &off);
	post_all(&f, rq[1], 2, 1, &ca, &off);
	send_n(c, &sa[0], 3, 40);
	send_n(c, &sa[1], 2, 40);
	ASSERT_EQ(drain(cq, res, 8), 8);
	for (int i = 0; i < 8; i++) {
		ASSERT_EQ(res[i].status, 0);
		per[(uintptr_t)res[i].sock_ctx][res[i].flags == LF_RIO_RES_SEND]++;
	}
	ASSERT_EQ(per[0][0], 3);
	ASSERT_EQ(per[0][1], 2);
	ASSERT_EQ(per[1][0], 2);
	ASSERT_EQ(per[1][1], 1);
	ASSERT_EQ(lf_rio_dequeue_wait(cq, res, 16, 20), 0);

	/* Closing the first gives back its 5: 6 do not fit, 5 do. */
	ASSERT_EQ(lf_rio_rq_close(rq[0]), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[2], 3, 3, cq, cq, NULL, &no), -ENOSPC);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[2], 5, 0, cq, cq, NULL, &rq[2]), 0);
	/* A multishot receive takes its slices from the queue's receives. */
	struct lf_rio_buf one = { f.id, 0, 64 }, region = { f.id, 65536, 4 * 2048 };
	ASSERT_EQ(lf_rio_receive(rq[2], &one, 0, NULL), 0);
	ASSERT_EQ(lf_rio_receive_multishot(rq[2], &region, 2048, 8, NULL), -EINVAL); /* past the slice */
	region.length = 8 * 2048;
	ASSERT_EQ(lf_rio_receive_multishot(rq[2], &region, 2048, 8, NULL), -ENOBUFS);
	ASSERT_EQ(lf_rio_receive_multishot(rq[2], &region, 2048, 4, NULL), 0);
	ASSERT_EQ(lf_rio_receive(rq[2], &one, 0, NULL), -ENOBUFS);

	ASSERT_EQ(lf_rio_rq_close(rq[1]), 0);
	ASSERT_EQ(lf_rio_rq_close(rq[2]), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	for (int i = 0; i < 3; i++)
		close(s[i]);
	close(c);
	teardown(&f);
}

/* With separate receive and send completion queues, receives count
 * against the one and sends against the other, each to its own size. */
static void test_cq_reservations_split(void)
{
	struct fixture f;
	struct lf_rio_cq *rcq, *scq;
	struct lf_rio_rq *rq[2], *no;
	struct sockaddr_in sa[2];
	int s[2];

	setup(&f);
	for (int i = 0; i < 2; i++)
		s[i] = udp_bound(&sa[i]);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 4, NULL, &rcq), 0);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 2, NULL, &scq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[0], 2, 3, rcq, scq, NULL, &no), -ENOSPC); /* sends: 3 > 2 */
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[0], 5, 0, rcq, scq, NULL, &no), -ENOSPC); /* receives: 5 > 4 */
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[0], 3, 2, rcq, scq, NULL, &rq[0]), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[1], 1, 1, rcq, scq, NULL, &no), -ENOSPC); /* scq full */
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[1], 2, 0, rcq, scq, NULL, &no), -ENOSPC); /* rcq: 3 + 2 */
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[1], 1, 0, rcq, scq, NULL, &rq[1]), 0);
	ASSERT_EQ(lf_rio_rq_close(rq[0]), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s[0], 3, 2, rcq, scq, NULL, &rq[0]), 0);
	ASSERT_EQ(lf_rio_rq_close(rq[0]), 0);
	ASSERT_EQ(lf_rio_rq_close(rq[1]), 0);
	ASSERT_EQ(lf_rio_cq_close(rcq), 0);
	ASSERT_EQ(lf_rio_cq_close(scq), 0);
	for (int i = 0; i < 2; i++)
		close(s[i]);
	teardown(&f);
}

static const struct lf_test tests[] = {
	{ "single_thread_queue", test_single_thread_queue, 0 },
	{ "cq_errors", test_cq_errors, 0 },
	{ "register_errors", test_register_errors, 0 },
	{ "event_notify", test_event_notify, 0 },
	{ "port_threads", test_port_threads, 0 },
	{ "many_queues_one_cq", test_many_queues_one_cq, 0 },
	{ "cq_reservations", test_cq_reservations, 0 },
	{ "cq_reservations_split", test_cq_reservations_split, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
