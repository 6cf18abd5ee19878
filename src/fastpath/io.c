/* The interposed data path: reads and writes on a fast-path socket.
 * Nothing here costs a socket loopfast has nothing to do with more than one
 * array lookup. What they add: a connect still pending on the fd finishes
 * first (connect.c); SHUT_RD keeps TCP's answer; reads may spin (spin.c);
 * the source address of a received message is TCP's (none), and so is its
 * ancillary data (none); sendto and sendmsg ignore a destination as a
 * connected TCP socket does, and sendmsg's ancillary data. */
#include "internal.h"
#include "syscalls.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
	    !(fl & (LF_F_NONBLOCK | LF_F_RCVTIMEO)) && !(flags & MSG_DONTWAIT) &&
	    lf__bell_wait(fd, POLLIN) < 0)
		return -1;
	int err = lf__err_take(fd);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

#define SETTLE_IO(fd, msgflags, reading)                                                               \
	do {                                                                                           \
		struct lf_fd *f_ = lf__fd_peek(fd);                                                    \
		if (f_ && ((atomic_load_explicit(&f_->flags, memory_order_relaxed) &                   \
			    (LF_F_PENDING | LF_F_UNCONFIRMED)) || f_->pend_err) &&                       \
		    settle(fd, msgflags, reading))                                                     \
			return -1;                                                                     \
	} while (0)
/* recv, send and sendto clamp a larger length to the kernel's
 * MAX_RW_COUNT (read, write and the vectored calls say EINVAL past
 * SSIZE_MAX instead: the tier leaves those to the kernel, and clamps the
 * rest, shm_io.c's cur_init). */
#define MAX_RW LF_MAX_RW

#define SETTLE(fd, msgflags) SETTLE_IO(fd, msgflags, true)

/* The shm tier (shm.c) takes a call on a socket that holds it, unless the
 * connection is not (or no longer) on the tier. */
#define SHM_IO(fn, fd, iovp, niov, flags)                                                              \
	do {                                                                                           \
		if (lf__shm_on(fd)) {                                                                  \
			struct msghdr m_ = { .msg_iov = (struct iovec *)(iovp), .msg_iovlen = (size_t)(niov) }; \
			ssize_t r_;                                                                    \
			if (fn(fd, &m_, flags, &r_))                                                   \
				return r_;                                                             \
		}                                                                                      \
	} while (0)
#define SHM_READ(fd, iovp, niov, flags) SHM_IO(lf__shm_recv, fd, iovp, niov, flags)
#define SHM_WRITE(fd, iovp, niov, flags) SHM_IO(lf__shm_send, fd, iovp, niov, flags)
#define SETTLE_WRITE(fd, msgflags) SETTLE_IO(fd, msgflags, false)

/* SO_SNDTIMEO on a blocking write to a Unix stream: the kernel gives each
 * buffer the write waits for a whole timeout, so a reader that frees room
 * within each holds the call for ever (a 1 s timeout ran 25 s); TCP's
 * timeout is the call's. So the write is made in non-blocking steps, with
 * poll's waits for room until the call's deadline: then what went, or
 * EAGAIN. A signal ends a wait (EINTR, or what went), as the kernel ends
 * a wait under a timeout whatever SA_RESTART says. Once bytes went, a
 * step carries MSG_NOSIGNAL and an error returns the count (the socket
 * says it again to the next call), as TCP's. The flag that brought the
 * call here is the descriptor's; the kernel's state, which a dup or
 * another process may have changed, decides at the first wait: a file
 * made non-blocking says EAGAIN, a timeout cleared (or negative, which
 * reads as none) leaves the rest to the kernel's own blocking send. At
 * most MAX_RW bytes, as the kernel's write; a length it refuses, and one
 * of 0, are its answer. */
