/* sendfile and splice on a socket of the shared-memory tier (docs/shm.md,
 * "sendfile and splice"). The kernel's would move bytes on the Unix
 * socket, past the rings: the reader would take them for tokens (a reset),
 * or a splice from the socket would read tokens as data. On a tier socket
 * they become a read from the file or pipe and a write through the tier
 * (or the other way round), with TCP's answers:
 *
 * - sendfile: pread at the offset (*off, or the file's own, which then
 *   moves by what was sent, as the kernel's does); a blocking socket sends
 *   all of count or to the end of the file (short only for a signal or
 *   SO_SNDTIMEO), a non-blocking one what the ring takes (EAGAIN for
 *   none). Nothing is read from the file that is not sent.
 * - splice socket -> pipe: reads at most what the pipe has room for, then
 *   puts all of it in the pipe. splice pipe -> socket: takes from the pipe
 *   at most what the ring has room for (non-blocking socket), then writes
 *   all of it. The socket's own O_NONBLOCK decides the socket's wait; the
 *   pipe's waits are non-blocking with SPLICE_F_NONBLOCK or either end's
 *   O_NONBLOCK, as in the kernel (do_splice).
 *
 * Everything else passes to libc's: calls on other descriptors, and those
 * the kernel refuses before it moves a byte (a length of 0, an offset on
 * the socket, no pipe at either end). tee and copy_file_range need
 * nothing: neither takes a socket (EINVAL, over TCP too). A file that
 * cannot seek (a pipe) as sendfile's source: EINVAL, as the kernel says. */
#include "internal.h"
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536

/* Writes through the tier, or on the stream once the connection is no
 * longer on it (lf__shm_send declines: the kernel's socket answers). */
static ssize_t put(int fd, const char *buf, size_t n, int flags)
{
	struct iovec v = { (void *)buf, n };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
	ssize_t r;

	if (lf__shm_send(fd, &m, flags, &r))
		return r;
	return lf__sys_sendmsg(fd, &m, flags);
}

static ssize_t get(int fd, char *buf, size_t n, int flags)
{
	struct iovec v = { buf, n };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
	ssize_t r;

	if (lf__shm_recv(fd, &m, flags, &r))
		return r;
	return lf__sys_recvmsg(fd, &m, flags);
}

/* Bytes already taken from their source must all reach their sink: a
 * wait that a race made necessary (the room was measured first) goes on
 * through signals and EAGAIN. 0, or -1 and errno of the sink's end. */
static int drain_into(int fd, const char *buf, size_t n, bool sock, int flags)
{
	struct timespec ms = { 0, 1000000 };

	while (n) {
		ssize_t w = sock ? put(fd, buf, n, flags) : lf__sys_write(fd, buf, n);
		if (w > 0) {
			buf += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EAGAIN) {
			if (sock)
				nanosleep(&ms, NULL); /* a full ring has no kernel event */
			else
				lf__sys_poll1(fd, POLLOUT, -1);
		} else if (w < 0 && errno != EINTR) {
			return -1;
		}
	}
	return 0;
}

LF_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	if (!lf__shm_on(out) || !count)
		return REAL(sendfile)(out, in, off, count);
	int e0 = errno;
	off_t pos = off ? *off : lseek(in, 0, SEEK_CUR);
	if (pos < 0) {
		errno = off || errno == ESPIPE ? EINVAL : errno;
		return -1;
	}
	char *buf = malloc(count < CHUNK ? count : CHUNK);
	size_t total = 0;
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	while (total < count) {
		size_t want = count - total < CHUNK ? count - total : CHUNK;
		ssize_t n = pread(in, buf, want, pos + (off_t)total), w = n > 0 ? put(out, buf, (size_t)n, 0) : 0;
		if ((n < 0 || w < 0) && !total) {
			free(buf);
			return -1;
		}
		if (n <= 0 || w < 0)
			break; /* the end of the file, or an error after some bytes went: their count */
		total += (size_t)w;
		if (w < n)
			break; /* the ring took what it had room for, or a signal came */
	}
	free(buf);
	if (off)
		*off = pos + (off_t)total;
	else
		lseek(in, pos + (off_t)total, SEEK_SET);
	errno = e0;
	return (ssize_t)total;
}
LF_LOCAL(sendfile);

