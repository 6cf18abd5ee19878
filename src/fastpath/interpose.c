/* The interposed libc functions. They keep libc's contract exactly (-1 and
 * errno; errno untouched on success) and cost one array lookup for sockets
 * loopfast has nothing to do with. The data path (read, write, send, recv,
 * poll, epoll: io.c, wait.c) is interposed too, for what TCP answers
 * differently (a reset before the claim, the bell, spinning), and hands a
 * call with nothing to do straight to libc's; the bytes themselves go
 * through a kernel Unix stream. */
#include "internal.h"
#include "loopfast.h"
#include "syscalls.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <string.h>

#define LF_REAL_STUB(ret, name, params, args)      \
	static ret first_##name params                 \
	{                                              \
		lf__resolve();                         \
		return lf__real_##name args;           \
	}
LF_SYSCALLS(LF_REAL_STUB)
#define LF_REAL_DECL(ret, name, params, args) ret(*lf__real_##name) params = first_##name;
LF_SYSCALLS(LF_REAL_DECL)
int (*lf__real_fcntl)(int, int, ...);
int (*lf__real_ioctl)(int, unsigned long, ...);

/* Resolves the next definition of every interposed function. Called lazily
 * by the first call through each pointer (its stub above), so calls made
 * before our constructor ran (from other libraries' constructors) pass
 * straight through. dlsym does not call any of the functions above, so
 * there is no recursion. */
void lf__resolve(void)
{
#define LF_REAL_RESOLVE(ret, name, params, args) \
	if (lf__real_##name == first_##name)     \
		lf__real_##name = (ret(*) params)dlsym(RTLD_NEXT, #name);
	LF_SYSCALLS(LF_REAL_RESOLVE)
	if (!lf__real_fcntl)
		lf__real_fcntl = (int (*)(int, int, ...))dlsym(RTLD_NEXT, "fcntl");
	if (!lf__real_ioctl)
		lf__real_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
}

LF_EXPORT int socket(int domain, int type, int proto)
{
	int fd = REAL(socket)(domain, type, proto);
	struct lf_fd *f;

	if (fd >= 0 && (f = lf__fd(fd))) {
		lf__fd_reset(fd);
		if ((domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
		    (proto == 0 || proto == IPPROTO_TCP)) {
			f->family = domain;
			atomic_store(&f->flags, LF_F_TCP | (lf__global_optin ? LF_F_OPTIN : 0));
		}
	}
	return fd;
}

LF_EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	int ret, e = errno;

	if (sa && lf__connect(fd, sa, len, &ret)) {
		if (ret == 0)
			errno = e;
		return ret;
	}
	errno = e;
	int r = REAL(connect)(fd, sa, len);
	/* connect again on a fast-path socket: answer as TCP would (0 once
	 * after EINPROGRESS, then EISCONN), not with the Unix EINVAL. */
	struct lf_fd *f;
	struct lf_ep a, b;
	int family;
	if (r < 0 && errno == EINVAL && sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) &&
	    (f = lf__fd(fd)) && lf__fast_endpoints(fd, &family, &a, &b)) {
		if (atomic_fetch_and(&f->flags, ~LF_F_INPROGRESS) & LF_F_INPROGRESS) {
			errno = e;
			return 0;
		}
		errno = EISCONN;
	}
	return r;
}

/* An opted-in socket gets its rendezvous before the kernel's listen when
 * it is bound to its port already (listener.c, lf__listen_early). */
LF_EXPORT int listen(int fd, int backlog)
{
	struct lf_fd *f = lf__fd(fd);
	unsigned fl = f ? atomic_load(&f->flags) : 0;
	bool optin = f && !f->lst && (lf__global_optin || (fl & LF_F_OPTIN));
	bool early = optin && lf__listen_early(fd);
	int r = REAL(listen)(fd, backlog), e = errno;

	if (r && early)
		lf__listen_undo(fd, fl);
	else if (r == 0 && optin && !early)
		lf__listen_optin(fd);
	errno = e;
	return r;
}

/* Copies an address the kernel gave us into the caller's buffer with the
 * kernel's truncation rule: what fits, and the full length. */
static void give_addr(const struct sockaddr_storage *ss, socklen_t n, struct sockaddr *sa, socklen_t *len)
{
	if (!sa || !len)
		return; /* as the kernel: no address wanted, none written */
	memcpy(sa, ss, *len < n ? *len : n);
	*len = n;
}

