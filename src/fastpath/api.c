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

/* Whether a TCP socket's path is chosen already (-1: not a TCP socket):
 * connected, or a connect in progress (SYN_SENT: getpeername still says
 * ENOTCONN, and an opt-in now would answer success for nothing). A
 * listener is not. */
static bool decided(const int *st)
{
	return *st < 0 || (*st != TCP_CLOSE && *st != TCP_LISTEN);
}

static bool chosen(int fd, int *st)
{
	*st = tcp_state(fd);
	return decided(st);
}

/* lf_enable_fast_path's check: 0 a TCP socket (its state in *st), 1 a
 * fast-path socket, or -errno, as classify() and chosen() say. Two
 * system calls on a TCP socket where those take three: TCP_INFO answers a
 * state only on TCP, MPTCP and SMC sockets, and SO_PROTOCOL tells TCP's apart
 * (MPTCP's is IPPROTO_MPTCP, SMC's 0, 1 or IPPROTO_SMC), so the two prove
 * an AF_INET or AF_INET6 TCP socket; its family is read at connect, from
 * the getsockname it makes anyway. Anything else takes classify()'s way,
 * except a socket classify() takes for TCP that has no TCP_INFO: a raw
 * socket of protocol IPPROTO_TCP, which chosen() would call connected. */
static int optin_classify(int fd, int *st)
{
	int v = 0, family;
	socklen_t l = sizeof(v);

	*st = tcp_state(fd);
	if (*st >= 0 && lf__sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) == 0 && v == IPPROTO_TCP)
		return 0;
	int r = classify(fd, &family);
	return r == 0 ? -EOPNOTSUPP : r; /* 0: SO_PROTOCOL 6 without TCP_INFO, a raw IPPROTO_TCP socket */
}

/* The fast path's own check, three system calls on a TCP socket (its
 * domain, its protocol, its state). */
LF_EXPORT int lf_enable_fast_path(int fd)
{
	int st, r = optin_classify(fd, &st);
	struct lf_fd *f = lf__fd(fd);

	if (r < 0)
		return r;
	if (r == 1 || decided(&st))
		return -EISCONN;
	if (!f || (atomic_load(&f->flags) & LF_F_PINNED))
		return -EOPNOTSUPP; /* an option set on it cannot be kept on the fast path (sockopt.c) */
	if (st == TCP_LISTEN) {
		atomic_fetch_and(&f->flags, ~LF_F_NOFAST);
		r = lf__listen_optin(fd);
		return r == -EADDRINUSE ? 0 : r; /* another listener owns the rendezvous: plain TCP */
	}
	atomic_fetch_and(&f->flags, ~LF_F_NOFAST); /* an opt-out before (SOL_LOOPFAST 0), undone: listen looks */
	atomic_fetch_or(&f->flags, LF_F_OPTIN | LF_F_TCP);
	lf__signals_wrap(); /* a wait of loopfast's own must see the application's handlers */
	return 0;
}
LF_LOCAL(lf_enable_fast_path);

LF_EXPORT int lf_fast_path_active(int fd)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	int family, r = classify(fd, &family);

	if (r != 0)
		return r;
	return lf__sys_getpeername(fd, (void *)&ss, &l) == 0 ? 0 : -ENOTCONN;
}
LF_LOCAL(lf_fast_path_active);

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
		lf__signals_wrap();
	return 0;
}
LF_LOCAL(lf_set_spin);

LF_EXPORT int lf_set_tier(int fd, int tier)
{
	int family, r = classify(fd, &family), st;

	if (r < 0)
		return r;
	if (r == 1 || chosen(fd, &st))
		return -EISCONN;
	return lf__shm_set_tier(fd, tier);
}
LF_LOCAL(lf_set_tier);

/* The fast path as a socket option (loopfast.h: SOL_LOOPFAST): one int,
 * the C calls' rules and errors. 0 or -errno. */
static int opt_int(const void *val, socklen_t len, int *v)
{
	if (len < sizeof(int))
		return -EINVAL;
	if (!val)
		return -EFAULT;
	memcpy(v, val, sizeof(int));
	return 0;
}

/* Opting out is for a socket whose path is not chosen yet: it is kept off
 * the fast path whatever the process mode (whole-process opt-in, a
 * listener's opt-in at its first accept). */
static int opt_out(int fd)
{
	int family, r = classify(fd, &family), st;
	struct lf_fd *f = lf__fd(fd);

	if (r < 0)
		return r;
	if (r == 1 || chosen(fd, &st) || (f && f->lst))
		return -EISCONN;
	if (f) {
		atomic_fetch_and(&f->flags, ~LF_F_OPTIN);
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
	}
	return 0;
}

int lf__api_setopt(int fd, int opt, const void *val, socklen_t len)
{
	int v, r = opt_int(val, len, &v);

	if (r < 0)
		return r;
	if (opt == LOOPFAST_FAST_PATH)
		return v ? local_lf_enable_fast_path(fd) : opt_out(fd);
	if (opt == LOOPFAST_SPIN)
		return v < 0 || v > 1000000 ? -EINVAL : local_lf_set_spin(fd, (unsigned)v);
	if (opt == LOOPFAST_TIER)
		return local_lf_set_tier(fd, v);
	return -ENOPROTOOPT;
}

/* getsockopt answers 1 or 0: connected, whether on the fast path;
 * listening, whether it serves it (has its rendezvous); otherwise,
 * whether it is opted in. */
int lf__api_getopt(int fd, int opt, void *val, socklen_t *len)
{
	struct lf_fd *f = lf__fd(fd);
	int v = 0, family, r;

	if (!len)
		return -EFAULT;
	if ((int)*len < (int)sizeof(int))
		return -EINVAL;
	if (!val)
		return -EFAULT;
	if (opt != LOOPFAST_FAST_PATH && opt != LOOPFAST_SPIN && opt != LOOPFAST_TIER)
		return -ENOPROTOOPT;
	if ((r = classify(fd, &family)) < 0)
		return r;
	if (opt == LOOPFAST_TIER) {
		int st;
		if (r == 0 && chosen(fd, &st) && !(f && (atomic_load(&f->flags) & LF_F_PENDING)))
			v = LF_TIER_UDS; /* plain TCP: no rings, whatever it asked */
		else if ((v = lf__shm_get_tier(fd)) < 0)
			return v;
	} else if (opt == LOOPFAST_SPIN) {
		v = f ? (int)f->spin_us : 0;
	} else if ((r = local_lf_fast_path_active(fd)) >= 0) {
		v = r;
	} else if (r != -ENOTCONN) {
		return r;
	} else if (f) {
		socklen_t l = sizeof(v);
		if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) == 0 && v)
			v = f->lst != NULL;
		else
			v = (atomic_load(&f->flags) & (LF_F_OPTIN | LF_F_PENDING)) != 0;
	}
	memcpy(val, &v, sizeof(v));
	*len = sizeof(v);
	return 0;
}

LF_EXPORT const char *lf_strerror(int err)
{
	return strerror(err < 0 ? -err : err);
}
