/* Registered I/O tests of request queues: receives and sends on UDP and
 * TCP, their errors, multishot receive and recycling, cancellation, and a
 * socket closed under its queue. The domain's and completion queues' tests
 * are in test-rio.c. */
#include "rio_fixture.h"

static void test_udp_polled(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[8];
	struct sockaddr_in sa, ca;
	int s, c, seen = 0;

	setup(&f);
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 16, NULL, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 4, 4, cq, cq, &sa, &rq), 0);
	for (uintptr_t i = 0; i < 4; i++) {
		struct lf_rio_buf b = { f.id, i * 2048, 2048 };
		ASSERT_EQ(lf_rio_receive(rq, &b, 0, (void *)(i + 100)), 0);
	}
	ASSERT_EQ(lf_rio_dequeue(cq, res, 8), 0);
	send_n(c, &sa, 4, 100);
	ASSERT_EQ(drain(cq, res, 4), 4);
	for (int i = 0; i < 4; i++) {
		uintptr_t k = (uintptr_t)res[i].req_ctx - 100;
		unsigned seq;
		ASSERT_EQ(res[i].status, 0);
		ASSERT_EQ(res[i].bytes, 100);
		ASSERT(res[i].sock_ctx == &sa);
		ASSERT_EQ(res[i].buf.offset, k * 2048);
		memcpy(&seq, f.mem + k * 2048, sizeof(seq));
		seen |= 1 << seq;
	}
	ASSERT_EQ(seen, 0xf);
	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s);
	close(c);
	teardown(&f);
}

static void test_udp_from_and_send_to(void)
{
	struct fixture f;
	struct lf_rio_cq *rcq, *scq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[2];
	struct sockaddr_in sa, ca, from;
	struct lf_rio_buf data = { 0, 0, 512 }, addr = { 0, 4096, 128 }, out = { 0, 8192, 5 };
	char got[16];
	int s, c;

	setup(&f);
	data.id = addr.id = out.id = f.id;
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, NULL, &rcq), 0);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, NULL, &scq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 1, 1, rcq, scq, NULL, &rq), 0);
	ASSERT_EQ(lf_rio_receive_from(rq, &data, &addr, 0, NULL), 0);
	send_n(c, &sa, 1, 33);
	ASSERT_EQ(drain(rcq, res, 1), 1);
	ASSERT_EQ(res[0].status, 0);
	ASSERT_EQ(res[0].bytes, 33);
	memcpy(&from, f.mem + 4096, sizeof(from));
	ASSERT_EQ(from.sin_port, ca.sin_port);

	memcpy(f.mem + 8192, "hello", 5);
	ASSERT_EQ(lf_rio_send_to(rq, &out, (struct sockaddr *)&ca, sizeof(ca), 0, (void *)7), 0);
	ASSERT_EQ(drain(scq, res, 1), 1);
	ASSERT_EQ(res[0].status, 0);
	ASSERT_EQ(res[0].bytes, 5);
	ASSERT_EQ(res[0].flags, LF_RIO_RES_SEND);
	ASSERT(res[0].req_ctx == (void *)7);
	ASSERT_EQ(recv(c, got, sizeof(got), 0), 5);
	ASSERT_EQ(memcmp(got, "hello", 5), 0);

	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_cq_close(rcq), 0);
	ASSERT_EQ(lf_rio_cq_close(scq), 0);
	close(s);
	close(c);
	teardown(&f);
}

static void test_request_errors(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct sockaddr_in sa;
	struct lf_rio_buf b = { 0, 0, 64 }, bad;
	int s, p[2];

	setup(&f);
	b.id = f.id;
	s = udp_bound(&sa);
	ASSERT_EQ(pipe(p), 0);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 4, NULL, &cq), 0);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 0, NULL, &cq), -EINVAL);
	/* bad fd, not a socket, queue larger than the completion queue */
	ASSERT_EQ(lf_rio_rq_create(f.rio, -1, 1, 1, cq, cq, NULL, &rq), -EBADF);
	ASSERT_EQ(lf_rio_rq_create(f.rio, 999, 1, 1, cq, cq, NULL, &rq), -EBADF);
	ASSERT_EQ(lf_rio_rq_create(f.rio, p[0], 1, 1, cq, cq, NULL, &rq), -ENOTSOCK);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 4, 1, cq, cq, NULL, &rq), -ENOSPC);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 2, 1, cq, cq, NULL, &rq), 0);

	/* slices outside any registered buffer */
	bad = (struct lf_rio_buf){ f.id, REGION - 8, 64 };
	ASSERT_EQ(lf_rio_receive(rq, &bad, 0, NULL), -EINVAL);
	bad = (struct lf_rio_buf){ 17, 0, 64 };
	ASSERT_EQ(lf_rio_receive(rq, &bad, 0, NULL), -EINVAL);
	ASSERT_EQ(lf_rio_send(rq, &bad, 0, NULL), -EINVAL);
	ASSERT_EQ(lf_rio_receive(rq, NULL, 0, NULL), -EINVAL);
	ASSERT_EQ(lf_rio_receive(rq, &b, 0x100, NULL), -EINVAL);

	/* queue full, then deregistering with I/O in flight */
	ASSERT_EQ(lf_rio_receive(rq, &b, 0, NULL), 0);
	ASSERT_EQ(lf_rio_receive(rq, &b, LF_RIO_DEFER, NULL), 0);
	ASSERT_EQ(lf_rio_commit(rq), 0);
	ASSERT_EQ(lf_rio_receive(rq, &b, 0, NULL), -ENOBUFS);
	ASSERT_EQ(lf_rio_deregister_buffer(f.rio, f.id), -EBUSY);
	ASSERT_EQ(lf_rio_cq_close(cq), -EBUSY);
	ASSERT_EQ(lf_rio_close(f.rio), -EBUSY);
	ASSERT_EQ(lf_rio_notify(cq), -EINVAL);
	ASSERT_EQ(lf_rio_cq_eventfd(cq), -EINVAL);

	/* closing the queue cancels what is outstanding and frees the slices */
	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s);
	close(p[0]);
	close(p[1]);
	teardown(&f);
}