/* A connection whose hello was lost (see claim.c) is reset and never
 * returned: over TCP it would have been reset before accept too, which
 * accept reports as ECONNABORTED (Linux skips those; so do we, once). The
 * peer's address is asked for in any case: the claim needs it. */
LF_EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int nfd = REAL(accept4)(fd, (struct sockaddr *)&ss, &sl, flags), e = errno;

	for (int tries = 0; nfd >= 0; tries++) {
		if (lf__accept_claim(fd, nfd, flags, (struct sockaddr *)&ss, sl) != -ECONNABORTED)
			break;
		REAL(close)(nfd);
		nfd = -1;
		e = ECONNABORTED;
		if (tries)
			break;
		sl = sizeof(ss);
		nfd = REAL(accept4)(fd, (struct sockaddr *)&ss, &sl, flags);
		e = errno;
	}
	if (nfd >= 0) {
		lf__sopt_accepted(nfd);
		give_addr(&ss, sl, sa, len);
	}
	errno = e;
	return nfd;
}
LF_LOCAL(accept4);

LF_EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return local_accept4(fd, sa, len, 0);
}

/* Closing one of loopfast's own descriptors (a daemon closing "all" fds)
 * would break a listener's fast path; it is reported as done instead. */
LF_EXPORT int close(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_HIDDEN))
		return 0;
	if (lf__fd_foreign(fd))
		return REAL(close)(fd);
	struct lf_shm_conn *c = lf__shm_hold(fd); /* told to the peer after the kernel's close */
	lf__fd_reset(fd);
	int r = REAL(close)(fd);
	lf__shm_closed(c);
	return r;
}
LF_LOCAL(close);

/* close_range and closefrom (glibc's wrappers). The program's descriptors
 * that loopfast knows (a fast-path socket, a tier socket, a listener, a
 * pending connect) are closed one by one, as close() closes them (the
 * peer told, the table's entry gone, their hidden companions, a bell or a
 * rendezvous, with them), so that a number the program reuses (a
 * daemon's file) is never taken for one of them; the kernel then closes
 * the rest of the range around loopfast's hidden descriptors, which stay,
 * as close() leaves them: closed, their owners kept their numbers,
 * another hidden descriptor got them, and the next look through the old
 * number acted on the new one (a bell's verdict closed another
 * connection's bell; a board's pair got another connection's memfd:
 * docs/shm.md, "A fork before the answer"). Everything else in the table
 * is a cache that checks the kernel (fdtab.c). CLOSE_RANGE_CLOEXEC closes
 * nothing, and CLOSE_RANGE_UNSHARE closes in a table of its own, as does
 * a vfork child (its parent's table): their descriptors go to the kernel
 * as they are (known false). A raw close_range system call is not seen
 * (docs/shm.md). */
static int close_range_around(unsigned first, unsigned last, int flags, bool known)
{
	unsigned lo = first;
	int r = 0;

	if (!__atomic_load_n(&lf__fdtab, __ATOMIC_ACQUIRE))
		return lf__sys_close_range(first, last, flags); /* no state: nothing of loopfast's */
	lf__shm_closing_range = known; /* a tier socket's close keeps no copy (shm.c, keep_socket) */
	for (unsigned fd = first; fd <= last && fd < LF_FD_MAX; fd++) {
		struct lf_fd *f = lf__fd_peek((int)fd);
		unsigned fl = f ? atomic_load_explicit(&f->flags, memory_order_relaxed) : 0;
		if (fl & LF_F_HIDDEN) {
			if (fd > lo)
				r |= lf__sys_close_range(lo, fd - 1, flags);
			lo = fd + 1;
		} else if (known && f && (fl || f->lst)) {
			local_close((int)fd);
		}
	}
	lf__shm_closing_range = false;
	if (lo <= last && lo >= first)
		r |= lf__sys_close_range(lo, last, flags);
	return r ? -1 : 0;
}

LF_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	return close_range_around(first, last, flags, !flags && !lf__sys_vfork_child());
}

LF_EXPORT void closefrom(int low)
{
	static void (*next)(int);

	if (low >= 0 && (!close_range_around((unsigned)low, ~0u, 0, !lf__sys_vfork_child()) || errno != ENOSYS))
		return; /* (a kernel without close_range: glibc's own way, below) */
	if (!next)
		next = (void (*)(int))dlsym(RTLD_NEXT, "closefrom");
	if (next)
		next(low);
	else
		lf__sys_close_range((unsigned)(low < 0 ? 0 : low), ~0u, 0);
}

