/* The interposed data path: reads and writes on a fast-path socket.
 * Nothing here costs a socket loopfast has nothing to do with more than one
 * array lookup. What they add: a connect still pending on the fd finishes
 * first (connect.c); SHUT_RD keeps TCP's answer; reads may spin (spin.c);
 * the source address of a received message is TCP's (none), and so are
 * its descriptors (none); sendto and sendmsg ignore a destination as a
 * connected TCP socket does, and descriptors as it does. */
#include "internal.h"
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void lf__no_rights(int unx)
{
	int off = 0;

	lf__sys_setsockopt(unx, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off));
}

/* What TCP's recvmsg never gives: a source address, or descriptors. A
 * kernel without SO_PASSRIGHTS delivers the descriptors a peer sent (a
 * client of another uid may send its own): they are closed here, and
 * their message taken out (the kernel puts SCM_RIGHTS last). */
static void tcp_msg(int fd, struct msghdr *m)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST))
		return;
	if (m->msg_name)
		m->msg_namelen = 0;
	if (!m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
		return;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int rfd;
			memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			lf__sys_close(rfd);
		}
		m->msg_controllen = (size_t)((char *)c - (char *)m->msg_control);
		break;
	}
}

/* A connect pending on fd (connect.c) finishes before the data path uses
 * fd: a blocking call waits for the handshake, interruptibly; a
 * non-blocking one gets EAGAIN while it is in progress, as over TCP. A
 * handshake that failed reports its error once. A connection whose claim
 * is not seen yet has its bell looked at (bell.c), and a blocking read
 * waits on the bell too, so that a server that dies before its claim
 * gives EOF, not a hang. 0: go on; -1: errno. */
static int settle(int fd, int flags, bool reading)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f)
		return 0;
	unsigned fl = atomic_load_explicit(&f->flags, memory_order_relaxed);
	if (fl & LF_F_PENDING) {
		int ffl = lf__sys_fcntl(fd, F_GETFL, 0);
		if (lf__finalize(fd, ffl >= 0 && !(ffl & O_NONBLOCK) && !(flags & MSG_DONTWAIT)) < 0)
			return -1;
		fl = atomic_load_explicit(&f->flags, memory_order_relaxed);
	}
	if ((fl & LF_F_UNCONFIRMED) && reading && lf__bell_check(fd) &&
	    !(fl & (LF_F_NONBLOCK | LF_F_RCVTIMEO)) && !(flags & (MSG_DONTWAIT | MSG_PEEK)) &&
	    lf__bell_wait(fd, POLLIN) < 0)
		return -1;
	if (f->pend_err) {
		errno = f->pend_err;
		f->pend_err = 0;
		return -1;
	}
	return 0;
}

#define SETTLE_IO(fd, msgflags, reading)                                                               \
	do {                                                                                           \
		struct lf_fd *f_ = lf__fd(fd);                                                         \
		if (f_ && ((atomic_load_explicit(&f_->flags, memory_order_relaxed) &                   \
			    (LF_F_PENDING | LF_F_UNCONFIRMED)) || f_->pend_err) &&                       \
		    settle(fd, msgflags, reading))                                                     \
			return -1;                                                                     \
	} while (0)
#define SETTLE(fd, msgflags) SETTLE_IO(fd, msgflags, true)
#define SETTLE_WRITE(fd, msgflags) SETTLE_IO(fd, msgflags, false)

static ssize_t shut_rd_recvmsg(int fd, struct msghdr *m, int flags)
{
	int e = errno;
	ssize_t r = REAL(recvmsg)(fd, m, flags | MSG_DONTWAIT);

	if (r < 0 && errno == EAGAIN) {
		errno = e;
		return 0;
	}
	return r;
}

LF_EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	ssize_t r;

	SETTLE(fd, flags);
	if (lf__shut_rd(fd)) {
		r = shut_rd_recvmsg(fd, m, flags);
		if (r >= 0)
			tcp_msg(fd, m);
		return r;
	}
	if (lf__may_spin(fd) && lf__spin_recvmsg(fd, m, flags, &r) == LF_SPIN_DONE) {
		if (r >= 0)
			tcp_msg(fd, m);
		return r;
	}
	r = REAL(recvmsg)(fd, m, flags);
	if (r >= 0)
		tcp_msg(fd, m);
	return r;
}