static void tcp_pair(int *a, int *b)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ASSERT_EQ(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ASSERT_EQ(listen(l, 1), 0);
	ASSERT_EQ(getsockname(l, (struct sockaddr *)&sa, &len), 0);
	*a = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_EQ(connect(*a, (struct sockaddr *)&sa, sizeof(sa)), 0);
	*b = accept(l, NULL, NULL);
	ASSERT_GE(*b, 0);
	close(l);
}

static void test_tcp_send_receive_close(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[2];
	struct lf_rio_buf in = { 0, 0, 4096 }, out = { 0, 4096, 1000 };
	char buf[1000];
	int a, b;

	setup(&f);
	in.id = out.id = f.id;
	tcp_pair(&a, &b);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 8, NULL, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, a, 2, 2, cq, cq, NULL, &rq), 0);

	memset(f.mem + 4096, 'x', 1000);
	ASSERT_EQ(lf_rio_send(rq, &out, 0, (void *)1), 0);
	ASSERT_EQ(drain(cq, res, 1), 1);
	ASSERT_EQ(res[0].status, 0);
	ASSERT_EQ(res[0].bytes, 1000);
	ASSERT_EQ(recv(b, buf, sizeof(buf), MSG_WAITALL), 1000);

	ASSERT_EQ(send(b, "ping", 4, 0), 4);
	ASSERT_EQ(lf_rio_receive(rq, &in, 0, (void *)2), 0);
	ASSERT_EQ(drain(cq, res, 1), 1);
	ASSERT_EQ(res[0].bytes, 4);
	ASSERT_EQ(memcmp(f.mem, "ping", 4), 0);

	/* The peer closes: a receive completes with 0 bytes, not an error. */
	close(b);
	ASSERT_EQ(lf_rio_receive(rq, &in, 0, (void *)3), 0);
	ASSERT_EQ(drain(cq, res, 1), 1);
	ASSERT_EQ(res[0].status, 0);
	ASSERT_EQ(res[0].bytes, 0);

	/* Sending on a socket shut for writing completes with -EPIPE (and no SIGPIPE). */
	ASSERT_EQ(shutdown(a, SHUT_WR), 0);
	ASSERT_EQ(lf_rio_send(rq, &out, 0, (void *)4), 0);
	ASSERT_EQ(drain(cq, res, 1), 1);
	ASSERT_EQ(res[0].status, -EPIPE);

	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_send(NULL, &out, 0, NULL), -EINVAL);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(a);
	teardown(&f);
}

