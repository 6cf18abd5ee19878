/* The public C API (include/loopfast.h). */
#include "internal.h"
#include "loopfast.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <string.h>

/* Classifies fd: 1 fast-path socket, 0 TCP socket (family in *family),
 * or -errno. */
static int classify(int fd, int *family)
{
	struct lf_ep a, b;
	int v = 0;
	socklen_t l = sizeof(v);

	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0)
		return -errno;
	if (v == AF_UNIX && lf__fast_endpoints(fd, family, &a, &b))
		return 1;
	*family = v;
	l = sizeof(v);
	if ((*family != AF_INET && *family != AF_INET6) ||
	    lf__sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return -EOPNOTSUPP;
	return 0;
}

/* A TCP socket's state from the kernel (TCP_INFO's first byte), or -1
 * for anything else (a Unix socket answers EOPNOTSUPP). One system call
 * where asking "connected? listening?" took two. */
static int tcp_state(int fd)
{
	uint8_t st;
	socklen_t l = sizeof(st);

	return lf__sys_getsockopt(fd, IPPROTO_TCP, TCP_INFO, &st, &l) || l != sizeof(st) ? -1 : st;
}

/* The fast path's own check, three system calls on a TCP socket (its
 * domain, its protocol, its state): a socket that is not connecting or
 * connected is opted in (TCP_CLOSE: new, or its connect failed; TCP's
 * getpeername says ENOTCONN in exactly those states and SYN_SENT). */
LF_EXPORT int lf_enable_fast_path(int fd)
{
	int family, r = classify(fd, &family), st;
	struct lf_fd *f = lf__fd(fd);

	if (r < 0)
		return r;
	if (r == 1 || (st = tcp_state(fd)) < 0 || (st != TCP_CLOSE && st != TCP_SYN_SENT && st != TCP_LISTEN))
		return -EISCONN;
	if (!f)
		return -EOPNOTSUPP;
	if (st == TCP_LISTEN) {
		atomic_fetch_and(&f->flags, ~LF_F_NOFAST);
		r = lf__listen_optin(fd);
		return r == -EADDRINUSE ? 0 : r; /* another listener owns the rendezvous: plain TCP */
	}
	f->family = family;
	atomic_fetch_or(&f->flags, LF_F_OPTIN | LF_F_TCP);
	lf__spin_used = true; /* handlers installed from now on are wrapped (signals.c) */
	return 0;
}

LF_EXPORT int lf_fast_path_active(int fd)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	int family, r = classify(fd, &family);

	if (r != 0)
		return r;
	return lf__sys_getpeername(fd, (void *)&ss, &l) == 0 ? 0 : -ENOTCONN;
}

LF_EXPORT int lf_set_spin(int fd, unsigned usec)
{
	int family, r = classify(fd, &family);
	struct lf_fd *f = lf__fd(fd);

	if (r < 0)
		return r;
	if (!f)
		return -EOPNOTSUPP;
	f->spin_us = usec;
	f->spin_fail = f->spin_skip = 0;
	if (usec)
		lf__spin_used = true;
	return 0;
}

LF_EXPORT const char *lf_strerror(int err)
{
	return strerror(err < 0 ? -err : err);
}