static ssize_t send_timed(int fd, const struct iovec *iov, size_t n, int flags)
{
	size_t i = 0, off = 0, total = 0, goal = 0;
	uint64_t end = 0;
	int e0 = errno, nb = MSG_DONTWAIT;

	for (size_t k = 0; k < n && goal != SIZE_MAX; k++)
		goal = iov[k].iov_len > (size_t)SSIZE_MAX - goal ? SIZE_MAX : goal + iov[k].iov_len;
	if (!goal || goal == SIZE_MAX) /* (past SSIZE_MAX: the kernel refuses it) */
		return REAL(sendmsg)(fd, &(struct msghdr){ .msg_iov = (struct iovec *)iov, .msg_iovlen = n }, flags);
	if (goal > MAX_RW)
		goal = MAX_RW;
	while (total < goal) {
		/* The pieces from i (off into it) that end by goal; one cut short */
		size_t want = goal - total, j = i, sum = iov[i].iov_len - off;
		struct iovec one = { (char *)iov[i].iov_base + off, sum < want ? sum : want };
		struct msghdr m = { .msg_iov = &one, .msg_iovlen = 1 };
		if (!off && sum < want) {
			while (j + 1 < n && sum + iov[j + 1].iov_len <= want)
				sum += iov[++j].iov_len;
			m = (struct msghdr){ .msg_iov = (struct iovec *)iov + i, .msg_iovlen = j - i + 1 };
		}
		ssize_t r = REAL(sendmsg)(fd, &m, flags | nb | (total ? MSG_NOSIGNAL : 0));
		if (r > 0) {
			total += (size_t)r;
			for (off += (size_t)r; i < n && off >= iov[i].iov_len; i++)
				off -= iov[i].iov_len;
			continue;
		}
		if (r < 0 && errno == EAGAIN && nb && !end && !lf__sys_file_nonblocking(fd)) {
			end = lf__sys_timeout_end(fd, SO_SNDTIMEO);
			nb = end ? nb : 0; /* no timeout now: the kernel's blocking send */
			continue;
		}
		if (r < 0 && errno == EAGAIN && end) {
			int p = lf__sys_poll1(fd, POLLOUT, lf__sys_ms_until(end));
			if (p > 0 || (p == 0 && lf__sys_now_ns() < end))
				continue;
			if (p == 0)
				errno = EAGAIN; /* the timeout */
		}
		if (r == 0 || total)
			break;
		return -1;
	}
	errno = e0;
	return (ssize_t)total;
}

/* A blocking write on a fast-path socket with a send timeout. */
#define TIMED_WRITE(fd, iovp, niov, msgflags)                                                          \
	do {                                                                                           \
		struct lf_fd *f_ = lf__fd_peek(fd);                                                    \
		unsigned fl_ = f_ ? atomic_load_explicit(&f_->flags, memory_order_relaxed) : 0;        \
		if ((fl_ & (LF_F_FAST | LF_F_SNDTIMEO | LF_F_NONBLOCK)) == (LF_F_FAST | LF_F_SNDTIMEO) && \
		    !((msgflags) & MSG_DONTWAIT))                                                      \
			return send_timed(fd, iovp, (size_t)(niov), msgflags);                         \
	} while (0)

/* Nothing for loopfast to do on fd: no connect pending, no bell, no error
 * kept, and for a read no SHUT_RD and no spin. The common case of the data
 * path, decided from one entry without a call, so that read, recv, write
 * and send are a jump to libc's for it (redis makes three such calls a
 * request on each end). */
static inline bool plain_io(int fd, bool reading)
{
	const struct lf_fd *f = lf__fd_peek(fd);

	if (!f)
		return true;
	unsigned fl = atomic_load_explicit(&f->flags, memory_order_relaxed);
	return !(fl & (LF_F_PENDING | LF_F_UNCONFIRMED | LF_F_SHM | (reading ? LF_F_SHUT_RD : LF_F_SNDTIMEO))) &&
	       !__atomic_load_n(&f->pend_err, __ATOMIC_ACQUIRE) &&
	       !(reading && f->spin_us && (fl & LF_F_FAST));
}

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

