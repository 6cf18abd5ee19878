/* Completion styles of the latency benchmark on sockets (block, epoll,
 * spin) and on the shared-memory ring (spin only).
 *
 * Every style sends with send(MSG_NOSIGNAL) on the blocking socket and
 * differs only in how it waits for the reply:
 *   block  read() until the whole message is there;
 *   epoll  epoll_wait() for EPOLLIN, then recv(MSG_DONTWAIT) what is there;
 *   spin   recv(MSG_DONTWAIT) in a loop, never sleeping.
 * A stream may deliver a message in pieces; every style loops until it has
 * the whole message.
 */
#include "latency.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

struct sock_ctx {
	int fd, ep;
};

static int sock_init(void **ctx, struct lat_chan *c, char *reason, char *note)
{
	struct sock_ctx *s = calloc(1, sizeof(*s));

	(void)reason;
	(void)note;
	if (!s)
		return -ENOMEM;
	s->fd = c->fd;
	s->ep = -1;
	*ctx = s;
	return 0;
}

static int epoll_init(void **ctx, struct lat_chan *c, char *reason, char *note)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct sock_ctx *s;
	int err = sock_init(ctx, c, reason, note);

	if (err)
		return err;
	s = *ctx;
	s->ep = epoll_create1(EPOLL_CLOEXEC);
	if (s->ep < 0)
		return -errno;
	ev.data.fd = s->fd;
	if (epoll_ctl(s->ep, EPOLL_CTL_ADD, s->fd, &ev) < 0)
		return -errno;
	return 0;
}

static void sock_fini(void *ctx)
{
	struct sock_ctx *s = ctx;

	if (s && s->ep >= 0)
		close(s->ep);
	free(s);
}

static int sock_send(void *ctx, const void *buf, size_t len)
{
	struct sock_ctx *s = ctx;
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(s->fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	return 0;
}

static int block_recv(void *ctx, void *buf, size_t len)
{
	struct sock_ctx *s = ctx;
	size_t done = 0;

	while (done < len) {
		ssize_t n = read(s->fd, (char *)buf + done, len - done);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	return 0;
}

static int epoll_recv(void *ctx, void *buf, size_t len)
{
	struct sock_ctx *s = ctx;
	struct epoll_event ev;
	size_t done = 0;

	while (done < len) {
		int k = epoll_wait(s->ep, &ev, 1, -1);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			continue;
		ssize_t n = recv(s->fd, (char *)buf + done, len - done, MSG_DONTWAIT);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	return 0;
}

static int spin_recv(void *ctx, void *buf, size_t len)
{
	struct sock_ctx *s = ctx;
	size_t done = 0;

	while (done < len) {
		ssize_t n = recv(s->fd, (char *)buf + done, len - done, MSG_DONTWAIT);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				cpu_relax();
				continue;
			}
			return -errno;
		}
		done += (size_t)n;
	}
	return 0;
}

static const struct lat_ops block_ops = { sock_init, sock_send, block_recv, sock_fini, NULL };
static const struct lat_ops epoll_ops = { epoll_init, sock_send, epoll_recv, sock_fini, NULL };
static const struct lat_ops spin_ops = { sock_init, sock_send, spin_recv, sock_fini, NULL };

const struct lat_ops *lat_socket_ops(enum lat_style s)
{
	switch (s) {
	case LAT_BLOCK: return &block_ops;
	case LAT_EPOLL: return &epoll_ops;
	case LAT_SPIN: return &spin_ops;
	default: return NULL;
	}
}

/* The shared-memory transport: one single-producer/single-consumer ring per
 * direction, in a MAP_SHARED mapping that the parent creates before fork.
 * The producer copies a message into the next slot and publishes it with a
 * release store of head; the consumer spins on an acquire load of head,
 * copies the message out and releases the slot through tail. Head and tail
 * live on their own cache lines. There is no sleeping wake-up (no futex), so
 * only the spin style makes sense on it: it is the floor of the table, the
 * cost of moving a cache line between two CPUs.
 */
#define SHM_SLOTS 8u
#define CACHELINE 64

struct lat_shm_ring {
	_Alignas(CACHELINE) _Atomic uint64_t head;
	_Alignas(CACHELINE) _Atomic uint64_t tail;
	_Alignas(CACHELINE) unsigned char data[];
};

static size_t slot_bytes(size_t size)
{
	return (size + CACHELINE - 1) / CACHELINE * CACHELINE;
}

static size_t ring_bytes(size_t size)
{
	return sizeof(struct lat_shm_ring) + SHM_SLOTS * slot_bytes(size);
}

size_t lat_shm_bytes(size_t size)
{
	return 2 * ring_bytes(size);
}

void lat_shm_setup(void *mem, size_t size, struct lat_shm_ring **a, struct lat_shm_ring **b)
{
	memset(mem, 0, lat_shm_bytes(size));
	*a = mem;
	*b = (struct lat_shm_ring *)((char *)mem + ring_bytes(size));
}

struct shm_ctx {
	struct lat_shm_ring *tx, *rx;
	size_t slot;
	uint64_t tx_tail;	/* last tail seen: read the peer's line only when the ring looks full */
};

static int shm_init(void **ctx, struct lat_chan *c, char *reason, char *note)
{
	struct shm_ctx *s = calloc(1, sizeof(*s));

	(void)reason;
	(void)note;
	if (!s)
		return -ENOMEM;
	s->tx = c->tx;
	s->rx = c->rx;
	s->slot = slot_bytes(c->size);
	*ctx = s;
	return 0;
}

static int shm_send(void *ctx, const void *buf, size_t len)
{
	struct shm_ctx *s = ctx;
	uint64_t h = atomic_load_explicit(&s->tx->head, memory_order_relaxed);

	while (h - s->tx_tail >= SHM_SLOTS) {
		s->tx_tail = atomic_load_explicit(&s->tx->tail, memory_order_acquire);
		if (h - s->tx_tail >= SHM_SLOTS)
			cpu_relax();
	}
	memcpy(s->tx->data + (h % SHM_SLOTS) * s->slot, buf, len);
	atomic_store_explicit(&s->tx->head, h + 1, memory_order_release);
	return 0;
}

static int shm_recv(void *ctx, void *buf, size_t len)
{
	struct shm_ctx *s = ctx;
	uint64_t t = atomic_load_explicit(&s->rx->tail, memory_order_relaxed);

	while (atomic_load_explicit(&s->rx->head, memory_order_acquire) == t)
		cpu_relax();
	memcpy(buf, s->rx->data + (t % SHM_SLOTS) * s->slot, len);
	atomic_store_explicit(&s->rx->tail, t + 1, memory_order_release);
	return 0;
}

static void shm_fini(void *ctx)
{
	free(ctx);
}

static const struct lat_ops shm_ops = { shm_init, shm_send, shm_recv, shm_fini, NULL };

const struct lat_ops *lat_shm_ops(void)
{
	return &shm_ops;
}