LF_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
	return local_sendfile(out, in, off, count);
}

static bool is_pipe(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* Waits until the pipe p can be read (POLLIN) or written (POLLOUT):
 * 0, or -1 and EAGAIN (non-blocking) or EINTR. */
static int pipe_wait(int p, short ev, bool nb)
{
	int r = lf__sys_poll1(p, ev, nb ? 0 : -1);

	if (r == 0)
		errno = EAGAIN;
	return r > 0 ? 0 : -1;
}

/* The socket's bytes into the pipe, taken only once the pipe has them: a
 * page at a time (a pipe that polls writable has a free slot, which takes
 * a write of PIPE_BUF whole, however its other slots are filled), peeked,
 * written, then read off the socket. So a full pipe is EAGAIN or a wait,
 * as the kernel's splice, never bytes taken and then a wait for the pipe
 * (whose reader may be this very thread), and a pipe with no reader gets
 * EPIPE with nothing taken. Two threads reading one socket at once (one of
 * them splicing) are not kept apart. */
static ssize_t sock_to_pipe(int s, int p, size_t len, bool nb)
{
	char buf[PIPE_BUF];
	size_t total = 0;

	while (total < len) {
		if (pipe_wait(p, POLLOUT, nb || total) < 0)
			return total ? (ssize_t)total : -1;
		size_t want = len - total < sizeof(buf) ? len - total : sizeof(buf);
		ssize_t r = get(s, buf, want, MSG_PEEK | (total ? MSG_DONTWAIT : 0));
		if (r <= 0)
			return total ? (ssize_t)total : r;
		ssize_t w = lf__sys_write(p, buf, (size_t)r);
		if (w <= 0)
			return total ? (ssize_t)total : -1;
		for (ssize_t k = 0, g; k < w; k += g) /* the bytes peeked: there */
			if ((g = get(s, buf, (size_t)(w - k), MSG_DONTWAIT)) <= 0)
				return (ssize_t)total + k; /* not the case but for another reader of the socket */
		total += (size_t)w;
	}
	return (ssize_t)total;
}

static ssize_t pipe_to_sock(int p, int s, size_t len, bool nb, int flags)
{
	int inq = 0;

	if (pipe_wait(p, POLLIN, nb) < 0 || lf__sys_ioctl(p, FIONREAD, &inq) < 0)
		return -1;
	if (inq == 0)
		return 0; /* no writer left */
	size_t n = len < (size_t)inq ? len : (size_t)inq;
	if (n > CHUNK)
		n = CHUNK;
	if (atomic_load(&lf__fd(s)->flags) & LF_F_NONBLOCK) { /* take only what the socket takes now */
		long room = lf__shm_room(s);
		if (room < 0 && lf__sys_poll1(s, POLLOUT, 0) <= 0)
			room = 0;
		if (room == 0) {
			errno = EAGAIN;
			return -1;
		}
		if (room > 0 && (size_t)room < n)
			n = (size_t)room;
	}
	char *buf = malloc(n);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	ssize_t r = lf__sys_read(p, buf, n);
	if (r > 0 && drain_into(s, buf, (size_t)r, true, flags) < 0)
		r = -1;
	free(buf);
	return r;
}

LF_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned flags)
{
	bool from = lf__shm_on(in), to = lf__shm_on(out);

	if ((!from && !to) || !len || (from && off_in) || (to && off_out) || (from && to) ||
	    !is_pipe(from ? out : in))
		return REAL(splice)(in, off_in, out, off_out, len, flags);
	int e0 = errno, pfl = lf__sys_fcntl(from ? out : in, F_GETFL, 0);
	bool nb = (flags & SPLICE_F_NONBLOCK) || (pfl >= 0 && (pfl & O_NONBLOCK)) ||
		  (atomic_load(&lf__fd(from ? in : out)->flags) & LF_F_NONBLOCK);
	ssize_t r = from ? sock_to_pipe(in, out, len, nb)
			 : pipe_to_sock(in, out, len, nb, (flags & SPLICE_F_MORE) ? MSG_MORE : 0);
	if (r >= 0)
		errno = e0;
	return r;
}