static ssize_t recvmsg_tcp(int fd, struct msghdr *m, int flags)
{
	ssize_t r;

	/* The caller's msghdr itself: msg_flags (MSG_OOB, MSG_TRUNC) are the tier's answer. */
	if (m && lf__shm_on(fd) && lf__shm_recv(fd, m, flags, &r))
		return r;
	if (lf__fd_shut_rd(fd))
		return shut_rd_recvmsg(fd, m, flags);
	if (lf__may_spin(fd) && lf__spin_recvmsg(fd, m, flags, &r) == LF_SPIN_DONE)
		return r;
	return REAL(recvmsg)(fd, m, flags);
}

/* MSG_TRUNC on a stream: TCP discards the bytes it would have copied (the
 * buffer may be NULL) and returns their count; a Unix stream copies them
 * (EFAULT for NULL). So a fast-path socket's are read into scratch: one
 * recvmsg whose pieces all name it (64 of 64 KiB, 4 MiB), so that the
 * kernel applies MSG_WAITALL, MSG_PEEK, the timeout and signals to the
 * call as to TCP's; past 4 MiB, more such reads, each of what has come
 * (a peek, or MSG_WAITALL's timeout and signals, then apply per 4 MiB).
 * The kernel's own checks of the iovec first. The tier discards its own
 * (shm_io.c). One buffer for every thread: nothing is read back from it. */
#define DISCARD_PIECES 64
static ssize_t discard(int fd, struct msghdr *m, int flags)
{
	struct iovec v[DISCARD_PIECES];
	size_t n = 0, total = 0;
	int e0 = errno;

	if (m->msg_iovlen > UIO_MAXIOV) {
		errno = EMSGSIZE;
		return -1;
	}
	for (size_t i = 0; i < m->msg_iovlen; i++) {
		if (m->msg_iov[i].iov_len > (size_t)SSIZE_MAX - n) {
			errno = EINVAL;
			return -1;
		}
		n += m->msg_iov[i].iov_len;
	}
	m->msg_flags = 0;
	if (!n) /* as the Unix socket answers a read of nothing */
		return recvmsg_tcp(fd, m, flags & ~MSG_TRUNC);
	do {
		size_t k, want = lf__scratch_iov(v, DISCARD_PIECES, n - total, &k);
		struct msghdr one = { .msg_iov = v, .msg_iovlen = k };
		ssize_t r = recvmsg_tcp(fd, &one, (flags & ~MSG_TRUNC) | (total && !(flags & MSG_WAITALL) ? MSG_DONTWAIT : 0));
		m->msg_flags |= one.msg_flags;
		if (r < 0 && total) {
			if (errno != EAGAIN && errno != EINTR) /* the next call's answer, as TCP keeps it */
				__atomic_store_n(&lf__fd(fd)->pend_err, errno, __ATOMIC_RELEASE);
			errno = e0;
		}
		if (r <= 0)
			return total ? (ssize_t)total : r;
		total += (size_t)r;
		if ((size_t)r < want || (flags & MSG_PEEK))
			break;
	} while (total < n);
	return (ssize_t)total;
}

/* A recv of 0 bytes on a fast-path socket, as TCP's (whose low-water
 * mark is at least 1): 0 at once when anything is queued, at the end or
 * after SHUT_RD; a pending error; EAGAIN when non-blocking; else one
 * wait, and 0 whatever ends it (bytes, the timeout, a signal, SA_RESTART
 * or not), where the Unix socket's says EAGAIN, EINTR or restarts. (read
 * and readv of nothing are the VFS's 0; the tier's: shm_io.c.) */
