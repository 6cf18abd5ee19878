/* The traditional servers of seed 002, on Linux system calls: a blocking
 * recv loop ("simple polled"), recvmmsg batches, epoll with one thread (the
 * IOCP analog) and epoll with N threads (IOCP MT). Each waits at most
 * 100 ms at a time so that a run can always be stopped. */
#include "udp.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

static int set_timeout(int fd)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };

	return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ? -errno : 0;
}

int udp_serve_simple(struct udp_run *run)
{
	unsigned char buf[65536];
	struct udp_tally t = { 0 };
	int ret = set_timeout(run->fd);

	if (ret < 0)
		return ret;
	udp_started(run);
	for (;;) {
		ssize_t n = recv(run->fd, buf, sizeof(buf), 0);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				return -errno;
		} else if (udp_datagram(run, &t, buf, (unsigned)n) && t.count < UDP_BATCH) {
			continue;
		}
		if (!udp_flush(run, &t))
			return 0;
	}
}

int udp_serve_recvmmsg(struct udp_run *run)
{
	static __thread unsigned char bufs[UDP_BATCH][2048];
	struct mmsghdr msgs[UDP_BATCH];
	struct iovec iov[UDP_BATCH];
	struct udp_tally t = { 0 };
	int ret = set_timeout(run->fd);

	if (ret < 0)
		return ret;
	if (run->size > sizeof(bufs[0]))
		return -EMSGSIZE;
	udp_started(run);
	for (;;) {
		for (int i = 0; i < UDP_BATCH; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = sizeof(bufs[i]);
			memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		int n = recvmmsg(run->fd, msgs, UDP_BATCH, MSG_WAITFORONE, NULL);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		for (int i = 0; i < n; i++)
			if (!udp_datagram(run, &t, bufs[i], msgs[i].msg_len))
				break;
		if (!udp_flush(run, &t))
			return 0;
	}
}

struct epoll_ctx {
	struct udp_run *run;
	int ep, stopfd, err;
};

/* Waits for readiness, then reads until the socket is empty, as an IOCP
 * thread does with one completion at a time. */
static void *epoll_thread(void *arg)
{
	struct epoll_ctx *c = arg;
	struct udp_run *run = c->run;
	unsigned char buf[65536];
	struct udp_tally t = { 0 };
	struct epoll_event ev[4];

	for (;;) {
		int n = epoll_wait(c->ep, ev, 4, 100);
		if (n < 0 && errno != EINTR) {
			c->err = -errno;
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].data.fd != run->fd)
				continue;
			for (;;) {
				ssize_t len = recv(run->fd, buf, sizeof(buf), MSG_DONTWAIT);
				if (len < 0)
					break;
				if (!udp_datagram(run, &t, buf, (unsigned)len))
					break;
				if (t.count >= UDP_BATCH)
					udp_flush(run, &t);
			}
		}
		if (t.stop) {
			uint64_t one = 1;
			if (write(c->stopfd, &one, sizeof(one)) < 0)
				c->err = -errno;
		}
		if (!udp_flush(run, &t))
			return NULL;
	}
}

static int serve_epoll_n(struct udp_run *run, unsigned threads)
{
	struct epoll_ctx c = { .run = run };
	struct epoll_event ev = { .events = EPOLLIN };
	pthread_t th[64];
	unsigned started = 0;
	int ret = 0;

	c.ep = epoll_create1(EPOLL_CLOEXEC);
	c.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c.ep < 0 || c.stopfd < 0) {
		ret = -errno;
		goto out;
	}
	ev.data.fd = run->fd;
	if (epoll_ctl(c.ep, EPOLL_CTL_ADD, run->fd, &ev) < 0) {
		ret = -errno;
		goto out;
	}
	ev.data.fd = c.stopfd;
	if (epoll_ctl(c.ep, EPOLL_CTL_ADD, c.stopfd, &ev) < 0) {
		ret = -errno;
		goto out;
	}
	udp_started(run);
	if (threads == 1) {
		epoll_thread(&c);
	} else {
		for (; started < threads && started < 64; started++)
			if (pthread_create(&th[started], NULL, epoll_thread, &c)) {
				atomic_store(&run->stop, true);
				ret = -EAGAIN;
				break;
			}
		for (unsigned i = 0; i < started; i++)
			pthread_join(th[i], NULL);
	}
	if (!ret)
		ret = c.err;
out:
	if (c.ep >= 0)
		close(c.ep);
	if (c.stopfd >= 0)
		close(c.stopfd);
	return ret;
}

int udp_serve_epoll(struct udp_run *run)
{
	return serve_epoll_n(run, 1);
}

int udp_serve_epoll_mt(struct udp_run *run)
{
	return serve_epoll_n(run, run->threads);
}