/* Writes a translated address into the caller's buffer (room bytes) with
 * the kernel's truncation rule: copy what fits, report the full length. */
static void put_addr(const struct lf_ep *ep, int family, struct sockaddr *sa, socklen_t room, socklen_t *len)
{
	struct sockaddr_storage ss;
	socklen_t n = lf__ep_to_sockaddr(ep, family, &ss);

	memcpy(sa, &ss, room < n ? room : n);
	*len = n;
}

static int name_common(int fd, struct sockaddr *sa, socklen_t *len, bool peer)
{
	socklen_t room = len ? *len : 0; /* the call overwrites *len with the Unix name's length */
	int r = peer ? REAL(getpeername)(fd, sa, len) : REAL(getsockname)(fd, sa, len);
	int family, e = errno;
	struct lf_ep local, remote;

	if (r == 0 && room >= sizeof(sa_family_t) && sa->sa_family == AF_UNIX &&
	    lf__fast_endpoints(fd, &family, &local, &remote))
		put_addr(peer ? &remote : &local, family, sa, room, len);
	errno = e;
	return r;
}

LF_EXPORT int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	return name_common(fd, sa, len, false);
}

LF_EXPORT int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	return name_common(fd, sa, len, true);
}

/* A -errno result as libc's contract: -1 and errno, or 0 and errno as it was. */
static int opt_result(int r, int e0)
{
	errno = r < 0 ? -r : e0;
	return r < 0 ? -1 : 0;
}

/* SOL_LOOPFAST (loopfast.h) is answered by api.c, never by the kernel.
 * Socket options: the Unix socket answers the generic SOL_SOCKET options it
 * handles as TCP does; everything else on a fast-path socket is answered
 * by sockopt.c (TCP's own answer, or an honest error). The Unix socket
 * refuses every level above SOL_SOCKET with EOPNOTSUPP, which is when a
 * socket is asked whether it is a fast-path one; the few SOL_SOCKET
 * options whose Unix answer is not TCP's are decided before the call (one
 * of them, SO_PEERPIDFD, would make a descriptor). */
LF_EXPORT int getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
	struct lf_fd *f = lf__fd(fd);
	int e0 = errno, r, family;

	if (f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_PENDING))
		lf__finalize(fd, false);
	if (level == SOL_LOOPFAST)
		return opt_result(lf__api_getopt(fd, opt, val, len), e0);
	int err;
	if (f && f->pend_err && level == SOL_SOCKET && opt == SO_ERROR && val && len && *len >= sizeof(int) &&
	    (err = lf__err_take(fd))) {
		/* The error of a pending connect that failed (we read it), or
		 * of a reset seen on the bell. */
		memcpy(val, &err, sizeof(int));
		*len = sizeof(int);
		errno = e0;
		return 0;
	}
	errno = e0;

	if (level == SOL_SOCKET && !lf__sopt_claimed(level, opt)) {
		r = REAL(getsockopt)(fd, level, opt, val, len);
		struct lf_ep a, b;
		int v;
		if (r == 0 && (opt == SO_DOMAIN || opt == SO_PROTOCOL) && len && *len >= sizeof(int)) {
			int e = errno;
			memcpy(&v, val, sizeof(v));
			if ((opt == SO_DOMAIN ? v == AF_UNIX : v == 0) && lf__fast_endpoints(fd, &family, &a, &b)) {
				v = opt == SO_DOMAIN ? family : IPPROTO_TCP;
				memcpy(val, &v, sizeof(v));
			}
			errno = e;
		}
		return r;
	}
	if (level == SOL_SOCKET) {
		if (!lf__fast_family(fd, &family)) {
			errno = e0;
			return REAL(getsockopt)(fd, level, opt, val, len);
		}
	} else {
		r = REAL(getsockopt)(fd, level, opt, val, len);
		if (r == 0 && level == IPPROTO_TCP && opt == TCP_SAVE_SYN && f && f->lst && lf__listener_marks(f->lst) && len &&
		    *len >= 1)
			memset(val, 0, *len); /* loopfast turned it on (hello marks), not the program */
		if (r == 0 || errno != EOPNOTSUPP)
			return r;
		if (!lf__fast_family(fd, &family)) {
			errno = EOPNOTSUPP;
			return r;
		}
	}
	r = lf__sopt_get(fd, family, level, opt, val, len);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	errno = e0; /* success: errno as it was before the call */
	return 0;
}