static void test_multishot(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[16];
	struct lf_rio_buf region = { 0, 0, 8 * 2048 };
	struct sockaddr_in sa, ca;
	unsigned got = 0, next = 0;
	int s, c;

	setup(&f);
	region.id = f.id;
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 16, NULL, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 8, 0, cq, cq, NULL, &rq), 0);
	ASSERT_EQ(lf_rio_receive_multishot(rq, &region, 2048, 6, NULL), -EINVAL);
	ASSERT_EQ(lf_rio_receive_multishot(rq, &region, 2048, 8, (void *)9), 0);
	ASSERT_EQ(lf_rio_receive_multishot(rq, &region, 2048, 8, NULL), -EEXIST);
	ASSERT_EQ(lf_rio_deregister_buffer(f.rio, f.id), -EBUSY);
	/* More datagrams than slices: the ring runs dry and is re-armed as
	 * slices come back, and every datagram arrives once, in order. */
	send_n(c, &sa, 100, 200);
	for (int spins = 0; got < 100 && spins < 5000; spins++) {
		int n = lf_rio_dequeue_wait(cq, res, 16, 1);
		ASSERT_GE(n, 0);
		for (int i = 0; i < n; i++) {
			unsigned seq;
			ASSERT_EQ(res[i].status, 0);
			ASSERT_EQ(res[i].bytes, 200);
			ASSERT_EQ(res[i].flags, LF_RIO_RES_MULTISHOT | LF_RIO_RES_MORE);
			ASSERT(res[i].req_ctx == (void *)9);
			memcpy(&seq, lf_rio_buf_ptr(f.rio, &res[i].buf), sizeof(seq));
			ASSERT_EQ(seq, next);
			next++;
		}
		struct lf_rio_buf back[16];
		for (int i = 0; i < n; i++)
			back[i] = res[i].buf;
		ASSERT_EQ(lf_rio_recycle(rq, back, n), 0);
		got += n;
	}
	ASSERT_EQ(got, 100);
	struct lf_rio_buf wrong = { f.id, 100, 10 }, twice = { f.id, 0, 2048 };
	ASSERT_EQ(lf_rio_recycle(rq, &wrong, 1), -EINVAL);
	ASSERT_EQ(lf_rio_recycle(rq, &twice, 1), -EINVAL); /* all are back already */
	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s);
	close(c);
	teardown(&f);
}

static void test_cancel(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[8];
	struct lf_rio_buf region = { 0, 0, 8 * 2048 }, one = { 0, 65536, 100 };
	struct sockaddr_in sa, ca;
	int s, c, n;

	setup(&f);
	region.id = one.id = f.id;
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 16, NULL, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 9, 0, cq, cq, NULL, &rq), 0);
	ASSERT_EQ(lf_rio_receive_multishot(rq, &region, 2048, 8, (void *)1), 0);
	send_n(c, &sa, 3, 50);
	ASSERT_EQ(drain(cq, res, 3), 3);
	ASSERT_EQ(lf_rio_receive(rq, &one, 0, (void *)2), 0);
	/* Both end once: the receive with -ECANCELED, the multishot with a
	 * result that lacks LF_RIO_RES_MORE; nothing more arrives after. */
	ASSERT_EQ(lf_rio_cancel(rq), 2);
	ASSERT_EQ(drain(cq, res, 2), 2);
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(res[i].status, -ECANCELED);
		ASSERT_EQ(res[i].flags & LF_RIO_RES_MORE, 0);
	}
	send_n(c, &sa, 1, 50);
	usleep(20000);
	n = lf_rio_dequeue(cq, res, 8);
	ASSERT_EQ(n, 0);
	ASSERT_EQ(lf_rio_cancel(rq), 0);
	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s);
	close(c);
	teardown(&f);
}

/* A socket closed before its queue exists is -EBADF; one closed under a
 * queue with receives outstanding stays usable until the queue closes
 * (io_uring holds it as a fixed file), and closing then frees everything. */
static void test_closed_socket(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	struct lf_rio_result res[2];
	struct lf_rio_buf b = { 0, 0, 256 };
	struct sockaddr_in sa, ca;
	int s, c;

	setup(&f);
	b.id = f.id;
	s = udp_bound(&sa);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 4, NULL, &cq), 0);
	close(s);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 1, 1, cq, cq, NULL, &rq), -EBADF);

	s = udp_bound(&sa);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s, 2, 1, cq, cq, NULL, &rq), 0);
	ASSERT_EQ(lf_rio_receive(rq, &b, 0, NULL), 0);
	ASSERT_EQ(shutdown(s, SHUT_RD), -1); /* unconnected UDP: ENOTCONN, but it wakes readers */
	ASSERT_EQ(drain(cq, res, 1), 1);
	ASSERT_EQ(res[0].status, 0);
	ASSERT_EQ(res[0].bytes, 0);
	ASSERT_EQ(lf_rio_receive(rq, &b, 0, NULL), 0);
	close(s);
	ASSERT_EQ(lf_rio_rq_close(rq), 0);
	ASSERT_EQ(lf_rio_rq_close(NULL), -EINVAL);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(c);
	teardown(&f);
}

/* Waits (up to 5 s, entering the kernel so that io_uring's task work runs)
 * until the kernel shows at least `tail` CQEs posted and `overflow` held
 * in its overflow list; fails the test otherwise. */
static void wait_uring(unsigned long tail, unsigned long overflow)
{
	struct uring_view v = uring_view();

	for (int i = 0; i < 5000 && (v.tail < tail || v.overflow < overflow); i++) {
		usleep(1000);
		v = uring_view();
	}
	ASSERT_GE(v.tail, tail);
	ASSERT_GE(v.overflow, overflow);
}