static ssize_t recv_zero(int fd, int flags)
{
	char b;
	int e0 = errno;

	if (REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 || lf__fd_shut_rd(fd))
		goto none;
	if (errno != EAGAIN || (flags & MSG_DONTWAIT) || lf__sys_file_nonblocking(fd))
		return -1;
	uint64_t end = lf__sys_timeout_end(fd, SO_RCVTIMEO);
	lf__sys_poll1(fd, POLLIN, end ? lf__sys_ms_until(end) : -1);
none:
	errno = e0;
	return 0;
}

static bool iov_empty(const struct msghdr *m)
{
	size_t i = 0;

	if (m->msg_iovlen > UIO_MAXIOV) /* the kernel's EMSGSIZE */
		return false;
	while (i < m->msg_iovlen && m->msg_iov && !m->msg_iov[i].iov_len)
		i++;
	return i == m->msg_iovlen;
}

/* What TCP's recvmsg never gives on a connected socket: a source address,
 * or ancillary data that a Unix socket could carry (descriptors a peer
 * sent: on kernels without SO_PASSRIGHTS they would arrive). The read
 * asks for none, so the kernel drops any descriptors without installing
 * them, and answers as TCP: no name, no control, nothing truncated. */
LF_EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	struct lf_fd *f = lf__fd(fd);

	SETTLE(fd, flags);
	if (!m || !f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST)) {
		if (m && m->msg_control && m->msg_controllen) /* a tier socket may come with its rings (shm_pass.c) */
			return lf__shm_pass_recvmsg(fd, m, flags);
		return recvmsg_tcp(fd, m, flags);
	}
	struct msghdr copy = *m;
	copy.msg_control = NULL;
	copy.msg_controllen = 0;
	ssize_t r;
	if (!lf__shm_on(fd) && !(flags & (MSG_OOB | MSG_ERRQUEUE)) && iov_empty(&copy)) {
		copy.msg_flags = 0;
		r = recv_zero(fd, flags);
	} else {
		r = (flags & MSG_TRUNC) && !lf__shm_on(fd) ? discard(fd, &copy, flags) : recvmsg_tcp(fd, &copy, flags);
	}
	if (r >= 0) {
		m->msg_namelen = 0;
		m->msg_controllen = 0;
		m->msg_flags = copy.msg_flags & ~MSG_CTRUNC;
	}
	return r;
}
LF_LOCAL(recvmsg);

LF_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl)
{
	struct iovec one = { buf, n < MAX_RW ? n : MAX_RW };

	SETTLE(fd, flags);
	if (!sa)
		SHM_READ(fd, &one, 1, flags); /* as recvmsg's would: no name, no control */
	if (!lf__may_spin(fd) && !sa && !lf__fd_shut_rd(fd) && !lf__shm_on(fd) && !(flags & MSG_TRUNC) && n)
		return REAL(recvfrom)(fd, buf, n, flags, sa, sl);
	struct msghdr m = { .msg_name = sa, .msg_namelen = sl ? *sl : 0, .msg_iov = &one, .msg_iovlen = 1 };
	ssize_t r = local_recvmsg(fd, &m, flags);
	if (r >= 0 && sa && sl)
		*sl = m.msg_namelen;
	return r;
}
LF_LOCAL(recvfrom);

static __attribute__((noinline)) ssize_t recv_io(int fd, void *buf, size_t n, int flags)
{
	struct iovec one = { buf, n < MAX_RW ? n : MAX_RW };

	SETTLE(fd, flags);
	SHM_READ(fd, &one, 1, flags); /* as recvmsg's would: no name, no control */
	if (!lf__may_spin(fd) && !lf__fd_shut_rd(fd) && !lf__shm_on(fd) && !(flags & MSG_TRUNC) && n)
		return REAL(recv)(fd, buf, n, flags);
	return local_recvfrom(fd, buf, n, flags, NULL, NULL);
}

LF_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	if (plain_io(fd, true) && !(flags & MSG_TRUNC) && n) /* MSG_TRUNC: discard; 0 bytes: recv_zero */
		return REAL(recv)(fd, buf, n, flags);
	return recv_io(fd, buf, n, flags);
}
LF_LOCAL(recv);