LF_EXPORT int setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
	int e0 = errno, r, e, family;

	if (level == SOL_LOOPFAST)
		return opt_result(lf__api_setopt(fd, opt, val, len), e0);
	if (level != SOL_SOCKET || !lf__sopt_claimed(level, opt) || !lf__fast_family(fd, &family)) {
		errno = e0;
		r = REAL(setsockopt)(fd, level, opt, val, len);
		e = errno;
		if (r == 0) {
			lf__sopt_note(fd, level, opt, val, len);
			if (level == IPPROTO_TCP && opt == TCP_SAVE_SYN)
				lf__listener_app_saves_syn(fd);
			if (level == SOL_SOCKET && len >= sizeof(struct timeval)) {
				/* (SO_*TIMEO_NEW's struct is timeval's on LP64) */
				const struct timeval *tv = val;
				bool on = tv->tv_sec || tv->tv_usec, lp64 = sizeof(long) == 8;
				if (opt == SO_RCVTIMEO || (lp64 && opt == SO_RCVTIMEO_NEW))
					lf__fd_rcvtimeo(fd, on);
				if (opt == SO_SNDTIMEO || (lp64 && opt == SO_SNDTIMEO_NEW))
					lf__fd_sndtimeo(fd, on);
			}
			if (level == SOL_SOCKET && (opt == SO_SNDBUF || opt == SO_SNDBUFFORCE))
				lf__shm_sndbuf(fd); /* the tier's ring follows it */
			errno = e0;
			return 0;
		}
		if (level == SOL_SOCKET || e != EOPNOTSUPP || !lf__fast_family(fd, &family)) {
			errno = e;
			return r;
		}
	}
	r = lf__sopt_set(fd, family, level, opt, val, len);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	errno = e0;
	return 0;
}

/* shutdown(SHUT_RD) on a Unix stream also shuts the peer's sending side,
 * so the peer's next write would fail with EPIPE. TCP keeps accepting the
 * peer's bytes and the reader still gets them (and reads 0 when there are
 * none): the fast path keeps that by remembering SHUT_RD here (spin.c's
 * read wrappers honour it) instead of telling the kernel. */
LF_EXPORT int shutdown(int fd, int how)
{
	struct lf_fd *f;
	int e0 = errno, family, r;

	if ((how != SHUT_RD && how != SHUT_RDWR && how != SHUT_WR) || !(f = lf__fd(fd)) ||
	    !lf__fast_family(fd, &family)) {
		errno = e0;
		return REAL(shutdown)(fd, how);
	}
	errno = e0;
	if (how != SHUT_RD)
		lf__shm_fin(fd); /* the peer's shm reader looks at the socket from now on */
	r = how == SHUT_RD ? 0 : REAL(shutdown)(fd, SHUT_WR);
	if (r < 0)
		return r;
	atomic_fetch_or(&f->flags, (how != SHUT_WR ? LF_F_SHUT_RD : 0) | (how != SHUT_RD ? LF_F_SHUT_WR : 0));
	errno = e0;
	return 0;
}

/* nfd became a copy of fd. A listener copied to a descriptor that stays
 * open across exec (socket activation's dup2 to fd 3) takes its hidden
 * descriptors along, so that the exec'd program can claim hellos. */
static void inherit(int fd, int nfd, bool cloexec)
{
	struct lf_fd *f;

	lf__fd_copy(fd, nfd);
	if (!cloexec && fd != nfd && (f = lf__fd(nfd)) && f->lst)
		lf__listener_cloexec(f->lst, false);
}

/* fd may become nfd: not one of stdio's numbers, or off the tier first
 * (shm.h; false: EOPNOTSUPP). */
static bool stdio_ok(int fd, int nfd)
{
	return fd == nfd || nfd < 0 || nfd > LF_SHM_STDIO_MAX || !lf__shm_used || lf__shm_leave_for_stdio(fd);
}

/* A copy of fd that got one of stdio's numbers (dup, F_DUPFD): undone,
 * and the call fails, when the connection cannot leave the tier. */
static bool stdio_copy(int fd, int nfd)
{
	if (stdio_ok(fd, nfd))
		return true;
	int e = errno;
	lf__sys_close(nfd);
	errno = e;
	return false;
}