/* A completion queue whose ring is full when a multishot receive has a
 * message (here: full of cancellations, two CQEs per cancelled receive,
 * which no reservation counts), with nothing dequeued meanwhile. io_uring
 * keeps what does not fit in its overflow list and ends the multishot
 * receive; lf_rio_dequeue() collects the overflow in order and re-arms the
 * receive, so every datagram is delivered exactly once, in order, each
 * result with LF_RIO_RES_MORE, and every cancelled receive completes once
 * (lf_rio(3), "Completion queue overflow"). */
static void test_multishot_overflows_cq(void)
{
	struct fixture f;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *a, *b;
	struct lf_rio_result res[64];
	struct lf_rio_buf region = { 0, 0, 128 * 256 };
	struct sockaddr_in sa, sb, ca;
	unsigned cancelled = 0, next = 0;
	int s1, s2, c;

	setup(&f);
	region.id = f.id;
	s1 = udp_bound(&sa);
	s2 = udp_bound(&sb);
	c = udp_bound(&ca);
	ASSERT_EQ(lf_rio_cq_create(f.rio, 256, NULL, &cq), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s1, 128, 0, cq, cq, (void *)1, &a), 0);
	ASSERT_EQ(lf_rio_rq_create(f.rio, s2, 128, 0, cq, cq, (void *)2, &b), 0);
	ASSERT_EQ(lf_rio_receive_multishot(b, &region, 256, 128, NULL), 0);
	for (uintptr_t i = 0; i < 128; i++) {
		struct lf_rio_buf one = { f.id, 65536 + i * 256, 256 };
		ASSERT_EQ(lf_rio_receive(a, &one, 0, (void *)i), 0);
	}
	ASSERT_EQ(lf_rio_cancel(a), 128);
	wait_uring(256, 0); /* the ring (256 entries) is full */
	send_n(c, &sb, 200, 100);
	wait_uring(256, 1); /* the multishot's message went to the overflow list */

	for (int spins = 0; (cancelled < 128 || next < 200) && spins < 5000; spins++) {
		int n = lf_rio_dequeue_wait(cq, res, 64, 1);
		struct lf_rio_buf back[64];
		int nback = 0;
		ASSERT_GE(n, 0);
		for (int i = 0; i < n; i++) {
			if (res[i].sock_ctx == (void *)1) {
				ASSERT_EQ(res[i].status, -ECANCELED);
				ASSERT_EQ(res[i].flags, 0);
				cancelled++;
				continue;
			}
			unsigned seq;
			ASSERT(res[i].sock_ctx == (void *)2);
			ASSERT_EQ(res[i].status, 0);
			ASSERT_EQ(res[i].bytes, 100);
			ASSERT_EQ(res[i].flags, LF_RIO_RES_MULTISHOT | LF_RIO_RES_MORE);
			memcpy(&seq, lf_rio_buf_ptr(f.rio, &res[i].buf), sizeof(seq));
			ASSERT_EQ(seq, next);
			next++;
			back[nback++] = res[i].buf;
		}
		ASSERT_EQ(lf_rio_recycle(b, back, nback), 0);
	}
	ASSERT_EQ(cancelled, 128);
	ASSERT_EQ(next, 200);
	ASSERT_EQ(lf_rio_dequeue_wait(cq, res, 64, 50), 0); /* nothing twice */
	ASSERT_EQ(uring_view().overflow, 0);

	/* The queue goes on working: a receive on the cancelled queue, and the
	 * multishot receive, still armed. */
	struct lf_rio_buf one = { f.id, 65536, 256 };
	ASSERT_EQ(lf_rio_receive(a, &one, 0, (void *)7), 0);
	send_n(c, &sa, 1, 10);
	send_n(c, &sb, 1, 10);
	ASSERT_EQ(drain(cq, res, 2), 2);
	ASSERT_EQ(res[0].status, 0);
	ASSERT_EQ(res[1].status, 0);
	ASSERT((uintptr_t)res[0].sock_ctx + (uintptr_t)res[1].sock_ctx == 3);

	ASSERT_EQ(lf_rio_rq_close(a), 0);
	ASSERT_EQ(lf_rio_rq_close(b), 0);
	ASSERT_EQ(lf_rio_cq_close(cq), 0);
	close(s1);
	close(s2);
	close(c);
	teardown(&f);
}

static const struct lf_test tests[] = {
	{ "closed_socket", test_closed_socket, 0 },
	{ "cancel", test_cancel, 0 },
	{ "udp_polled", test_udp_polled, 0 },
	{ "udp_from_and_send_to", test_udp_from_and_send_to, 0 },
	{ "request_errors", test_request_errors, 0 },
	{ "tcp_send_receive_close", test_tcp_send_receive_close, 0 },
	{ "multishot", test_multishot, 0 },
	{ "multishot_overflows_cq", test_multishot_overflows_cq, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
