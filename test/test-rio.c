#include "runner.h"

#include "loopfast/rio.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define REGION (1 << 20)

struct fixture {
	struct lf_rio *rio;
	char *mem;
	int id;
};

/* Why io_uring_setup says EPERM: the sysctl, or a seccomp filter. */
static const char *rio_disabled_by(void)
{
	static char why[128];
	char line[128];
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	int v = 0;

	if (f && fscanf(f, "%d", &v) == 1 && v) {
		fclose(f);
		snprintf(why, sizeof(why), "kernel.io_uring_disabled=%d", v);
		return why;
	}
	if (f)
		fclose(f);
	f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Seccomp: %d", &v) == 1 && v) {
			fclose(f);
			return "a seccomp filter";
		}
	if (f)
		fclose(f);
	ASSERT(!"io_uring_setup says EPERM, but neither the sysctl nor seccomp disables it");
	return NULL;
}

static void setup(struct fixture *f)
{
	int ret = lf_rio_open(&f->rio);
	if (ret == -ENOSYS)
		LF_SKIP("io_uring absent (ENOSYS)");
	if (ret == -EPERM)
		LF_SKIP("io_uring disabled (EPERM): %s", rio_disabled_by());
	ASSERT_EQ(ret, 0);
	f->mem = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT(f->mem != MAP_FAILED);
	f->id = lf_rio_register_buffer(f->rio, f->mem, REGION);
	ASSERT_GE(f->id, 0);
}

static void teardown(struct fixture *f)
{
	ASSERT_EQ(lf_rio_deregister_buffer(f->rio, f->id), 0);
	ASSERT_EQ(lf_rio_close(f->rio), 0);
	munmap(f->mem, REGION);
}

/* A UDP socket bound to 127.0.0.1 on an ephemeral port. */
static int udp_bound(struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);
	int fd = socket(AF_INET, SOCK_DGRAM, 0), big = 4 << 20;

	ASSERT_GE(fd, 0);
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ASSERT_EQ(bind(fd, (struct sockaddr *)sa, sizeof(*sa)), 0);
	ASSERT_EQ(getsockname(fd, (struct sockaddr *)sa, &len), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	return fd;
}

static void send_n(int fd, const struct sockaddr_in *to, unsigned n, unsigned size)
{
	char buf[2048];

	for (unsigned i = 0; i < n; i++) {
		memset(buf, 'a' + i % 26, size);
		memcpy(buf, &i, sizeof(i));
		ASSERT_EQ(sendto(fd, buf, size, 0, (const struct sockaddr *)to, sizeof(*to)), size);
	}
}

/* Dequeues until `want` results arrived (or 5 s passed). */
static unsigned drain(struct lf_rio_cq *cq, struct lf_rio_result *res, unsigned want)
{
	unsigned got = 0;

	for (int spins = 0; got < want && spins < 5000; spins++) {
		int n = lf_rio_dequeue_wait(cq, res + got, want - got, 1);
		ASSERT_GE(n, 0);
		got += n;
	}
	return got;
}

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

static const struct lf_test tests[] = {
	{ "single_thread_queue", test_single_thread_queue, 0 },
	{ "cq_errors", test_cq_errors, 0 },
	{ "closed_socket", test_closed_socket, 0 },
	{ "cancel", test_cancel, 0 },
	{ "register_errors", test_register_errors, 0 },
	{ "udp_polled", test_udp_polled, 0 },
	{ "udp_from_and_send_to", test_udp_from_and_send_to, 0 },
	{ "request_errors", test_request_errors, 0 },
	{ "tcp_send_receive_close", test_tcp_send_receive_close, 0 },
	{ "event_notify", test_event_notify, 0 },
	{ "port_threads", test_port_threads, 0 },
	{ "multishot", test_multishot, 0 },
	{ "many_queues_one_cq", test_many_queues_one_cq, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