LF_EXPORT int dup(int fd)
{
	if (lf__fd_foreign(fd))
		return REAL(dup)(fd);
	int nfd = REAL(dup)(fd), e = errno;

	if (!stdio_copy(fd, nfd))
		return -1;
	if (nfd >= 0)
		lf__fd_copy(fd, nfd);
	errno = e;
	return nfd;
}

LF_EXPORT int dup3(int fd, int nfd, int flags)
{
	int r, e;

	if (lf__fd_foreign(fd) || lf__fd_foreign(nfd))
		return REAL(dup3)(fd, nfd, flags);
	if (!stdio_ok(fd, nfd))
		return -1;
	if (fd != nfd)
		lf__fd_relocate(nfd);
	r = REAL(dup3)(fd, nfd, flags);
	e = errno;
	if (r >= 0)
		inherit(fd, nfd, flags & O_CLOEXEC);
	errno = e;
	return r;
}

LF_EXPORT int dup2(int fd, int nfd)
{
	int r, e;

	if (lf__fd_foreign(fd) || lf__fd_foreign(nfd))
		return REAL(dup2)(fd, nfd);
	if (!stdio_ok(fd, nfd))
		return -1;
	if (fd != nfd)
		lf__fd_relocate(nfd);
	r = REAL(dup2)(fd, nfd);
	e = errno;
	if (r >= 0)
		inherit(fd, nfd, false);
	errno = e;
	return r;
}

static int fcntl_common(int fd, int cmd, va_list ap)
{
	void *arg = va_arg(ap, void *);
	int r, e;

	if (!lf__real_fcntl)
		lf__resolve();
	r = lf__real_fcntl(fd, cmd, arg);
	e = errno;
	if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && !lf__fd_foreign(fd) && !stdio_copy(fd, r))
		return -1;
	if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && !lf__fd_foreign(fd))
		lf__fd_copy(fd, r);
	if (r >= 0 && cmd == F_SETFL)
		lf__fd_nonblock(fd, ((long)arg & O_NONBLOCK) != 0);
	struct lf_fd *f;
	if (r >= 0 && cmd == F_SETFD && (f = lf__fd(fd)) && f->lst)
		lf__listener_cloexec(f->lst, ((long)arg & FD_CLOEXEC) != 0);
	errno = e;
	return r;
}

LF_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	if (!lf__real_ioctl)
		lf__resolve();
	int q;
	if (req == FIONREAD && arg && lf__shm_inq(fd, &q)) { /* SIOCINQ: the ring's bytes, not its tokens */
		*(int *)arg = q;
		return 0;
	}
	if (req == SIOCATMARK && arg && lf__shm_atmark(fd, &q)) { /* the ring's mark, not the socket's */
		*(int *)arg = q;
		return 0;
	}
	int r = lf__real_ioctl(fd, req, arg), e = errno;
	if (r == 0 && req == FIONBIO && arg)
		lf__fd_nonblock(fd, *(int *)arg != 0);
	struct lf_fd *f;
	if (r == 0 && (req == FIOCLEX || req == FIONCLEX) && (f = lf__fd(fd)) && f->lst)
		lf__listener_cloexec(f->lst, req == FIOCLEX); /* as F_SETFD (Python's set_inheritable) */
	errno = e;
	return r;
}

LF_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	int r = fcntl_common(fd, cmd, ap);
	va_end(ap);
	return r;
}

LF_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	int r = fcntl_common(fd, cmd, ap);
	va_end(ap);
	return r;
}

/* epoll registrations of a socket that has not connected yet, and of a
 * fast-path socket (for EPOLLERR after a reset, bell.c), are recorded:
 * the fast path replaces the socket's file, which drops them, so connect
 * makes them again on the new file. Also counted: an epoll set's members
 * that spin (spin.c) or have a connect pending (connect.c), and a bell
 * joins the sets its unconfirmed socket is added to (bell.c). */
