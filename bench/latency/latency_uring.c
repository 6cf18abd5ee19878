/* io_uring completion styles of the latency benchmark.
 *
 *   uring       IORING_OP_SEND / IORING_OP_RECV on the socket, then wait for
 *               the completion in io_uring_enter (the "IOCP wait" of io_uring).
 *   uring-poll  registered buffers (READ_FIXED / WRITE_FIXED) and a fixed
 *               file; completions are reaped by spinning on the CQ ring (the
 *               "RIO poll" row). With IORING_SETUP_COOP_TASKRUN the kernel
 *               does not interrupt us to run the completion's task work; with
 *               IORING_SETUP_TASKRUN_FLAG it sets IORING_SQ_TASKRUN instead
 *               and we must enter the kernel with GETEVENTS to run it, or the
 *               completion never shows up. Where the kernel lacks the flags
 *               the ring is set up without them and the row says so.
 *
 * send() only prepares the SQE; the next recv() submits it together with
 * the receive (one io_uring_enter per message and side), and fini() flushes
 * a send that no receive followed. A short send or receive is resubmitted
 * for the rest. SQPOLL is not used: on 2 CPUs its thread competes with the
 * two processes (~4 ms tails measured here).
 */
#include "latency.h"

#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

enum { UD_SEND = 1, UD_RECV = 2 };

struct uring_ctx {
	struct io_uring ring;
	bool poll, ring_ok;
	int fd;                  /* the socket, or fixed-file index 0 */
	char *bufs;              /* poll: one registered region, tx then rx */
	size_t size;
	const char *tx;          /* the send in flight */
	size_t tx_len, tx_done;
	bool tx_busy;
	int err;
};

static struct io_uring_sqe *get_sqe(struct uring_ctx *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	if (!sqe) {
		io_uring_submit(&u->ring);
		sqe = io_uring_get_sqe(&u->ring);
	}
	return sqe;
}

static int prep(struct uring_ctx *u, int what, void *buf, size_t len)
{
	struct io_uring_sqe *sqe = get_sqe(u);

	if (!sqe)
		return -EBUSY;
	if (u->poll) {
		if (what == UD_SEND)
			io_uring_prep_write_fixed(sqe, 0, buf, (unsigned)len, 0, 0);
		else
			io_uring_prep_read_fixed(sqe, 0, buf, (unsigned)len, 0, 0);
		sqe->flags |= IOSQE_FIXED_FILE;
	} else if (what == UD_SEND) {
		io_uring_prep_send(sqe, u->fd, buf, len, MSG_NOSIGNAL);
	} else {
		io_uring_prep_recv(sqe, u->fd, buf, len, 0);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)what);
	return 0;
}

static int uring_init(void **ctx, struct lat_chan *c, char *reason, char *note, bool poll)
{
	struct uring_ctx *u = calloc(1, sizeof(*u));
	int err;

	if (!u)
		return -ENOMEM;
	*ctx = u;
	u->poll = poll;
	u->size = c->size;
	u->fd = c->fd;
	if (poll) {
		struct io_uring_params p = { .flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG };

		err = io_uring_queue_init_params(8, &u->ring, &p);
		if (err == -EINVAL) {
			err = io_uring_queue_init(8, &u->ring, 0);
			if (!err)
				snprintf(note, LAT_REASON_LEN, "without IORING_SETUP_COOP_TASKRUN|TASKRUN_FLAG (kernel lacks them)");
		}
	} else {
		err = io_uring_queue_init(8, &u->ring, 0);
	}
	if (err) {
		snprintf(reason, LAT_REASON_LEN, "io_uring_queue_init: %s", strerror(-err));
		return 1;
	}
	u->ring_ok = true;
	if (!poll)
		return 0;

	struct iovec iov;

	u->bufs = aligned_alloc(4096, (2 * c->size + 4095) / 4096 * 4096);
	if (!u->bufs)
		return -ENOMEM;
	iov.iov_base = u->bufs;
	iov.iov_len = 2 * c->size;
	err = io_uring_register_buffers(&u->ring, &iov, 1);
	if (err) {
		snprintf(reason, LAT_REASON_LEN, "io_uring_register_buffers: %s", strerror(-err));
		return 1;
	}
	err = io_uring_register_files(&u->ring, &c->fd, 1);
	if (err) {
		snprintf(reason, LAT_REASON_LEN, "io_uring_register_files: %s", strerror(-err));
		return 1;
	}
	u->fd = 0;
	return 0;
}

static int uring_wait_init(void **ctx, struct lat_chan *c, char *reason, char *note)
{
	return uring_init(ctx, c, reason, note, false);
}

static int uring_poll_init(void **ctx, struct lat_chan *c, char *reason, char *note)
{
	return uring_init(ctx, c, reason, note, true);
}