static __attribute__((noinline)) ssize_t read_io(int fd, void *buf, size_t n)
{
	ssize_t r;
	struct iovec one = { buf, n };

	if (!n) /* the VFS answers 0 before the socket sees it (recv of 0 waits for a byte) */
		return REAL(read)(fd, buf, n);
	SETTLE(fd, 0);
	SHM_READ(fd, &one, 1, 0);
	if (lf__fd_shut_rd(fd)) {
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

LF_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	if (plain_io(fd, true))
		return REAL(read)(fd, buf, n);
	return read_io(fd, buf, n);
}
LF_LOCAL(read);

LF_EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
	ssize_t r;
	int i = 0;

	while (i >= 0 && i < n && i <= UIO_MAXIOV && iov && !iov[i].iov_len)
		i++;
	if (i == n) /* nothing to read: as read's 0 (and the kernel's EINVAL, EFAULT) */
		return REAL(readv)(fd, iov, n);
	SETTLE(fd, 0);
	if (n >= 0)
		SHM_READ(fd, iov, n, 0);
	if (n > UIO_MAXIOV) /* the kernel's EINVAL (recvmsg's below would say EMSGSIZE) */
		return REAL(readv)(fd, iov, n);
	if (lf__fd_shut_rd(fd) && n >= 0) {
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

/* _FORTIFY_SOURCE's checked reads (Debian builds with it): the same reads. */
extern void __chk_fail(void) __attribute__((noreturn));
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa, socklen_t *sl);

LF_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return local_read(fd, buf, n);
}

LF_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return local_recv(fd, buf, n, flags);
}

LF_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa,
				 socklen_t *sl)
{
	if (n > buflen)
		__chk_fail();
	return local_recvfrom(fd, buf, n, flags, sa, sl);
}

/* A connected TCP socket ignores the destination of sendto/sendmsg; a
 * connected Unix stream refuses it (EISCONN). */
LF_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl)
{
	struct lf_fd *f = lf__fd(fd);

	SETTLE_WRITE(fd, flags);
	struct iovec one = { (void *)buf, n < MAX_RW ? n : MAX_RW };
	SHM_WRITE(fd, &one, 1, flags);
	TIMED_WRITE(fd, &one, 1, flags);
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
	if (!m || !f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST)) {
		if (m && m->msg_controllen && lf__shm_used) /* a tier socket goes with its rings, or not at all (shm_pass.c) */
			return lf__shm_pass_sendmsg(fd, m, flags);
		return REAL(sendmsg)(fd, m, flags);
	}
	/* No destination (TCP ignores it; a connected Unix socket refuses
	 * it), and no ancillary data: what TCP takes there (SO_MARK,
	 * SO_PRIORITY, timestamping requests) has nothing to act on, and what
	 * a Unix socket would carry (descriptors, credentials) TCP ignores. */
	struct msghdr copy = *m;
	copy.msg_name = NULL;
	copy.msg_namelen = 0;
	copy.msg_control = NULL;
	copy.msg_controllen = 0;
	SHM_WRITE(fd, copy.msg_iov, copy.msg_iovlen, flags);
	if (copy.msg_iovlen <= UIO_MAXIOV)
		TIMED_WRITE(fd, copy.msg_iov, copy.msg_iovlen, flags);
	return REAL(sendmsg)(fd, &copy, flags);
}
LF_LOCAL(sendmsg);

/* recvmmsg and sendmmsg on a fast-path socket: one recvmsg or sendmsg
 * above per message, as the kernel loops over its own (net/socket.c), so
 * that each answers as TCP's (no source address, no ancillary data, no
 * destination refused). The kernel's rules: a socket error pending is
 * reported first; EOF counts as a message of 0 bytes; MSG_WAITFORONE
 * stops waiting after the first; the timeout is looked at after each
 * message and gets what is left; an error after some messages is kept for
 * the next call (the socket's error), except EAGAIN; at most UIO_MAXIOV
 * messages. A send stops at the first message sent in part. */