static __attribute__((noinline)) int epoll_note(int epfd, int op, int fd, struct epoll_event *ev, struct lf_fd *f,
						 unsigned fl)
{
	/* odd while the kernel and the record differ: a wait that restores
	 * the record (shm.c, lf__shm_epoll_unpark) does it again after this */
	__atomic_add_fetch(&f->epgen, 1, __ATOMIC_ACQ_REL);
	int r = REAL(epoll_ctl)(epfd, op, fd, ev), e = errno;

	if (r) {
		__atomic_add_fetch(&f->epgen, 1, __ATOMIC_RELEASE);
		errno = e;
		return r;
	}
	lf__spin_epoll_member(epfd, fd, op);
	if (op == EPOLL_CTL_ADD && (fl & LF_F_UNCONFIRMED))
		lf__bell_epoll_add(epfd, fd);
	if ((fl & LF_F_PENDING) && op != EPOLL_CTL_MOD && lf__fd(epfd))
		lf__fd(epfd)->pending_members += op == EPOLL_CTL_ADD ? 1 : -1;
	if (fl & (LF_F_OPTIN | LF_F_PENDING | LF_F_FAST)) {
		int slot = -1;
		for (int i = 0; i < LF_EPOLL_MAX && slot < 0; i++)
			if (f->ep[i].epfd1 == epfd + 1)
				slot = i;
		for (int i = 0; i < LF_EPOLL_MAX && slot < 0; i++)
			if (!f->ep[i].epfd1)
				slot = i;
		if (slot >= 0) {
			struct lf_fd *set = lf__fd_peek(epfd);
			f->ep[slot].epfd1 = op == EPOLL_CTL_DEL ? 0 : epfd + 1;
			f->ep[slot].gen++;
			f->ep[slot].set = set ? set->epset : 0;
			if (ev)
				f->ep[slot].ev = *ev;
		}
	}
	__atomic_add_fetch(&f->epgen, 1, __ATOMIC_RELEASE);
	atomic_fetch_add(&lf__shm_watchable, 1); /* after epgen: a wait that reads it sees the record */
	errno = e;
	return r;
}

/* Each epoll set is told apart from those that had its number before
 * (closed since, by any means): a socket's records name their sets by
 * number, and an epoll wait that spins reports a tier socket's ring from
 * its record (shm.c, lf__shm_watch), which must not be one of a set the
 * socket is no longer in. */
static int epoll_made(int epfd)
{
	static atomic_uint sets;
	struct lf_fd *e = epfd >= 0 ? lf__fd(epfd) : NULL;

	if (e) {
		unsigned s;
		while (!(s = atomic_fetch_add_explicit(&sets, 1, memory_order_relaxed) + 1)) /* never 0 */
			;
		e->epset = s;
	}
	return epfd;
}

LF_EXPORT int epoll_create(int size)
{
	int e = errno, r = epoll_made(REAL(epoll_create)(size));
	if (r >= 0)
		errno = e;
	return r;
}

LF_EXPORT int epoll_create1(int flags)
{
	int e = errno, r = epoll_made(REAL(epoll_create1)(flags));
	if (r >= 0)
		errno = e;
	return r;
}

/* An event loop calls this once or more per request (redis-benchmark five
 * times: ADD and DEL of a connected socket): such a call costs one lookup
 * before the kernel's. A fast-path socket's registrations are recorded
 * while it is unconfirmed or after a reset: only a bell's ringing reports
 * a reset (bell.c), and a confirmed socket's bell is gone; a tier
 * socket's always (its full ring's EPOLLOUT: shm.c, room_fix). */
LF_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct lf_fd *f = lf__fd_peek(fd);
	unsigned fl = f ? atomic_load_explicit(&f->flags, memory_order_relaxed) : 0;

	if ((fl & LF_F_SHM) && ev && op != EPOLL_CTL_DEL && (ev->events & EPOLLET))
		lf__shm_want_edges(fd); /* the tier's writer then gives an edge per push (shm.c) */
	if ((fl & (LF_F_UNCONFIRMED | LF_F_PENDING | LF_F_OPTIN | LF_F_RESET | LF_F_SHM)) ||
	    ((fl & LF_F_FAST) && f->spin_us && op != EPOLL_CTL_MOD))
		return epoll_note(epfd, op, fd, ev, f, fl);
	return REAL(epoll_ctl)(epfd, op, fd, ev);
}

/* glibc's FILE reads and writes through its own calls, past the
 * interposer: a tier socket leaves the tier before it gets one (shm.h). */
LF_EXPORT FILE *fdopen(int fd, const char *mode)
{
	static FILE *(*next)(int, const char *);

	if (lf__shm_used && !lf__shm_leave_for_stdio(fd))
		return NULL;
	if (!next)
		next = (FILE * (*)(int, const char *)) dlsym(RTLD_NEXT, "fdopen");
	return next(fd, mode);
}