/* Returns the next completion: waits in the kernel (uring) or spins on the
 * CQ ring, entering the kernel only when it flags pending task work. */
static int next_cqe(struct uring_ctx *u, struct io_uring_cqe **cqe)
{
	if (!u->poll)
		return io_uring_wait_cqe(&u->ring, cqe);
	for (;;) {
		if (io_uring_peek_cqe(&u->ring, cqe) == 0)
			return 0;
		if (IO_URING_READ_ONCE(*u->ring.sq.kflags) & IORING_SQ_TASKRUN) {
			int err = io_uring_get_events(&u->ring);

			if (err < 0 && err != -EINTR && err != -EAGAIN)
				return err;
		} else {
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#endif
		}
	}
}

/* Handles a send completion: resubmits the rest of a short send. */
static int on_send(struct uring_ctx *u, int res)
{
	if (res < 0)
		return u->err = res;
	u->tx_done += (size_t)res;
	if (u->tx_done < u->tx_len)
		return prep(u, UD_SEND, (char *)u->tx + u->tx_done, u->tx_len - u->tx_done) ?: io_uring_submit(&u->ring) < 0 ? -EIO : 0;
	u->tx_busy = false;
	return 0;
}

/* The poll style reads and writes only within the registered region. */
static const void *in_region(struct uring_ctx *u, const void *buf, size_t len, bool tx)
{
	if (!u->poll)
		return buf;
	if ((const char *)buf >= u->bufs && (const char *)buf + len <= u->bufs + 2 * u->size)
		return buf;
	char *dst = u->bufs + (tx ? 0 : u->size);

	if (tx)
		memcpy(dst, buf, len);
	return dst;
}

static int uring_send(void *ctx, const void *buf, size_t len)
{
	struct uring_ctx *u = ctx;

	if (u->err)
		return u->err;
	if (u->tx_busy)
		return -EBUSY; /* the previous message is still going out */
	u->tx = in_region(u, buf, len, true);
	u->tx_len = len;
	u->tx_done = 0;
	u->tx_busy = true;
	return prep(u, UD_SEND, (void *)u->tx, len);
}

static int uring_recv(void *ctx, void *buf, size_t len)
{
	struct uring_ctx *u = ctx;
	char *dst = (char *)in_region(u, buf, len, false);
	size_t done = 0;
	int err;

	if (u->err)
		return u->err;
	err = prep(u, UD_RECV, dst, len);
	if (err)
		return err;
	/* One system call: submit the send and the receive, and (uring) wait
	 * for both completions; the send's is posted at once. */
	err = u->poll ? io_uring_submit(&u->ring) : io_uring_submit_and_wait(&u->ring, u->tx_busy ? 2 : 1);
	if (err < 0)
		return err;
	while (done < len || u->tx_busy) {
		struct io_uring_cqe *cqe;
		uint64_t what;
		int res;

		err = next_cqe(u, &cqe);
		if (err == -EINTR)
			continue;
		if (err)
			return err;
		what = io_uring_cqe_get_data64(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&u->ring, cqe);
		if (what == UD_SEND) {
			err = on_send(u, res);
		} else if (res <= 0) {
			err = res ? res : -ECONNRESET;
		} else {
			done += (size_t)res;
			if (done < len) {
				err = prep(u, UD_RECV, dst + done, len - done);
				if (!err && io_uring_submit(&u->ring) < 0)
					err = -EIO;
			}
		}
		if (err)
			return err;
	}
	if (dst != buf)
		memcpy(buf, dst, len);
	return 0;
}

static void uring_fini(void *ctx)
{
	struct uring_ctx *u = ctx;

	if (!u)
		return;
	if (u->ring_ok) {
		/* Flush a send that no receive followed (the echoer's last reply). */
		io_uring_submit(&u->ring);
		while (u->tx_busy && !u->err) {
			struct io_uring_cqe *cqe;

			if (next_cqe(u, &cqe))
				break;
			uint64_t what = io_uring_cqe_get_data64(cqe);
			int res = cqe->res;

			io_uring_cqe_seen(&u->ring, cqe);
			if (what == UD_SEND)
				on_send(u, res);
		}
		io_uring_queue_exit(&u->ring);
	}
	free(u->bufs);
	free(u);
}

static void uring_bufs(void *ctx, void **tx, void **rx)
{
	struct uring_ctx *u = ctx;

	*tx = u->bufs;
	*rx = u->bufs + u->size;
}

static const struct lat_ops uring_ops = { uring_wait_init, uring_send, uring_recv, uring_fini, NULL };
static const struct lat_ops uring_poll_ops = { uring_poll_init, uring_send, uring_recv, uring_fini, uring_bufs };

const struct lat_ops *lat_uring_ops(bool poll)
{
	return poll ? &uring_poll_ops : &uring_ops;
}