static bool mmsg_ours(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	return f && ((atomic_load_explicit(&f->flags, memory_order_relaxed) & (LF_F_FAST | LF_F_PENDING | LF_F_UNCONFIRMED)) ||
		     f->pend_err);
}

#define MMSG_MAX 1024 /* UIO_MAXIOV */

/* A message of v with a control buffer, on a Unix socket loopfast does
 * not handle: a tier socket may come with its rings (shm_pass.c). The
 * domain is asked once and a Unix socket's remembered in its entry until
 * the descriptor is closed (the call costs about what the receive does
 * for a short message). An entry that outlived its socket (a close past
 * the interposer) costs only the widening, which recvmsg does for any
 * socket; a socket of another family is asked each time, as an answer
 * remembered wrongly would let a tier socket arrive without its rings. */
static bool mmsg_control(int fd, const struct mmsghdr *v, unsigned n)
{
	struct lf_fd *f = lf__fd(fd);
	int dom = 0;
	socklen_t l = sizeof(dom);
	unsigned i = 0;

	while (v && i < n && !(v[i].msg_hdr.msg_control && v[i].msg_hdr.msg_controllen))
		i++;
	if (i == n)
		return false;
	if (f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_UNIX))
		return true;
	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) || dom != AF_UNIX)
		return false;
	if (f)
		atomic_fetch_or(&f->flags, LF_F_UNIX);
	return true;
}

LF_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *ts)
{
	if (!mmsg_ours(fd)) {
		if (n <= MMSG_MAX && mmsg_control(fd, v, n))
			return lf__shm_pass_recvmmsg(fd, v, n, flags, ts);
		return REAL(recvmmsg)(fd, v, n, flags, ts);
	}
	uint64_t end = 0;
	if (ts) {
		if (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000) {
			errno = EINVAL;
			return -1;
		}
		end = lf__sys_now_ns() + (uint64_t)ts->tv_sec * 1000000000 + (uint64_t)ts->tv_nsec;
	}
	int e0 = errno, err = 0;
	struct lf_fd *f = lf__fd(fd);
	if (!(flags & MSG_ERRQUEUE) && (err = lf__err_take(fd))) {
		errno = err;
		return -1;
	}
	unsigned k = 0;
	if (n > MMSG_MAX)
		n = MMSG_MAX;
	while (k < n) {
		ssize_t r = local_recvmsg(fd, &v[k].msg_hdr, flags & ~MSG_WAITFORONE);
		if (r < 0) {
			err = errno;
			break;
		}
		v[k++].msg_len = (unsigned)r;
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
		if (ts) {
			uint64_t now = lf__sys_now_ns();
			uint64_t left = now < end ? end - now : 0;
			ts->tv_sec = (time_t)(left / 1000000000);
			ts->tv_nsec = (long)(left % 1000000000);
			if (!left)
				break;
		}
		if (v[k - 1].msg_hdr.msg_flags & MSG_OOB)
			break;
	}
	if (!k && err) {
		errno = err;
		return -1;
	}
	if (err && err != EAGAIN)
		__atomic_store_n(&f->pend_err, err, __ATOMIC_RELEASE);
	errno = e0;
	return (int)k;
}