LF_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl)
{
	SETTLE(fd, flags);
	if (!lf__may_spin(fd) && !sa && !lf__shut_rd(fd))
		return REAL(recvfrom)(fd, buf, n, flags, sa, sl);
	struct iovec iov = { buf, n };
	struct msghdr m = { .msg_name = sa, .msg_namelen = sl ? *sl : 0, .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t r = recvmsg(fd, &m, flags);
	if (r >= 0 && sa && sl)
		*sl = m.msg_namelen;
	return r;
}

LF_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	SETTLE(fd, flags);
	if (!lf__may_spin(fd) && !lf__shut_rd(fd))
		return REAL(recv)(fd, buf, n, flags);
	return recvfrom(fd, buf, n, flags, NULL, NULL);
}

LF_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	ssize_t r;

	SETTLE(fd, 0);
	if (lf__shut_rd(fd)) {
		struct iovec iov = { buf, n };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		return shut_rd_recvmsg(fd, &m, 0);
	}
	if (lf__may_spin(fd)) {
		struct iovec iov = { buf, n };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (lf__spin_recvmsg(fd, &m, 0, &r) == LF_SPIN_DONE)
			return r;
	}
	return REAL(read)(fd, buf, n);
}

LF_EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
	ssize_t r;

	SETTLE(fd, 0);
	if (lf__shut_rd(fd) && n >= 0) {
		struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
		return shut_rd_recvmsg(fd, &m, 0);
	}
	if (lf__may_spin(fd) && n >= 0) {
		struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
		if (lf__spin_recvmsg(fd, &m, 0, &r) == LF_SPIN_DONE)
			return r;
	}
	return REAL(readv)(fd, iov, n);
}

/* A connected TCP socket ignores the destination of sendto/sendmsg; a
 * connected Unix stream refuses it (EISCONN). */
LF_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl)
{
	struct lf_fd *f = lf__fd(fd);

	SETTLE_WRITE(fd, flags);
	if (sa && f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST)) {
		sa = NULL;
		sl = 0;
	}
	return REAL(sendto)(fd, buf, n, flags, sa, sl);
}

LF_EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
	struct lf_fd *f = lf__fd(fd);

	SETTLE_WRITE(fd, flags);
	if (!m || !f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST))
		return REAL(sendmsg)(fd, m, flags);
	struct msghdr copy = *m;
	copy.msg_name = NULL;
	copy.msg_namelen = 0;
	if (m->msg_control && m->msg_controllen >= sizeof(struct cmsghdr)) {
		/* TCP's sendmsg ignores descriptors and credentials; a Unix
		 * socket would carry them (or refuse: SO_PASSRIGHTS). They go,
		 * the rest stays. */
		char *ctl = malloc(m->msg_controllen);
		size_t k = 0;
		if (!ctl) {
			errno = ENOBUFS;
			return -1;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
			if (c->cmsg_level == SOL_SOCKET && (c->cmsg_type == SCM_RIGHTS || c->cmsg_type == SCM_CREDENTIALS))
				continue;
			size_t off = (size_t)((char *)c - (char *)m->msg_control), len = CMSG_ALIGN(c->cmsg_len);
			if (len > m->msg_controllen - off)
				len = m->msg_controllen - off;
			memcpy(ctl + k, c, len);
			k += len;
		}
		copy.msg_control = k ? ctl : NULL;
		copy.msg_controllen = k;
		ssize_t r = REAL(sendmsg)(fd, &copy, flags);
		int e = errno;
		free(ctl);
		errno = e;
		return r;
	}
	return REAL(sendmsg)(fd, &copy, flags);
}

/* The plain writes are interposed only for a connect still pending on
 * the fd (one array lookup otherwise). */
LF_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	SETTLE_WRITE(fd, 0);
	return REAL(write)(fd, buf, n);
}

LF_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
	SETTLE_WRITE(fd, 0);
	return REAL(writev)(fd, iov, n);
}

LF_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	SETTLE_WRITE(fd, flags);
	return REAL(send)(fd, buf, n, flags);
}