LF_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	if (n > MMSG_MAX)
		n = MMSG_MAX;
	/* A message that passes a tier socket goes through sendmsg (which
	 * adds its rings, or refuses it), one message at a time as the
	 * kernel loops: those before a message that fails are sent and
	 * counted. */
	bool rights = false;
	for (unsigned i = 0; lf__shm_used && v && i < n && !rights; i++) /* (NULL: the kernel's EFAULT) */
		rights = v[i].msg_hdr.msg_controllen && lf__shm_in_rights(&v[i].msg_hdr);
	if (!rights && !mmsg_ours(fd))
		return REAL(sendmmsg)(fd, v, n, flags);
	int e0 = errno, err = 0;
	unsigned k = 0;
	while (k < n) {
		ssize_t r = local_sendmsg(fd, &v[k].msg_hdr, flags);
		if (r < 0) {
			err = errno;
			break;
		}
		v[k].msg_len = (unsigned)r;
		size_t want = 0;
		for (size_t i = 0; i < v[k].msg_hdr.msg_iovlen; i++)
			want += v[k].msg_hdr.msg_iov[i].iov_len;
		k++;
		if ((size_t)r < want)
			break;
	}
	if (!k && err) {
		errno = err;
		return -1;
	}
	errno = e0;
	return (int)k;
}

/* The plain writes are interposed only for a connect still pending on
 * the fd, the tier, or a send timeout (one array lookup otherwise). */
static __attribute__((noinline)) ssize_t write_io(int fd, const void *buf, size_t n)
{
	struct iovec one = { (void *)buf, n };

	SETTLE_WRITE(fd, 0);
	SHM_WRITE(fd, &one, 1, 0);
	TIMED_WRITE(fd, &one, 1, 0);
	return REAL(write)(fd, buf, n);
}

LF_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	if (plain_io(fd, false))
		return REAL(write)(fd, buf, n);
	return write_io(fd, buf, n);
}

LF_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
	SETTLE_WRITE(fd, 0);
	if (n >= 0)
		SHM_WRITE(fd, iov, n, 0);
	if (n >= 0 && n <= UIO_MAXIOV) /* (past it: the kernel's EINVAL, sendmsg's would be EMSGSIZE) */
		TIMED_WRITE(fd, iov, n, 0);
	return REAL(writev)(fd, iov, n);
}

static __attribute__((noinline)) ssize_t send_io(int fd, const void *buf, size_t n, int flags)
{
	struct iovec one = { (void *)buf, n < MAX_RW ? n : MAX_RW };

	SETTLE_WRITE(fd, flags);
	SHM_WRITE(fd, &one, 1, flags);
	TIMED_WRITE(fd, &one, 1, flags);
	return REAL(send)(fd, buf, n, flags);
}

LF_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	if (plain_io(fd, false))
		return REAL(send)(fd, buf, n, flags);
	return send_io(fd, buf, n, flags);
}

/* dprintf writes through glibc's own write, past the interposer: on a tier
 * socket the formatted bytes go through write() here instead, as glibc's
 * would go (a short write goes on; an error ends the call with -1). A flag
 * of 0 is the unchecked call (glibc's own dprintf and vdprintf). */
int __vasprintf_chk(char **s, int flag, const char *fmt, va_list ap);
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);
int __dprintf_chk(int fd, int flag, const char *fmt, ...);

LF_EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
	static int (*next)(int, int, const char *, va_list);
	char *s;

	if (!lf__shm_used || !lf__shm_on(fd)) {
		if (!next)
			next = (int (*)(int, int, const char *, va_list))dlsym(RTLD_NEXT, "__vdprintf_chk");
		return next(fd, flag, fmt, ap);
	}
	int n = __vasprintf_chk(&s, flag, fmt, ap);
	if (n < 0)
		return n;
	for (size_t off = 0; off < (size_t)n;) {
		ssize_t w = write(fd, s + off, (size_t)n - off);
		if (w < 0) {
			n = -1;
			break;
		}
		off += (size_t)w;
	}
	free(s);
	return n;
}

LF_EXPORT int vdprintf(int fd, const char *fmt, va_list ap)
{
	return __vdprintf_chk(fd, 0, fmt, ap);
}

LF_EXPORT int dprintf(int fd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = __vdprintf_chk(fd, 0, fmt, ap);
	va_end(ap);
	return n;
}

LF_EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = __vdprintf_chk(fd, flag, fmt, ap);
	va_end(ap);
	return n;
}
