/* Negotiation of the fast path (see shared/DESIGN.md, "Negotiation").
 *
 * Server: an opted-in listener on port P also listens on an abstract Unix
 * socket, the rendezvous, named after its TCP address.
 *
 * Client: finds the one TCP listener the kernel would pick for the
 * destination (sock_diag), checks that the rendezvous belongs to the same
 * uid, binds its TCP socket to an ephemeral port X, binds a Unix socket to a
 * name that encodes both TCP endpoints, connects it to the rendezvous and
 * sends a hello carrying its own TCP socket (SCM_RIGHTS). Only then does it
 * connect TCP (the doorbell), and finally it dup3()s the Unix socket over
 * the application's fd.
 *
 * Server accept: the accepted TCP connection X was preceded by its hello,
 * so the hello is already queued; the server takes it (stashing others for
 * their own accepts, in a channel all processes of a fork family share, under
 * a process-shared lock), checks that the TCP socket carried by the hello is
 * the very other end of X (mirrored 4-tuple: only the real client can hold
 * it), and dup3()s the Unix connection over X. Anything else: plain TCP.
 *
 * Every step before the hello is sent can fall back silently; after it, the
 * server's decision is fixed by what is queued, so no timing can split the
 * two ends between paths.
 */
#include "internal.h"

#include <errno.h>
#include <dirent.h>
#include <stddef.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DEBUG(...) do { if (lf__debug_on) lf__debug(__VA_ARGS__); } while (0)

#define HELLO_MAGIC 0x3148464cu /* "LFH1" */

struct hello {
	uint32_t magic;
	uint32_t reserved;
};

struct stash_msg {
	uint32_t magic;
	struct lf_ep client;
	uint64_t gen; /* which take() put it (back) in the stash */
};

/* The claim lock of a listener: a robust, process-shared mutex in a memfd,
 * so that every process that accepts on the listener (fork family, or an
 * exec'd program that inherited it) serialises on the same lock. A process
 * killed while holding it does not wedge the others; it is only ever held
 * across non-blocking calls. */
static void lock_name(char *buf, size_t len, const struct sockaddr_un *rn, socklen_t rl)
{
	size_t n = rl - offsetof(struct sockaddr_un, sun_path) - 1;
	snprintf(buf, len, "loopfast-lock:%.*s", (int)n, rn->sun_path + 1);
}

static void *lock_create(const char *name, int *fdp)
{
	pthread_mutexattr_t a;
	int fd = memfd_create(name, MFD_CLOEXEC);
	void *p;

	if (fd < 0)
		return NULL;
	if (ftruncate(fd, 4096) || (p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		lf__sys_close(fd);
		return NULL;
	}
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(p, &a);
	pthread_mutexattr_destroy(&a);
	*fdp = fd;
	return p;
}

static void lock(struct lf_listener *l)
{
	if (pthread_mutex_lock(l->lock) == EOWNERDEAD)
		pthread_mutex_consistent(l->lock);
}

static void unlock(struct lf_listener *l)
{
	pthread_mutex_unlock(l->lock);
}

static bool tcp_family(int fd, int *family)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) || v != IPPROTO_TCP)
		return false;
	l = sizeof(v);
	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) || (v != AF_INET && v != AF_INET6))
		return false;
	*family = v;
	return true;
}

static bool sock_ep(int fd, bool peer, struct lf_ep *ep)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	int r = peer ? lf__sys_getpeername(fd, (void *)&ss, &l) : lf__sys_getsockname(fd, (void *)&ss, &l);

	return r == 0 && lf__ep_from_sockaddr(ep, (void *)&ss, l);
}

static void set_nonblock(int fd, bool on)
{
	int fl = lf__sys_fcntl(fd, F_GETFL, 0);

	if (fl >= 0 && !!(fl & O_NONBLOCK) != on)
		lf__sys_fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

/* Carries what the application set (on this socket, or on the listener an
 * accepted socket inherits from) over to the Unix socket that replaces it:
 * the generic options it set, read back from the TCP socket, and into the
 * fd table the TCP-level ones. Nothing set, nothing done. */
static void carry_options(int tcp, int unx, const struct lf_fd *src, struct lf_fd *dst)
{
	char v[32];

	for (int i = 0; i < lf__ncarried; i++) {
		socklen_t l = sizeof(v);
		if (!(src->sockset & (1u << i)) || lf__sys_getsockopt(tcp, SOL_SOCKET, lf__carried[i], v, &l))
			continue;
		if (lf__carried[i] == SO_RCVBUF || lf__carried[i] == SO_SNDBUF) {
			int val;
			memcpy(&val, v, sizeof(val));
			val /= 2; /* getsockopt reports twice what was set */
			memcpy(v, &val, sizeof(val));
		}
		lf__sys_setsockopt(unx, SOL_SOCKET, lf__carried[i], v, l);
	}
	if (src != dst) {
		memcpy(dst->opt, src->opt, sizeof(dst->opt));
		dst->optset = src->optset;
	}
	dst->sockset = src->sockset;
}

/* Puts the Unix socket in place of the TCP socket under the same fd number,
 * keeping the descriptor flags, and marks the fd as a fast-path socket. */
static int switch_fd(int unx, int fd, int family, bool nonblock, bool cloexec)
{
	struct lf_fd *f = lf__fd(fd);

	set_nonblock(unx, nonblock);
	if (lf__sys_dup3(unx, fd, cloexec ? O_CLOEXEC : 0) < 0)
		return -errno;
	lf__sys_close(unx);
	struct timeval tv = { 0, 0 };
	socklen_t l = sizeof(tv);
	bool rcvtimeo = (f->sockset & 1u) /* lf__carried[0] is SO_RCVTIMEO */ &&
			lf__sys_getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec);
	f->family = family;
	if (!f->spin_us) /* lf_set_spin before connect wins */
		f->spin_us = lf__global_spin_us;
	f->spin_fail = f->spin_skip = 0;
	atomic_store(&f->flags, LF_F_FAST | (nonblock ? LF_F_NONBLOCK : 0) | (rcvtimeo ? LF_F_RCVTIMEO : 0));
	return 0;
}

/* Which listening socket would the kernel give a connection to dst? Exact
 * address beats wildcard; a tie (an SO_REUSEPORT group) cannot be steered,
 * so it is refused and the connection stays plain TCP. */
static bool find_listener(const struct lf_ep *dst, struct lf_diag_listener *out)
{
	struct lf_diag_listener l[16];
	int best = 0, count = 0, n = 0;

	/* An IPv4 destination asks about IPv6 listeners only when no IPv4 one
	 * matched: a dual-stack [::] (score 1) never outranks those. */
	for (int pass = dst->family == AF_INET ? 0 : 1; pass < 2 && best < 2; pass++) {
		int k = lf__diag_listeners(pass ? AF_INET6 : AF_INET, dst->port, l + n, 16 - n);
		if (k < 0)
			return false;
		for (int i = n; i < n + k; i++) {
			int score = 0;
			if (l[i].ep.family == dst->family && !lf__ep_is_any(&l[i].ep))
				score = lf__ep_equal(&l[i].ep, dst) ? 3 : 0;
			else if (lf__ep_is_any(&l[i].ep) && l[i].ep.family == dst->family)
				score = 2;
			else if (lf__ep_is_any(&l[i].ep) && dst->family == AF_INET && !l[i].v6only)
				score = 1; /* dual-stack [::] accepting v4 */
			if (score > best) {
				best = score;
				count = 0;
			}
			if (score && score == best && count++ == 0)
				*out = l[i];
		}
		n += k;
	}
	return best > 0 && count == 1;
}

/* Sends one message carrying one descriptor. */
static int send_with_fd(int sock, const void *buf, size_t len, int fd)
{
	struct iovec iov = { (void *)buf, len };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} c;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	memset(&c, 0, sizeof(c));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len ? 0 : -1;
}

static int send_hello(int unx, int tcp)
{
	struct hello h = { .magic = HELLO_MAGIC };
	return send_with_fd(unx, &h, sizeof(h), tcp);
}

/* Waits for a TCP connect in progress to finish, whatever the socket's
 * mode; returns true when it is connected. */
static bool wait_connected(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	struct lf_ep ep;

	while (syscall(SYS_ppoll, &p, 1, NULL, NULL, 8) < 0 && errno == EINTR)
		;
	return sock_ep(fd, true, &ep);
}

int lf__connect(int fd, const struct sockaddr *sa, socklen_t len, int *ret)
{
	struct lf_fd *f = lf__fd(fd);
	struct lf_diag_listener lst;
	struct lf_ep dst, src, tmp;
	struct sockaddr_un cname, rname;
	struct sockaddr_storage ss;
	int family, unx = -1, e;

	if (!f)
		return 0;
	unsigned fl = atomic_load(&f->flags);
	if (!(fl & LF_F_OPTIN))
		return 0;
	atomic_fetch_and(&f->flags, ~LF_F_OPTIN);
	if (!lf__ep_from_sockaddr(&dst, sa, len) || !lf__ep_is_loopback(&dst))
		return 0;
	if (fl & LF_F_TCP)
		family = f->family;
	else if (!tcp_family(fd, &family))
		return 0;
	if (sock_ep(fd, true, &tmp) || !sock_ep(fd, false, &src))
		return 0; /* already connected, or not a usable socket */
	if (!find_listener(&dst, &lst)) {
		DEBUG("connect fd %d: no single listener on port %u: plain TCP", fd, dst.port);
		return 0;
	}

	/* Our TCP endpoint must be known before anything is sent. */
	if (src.port == 0) {
		struct lf_ep b = src;
		if (lf__ep_is_any(&b)) {
			b.family = dst.family;
			if (dst.family == AF_INET)
				b.addr.v4.s_addr = htonl(INADDR_LOOPBACK);
			else
				b.addr.v6 = in6addr_loopback;
		}
		socklen_t bl = lf__ep_to_sockaddr(&b, family, &ss);
		if (bind(fd, (void *)&ss, bl) || !sock_ep(fd, false, &src)) {
			DEBUG("connect fd %d: bind to an ephemeral port: %s: plain TCP", fd, strerror(errno));
			return 0;
		}
	}
	if (lf__ep_is_any(&src)) {
		src.family = dst.family;
		if (dst.family == AF_INET)
			src.addr.v4.s_addr = htonl(INADDR_LOOPBACK);
		else
			src.addr.v6 = in6addr_loopback;
	}

	unx = lf__sys_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (unx < 0)
		return 0;
	struct stat st;
	socklen_t cl = lf__name_client(&cname, family, &src, &dst, fstat(fd, &st) ? 0 : (unsigned long)st.st_ino);
	socklen_t rl = lf__name_listener(&rname, lst.family, &lst.ep);
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	const char *why = NULL;
	if (bind(unx, (void *)&cname, cl))
		why = "bind client name";
	else if (lf__sys_connect(unx, (void *)&rname, rl))
		why = "connect to rendezvous";
	else if (lf__sys_getsockopt(unx, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.uid != lst.uid)
		why = "rendezvous owner is not the listener's uid";
	else if (send_hello(unx, fd))
		why = "send hello";
	if (why) {
		DEBUG("connect fd %d to port %u: %s: %s: plain TCP", fd, dst.port, why, strerror(errno));
		lf__sys_close(unx); /* the server sees no hello: plain TCP */
		return 0;
	}

	/* Committed: the server decides from the queued hello. */
	int fdfl = lf__sys_fcntl(fd, F_GETFL, 0);
	bool nonblock = fdfl >= 0 && (fdfl & O_NONBLOCK);
	bool cloexec = lf__sys_fcntl(fd, F_GETFD, 0) & FD_CLOEXEC;
	int r = lf__sys_connect(fd, sa, len);
	e = errno;
	if (r < 0 && (e == EINPROGRESS || e == EINTR || e == EALREADY)) {
		r = wait_connected(fd) ? 0 : -1;
		socklen_t el = sizeof(e);
		if (r < 0 && !nonblock) /* a blocking connect returns the error */
			lf__sys_getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
	}
	if (r < 0) {
		lf__sys_close(unx);
		*ret = -1;
		errno = nonblock ? EINPROGRESS : e; /* SO_ERROR tells a non-blocking caller */
		return 1;
	}

	carry_options(fd, unx, f, f);
	for (int i = 0; i < LF_EPOLL_MAX; i++)
		if (f->ep[i].epfd1)
			lf__sys_epoll_ctl(f->ep[i].epfd1 - 1, EPOLL_CTL_DEL, fd, NULL);
	struct lf_epreg regs[LF_EPOLL_MAX];
	memcpy(regs, f->ep, sizeof(regs));
	if (switch_fd(unx, fd, family, nonblock, cloexec) < 0) {
		/* dup3 cannot fail for valid fds; if it did, the connection is
		 * unusable on both paths: report it as reset. */
		lf__sys_close(unx);
		*ret = -1;
		errno = ECONNRESET;
		return 1;
	}
	for (int i = 0; i < LF_EPOLL_MAX; i++) {
		if (regs[i].epfd1 && lf__sys_epoll_ctl(regs[i].epfd1 - 1, EPOLL_CTL_ADD, fd, &regs[i].ev) == 0)
			lf__epoll_member(regs[i].epfd1 - 1, fd, EPOLL_CTL_ADD);
	}
	if (nonblock)
		atomic_fetch_or(&f->flags, LF_F_INPROGRESS);
	*ret = nonblock ? -1 : 0;
	errno = nonblock ? EINPROGRESS : 0;
	return 1;
}

static bool same_name(int fd, const struct sockaddr_un *want, socklen_t wl)
{
	struct sockaddr_un sun;
	socklen_t l = sizeof(sun);
	return lf__sys_getsockname(fd, (void *)&sun, &l) == 0 && l == wl && !memcmp(&sun, want, wl);
}

/* A listener that came through exec already has its rendezvous, stash and
 * lock among our descriptors (they follow the listener's FD_CLOEXEC): find
 * them by name. */
static struct lf_listener *adopt(const struct sockaddr_un *rn, socklen_t rl, const struct sockaddr_un *sn,
				 socklen_t sl)
{
	struct lf_listener *l = calloc(1, sizeof(*l));
	char link[64], target[256], want[200], lname[160];
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!l || !d) {
		free(l);
		if (d)
			closedir(d);
		return NULL;
	}
	l->rdv = l->chan = l->lockfd = -1;
	lock_name(lname, sizeof(lname), rn, rl);
	snprintf(want, sizeof(want), "/memfd:%s (deleted)", lname);
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0 || fd == dirfd(d))
			continue;
		target[n] = '\0';
		if (!strcmp(target, want))
			l->lockfd = fd;
		else if (!strncmp(target, "socket:", 7) && same_name(fd, rn, rl))
			l->rdv = fd;
		else if (!strncmp(target, "socket:", 7) && same_name(fd, sn, sl))
			l->chan = fd;
	}
	closedir(d);
	if (l->rdv < 0 || l->chan < 0 || l->lockfd < 0 ||
	    (l->lock = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, l->lockfd, 0)) == MAP_FAILED) {
		free(l);
		return NULL;
	}
	atomic_init(&l->refs, 1);
	lf__listener_reserve(l, true);
	int fds[3] = { l->rdv, l->chan, l->lockfd };
	for (int i = 0; i < 3; i++) {
		struct lf_fd *f = lf__fd(fds[i]);
		if (f) {
			f->owner = l;
			atomic_store(&f->flags, LF_F_HIDDEN);
		}
	}
	return l;
}

int lf__listen_optin(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	struct lf_ep ep;
	struct sockaddr_un name, sname;
	struct stat st;
	int family, rdv = -1, chan = -1, lockfd = -1;
	void *mutex = NULL;

	if (!f)
		return -EOPNOTSUPP;
	if (f->lst)
		return 0;
	if (atomic_load(&f->flags) & LF_F_NOFAST)
		return -EADDRINUSE;
	atomic_fetch_and(&f->flags, ~LF_F_OPTIN);
	if (!tcp_family(fd, &family) || !sock_ep(fd, false, &ep)) {
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return -EOPNOTSUPP;
	}
	/* Clients check that the rendezvous and the TCP listener share a uid. */
	if ((!lf__ep_is_loopback(&ep) && !lf__ep_is_any(&ep)) || fstat(fd, &st) || st.st_uid != geteuid()) {
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return 0;
	}
	socklen_t nl = lf__name_listener(&name, family, &ep), sl = lf__name_stash(&sname, family, &ep);
	rdv = lf__sys_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	chan = lf__sys_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int big = 4 << 20, e = 0;
	char lname[160];
	lock_name(lname, sizeof(lname), &name, nl);
	if (rdv < 0 || chan < 0 || !(mutex = lock_create(lname, &lockfd)))
		e = errno ? errno : ENOMEM;
	else if (bind(rdv, (void *)&name, nl) || lf__sys_listen(rdv, SOMAXCONN) || bind(chan, (void *)&sname, sl) ||
		 lf__sys_connect(chan, (void *)&sname, sl))
		e = errno;
	if (e) {
		lf__sys_close(rdv);
		lf__sys_close(chan);
		lf__sys_close(lockfd);
		if (mutex)
			munmap(mutex, 4096);
		struct lf_listener *l = e == EADDRINUSE ? adopt(&name, nl, &sname, sl) : NULL;
		if (l) {
			l->family = family;
			f->lst = l;
			return 0;
		}
		DEBUG("listener fd %d: rendezvous: %s: plain TCP only", fd, strerror(e));
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return -e;
	}
	if (lf__sys_setsockopt(chan, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)))
		lf__sys_setsockopt(chan, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	if (lf__sys_setsockopt(chan, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)))
		lf__sys_setsockopt(chan, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));

	struct lf_listener *l = calloc(1, sizeof(*l));
	if (!l) {
		lf__sys_close(rdv);
		lf__sys_close(chan);
		lf__sys_close(lockfd);
		munmap(mutex, 4096);
		return -ENOMEM;
	}
	atomic_init(&l->refs, 1);
	l->family = family;
	l->lock = mutex;
	l->rdv = lf__fd_hide(rdv, l);
	l->chan = lf__fd_hide(chan, l);
	l->lockfd = lf__fd_hide(lockfd, l);
	lf__listener_reserve(l, true);
	if (!(lf__sys_fcntl(fd, F_GETFD, 0) & FD_CLOEXEC))
		lf__listener_cloexec(l, false);
	f->lst = l;
	return 0;
}

static int stash_put(int chan, int fd, const struct lf_ep *client, uint64_t gen)
{
	struct stash_msg sm;
	memset(&sm, 0, sizeof(sm)); /* no uninitialised padding on the wire */
	sm.magic = HELLO_MAGIC;
	sm.client = *client;
	sm.gen = gen;
	int r = send_with_fd(chan, &sm, sizeof(sm), fd);

	lf__sys_close(fd); /* the stash holds its own reference */
	return r;
}

/* Receives one message carrying at most one fd; closes any extra fds a
 * misbehaving peer attached. Returns the byte count; *fd is -1 when none. */
static ssize_t recv_with_fd(int sock, void *buf, size_t len, int *fd)
{
	struct iovec iov = { buf, len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} c;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf) };
	ssize_t n = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	*fd = -1;
	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int x;
			memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (*fd < 0)
				*fd = x;
			else
				lf__sys_close(x);
		}
	}
	return n;
}

/* Takes the Unix connections whose client endpoint is `client` from the
 * stash and the rendezvous backlog (more than one only when a stale or
 * forged one shares the endpoint); everything else goes (back) to the
 * stash at once, so that a claim holds at most one extra descriptor. The
 * stash is FIFO and only one take() runs at a time (claim lock), so
 * meeting an item this take() put back means the stash went full circle.
 * Returns how many fds it put in found[] (at most max). */
static int take(struct lf_listener *l, const struct lf_ep *client, int *found, int max)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* unique: takes are serialised */
	uint64_t gen = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	int nfound = 0, fd, fam;
	struct stash_msg sm;
	struct lf_ep c, s;

	for (;;) {
		ssize_t r = recv_with_fd(l->chan, &sm, sizeof(sm), &fd);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		if (fd < 0)
			continue;
		if (r != sizeof(sm) || sm.magic != HELLO_MAGIC) {
			lf__sys_close(fd);
			continue;
		}
		if (sm.gen == gen) {
			stash_put(l->chan, fd, &sm.client, gen);
			break;
		}
		if (nfound < max && lf__ep_equal(&sm.client, client))
			found[nfound++] = fd;
		else
			stash_put(l->chan, fd, &sm.client, gen);
	}
	for (;;) {
		struct sockaddr_un sun;
		socklen_t sl = sizeof(sun);
		int u = lf__sys_accept4(l->rdv, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (u < 0 && errno == EINTR)
			continue;
		if (u < 0)
			break;
		if (lf__sys_getpeername(u, (void *)&sun, &sl) || lf__name_parse(&sun, sl, &fam, &c, &s) != LF_NAME_CLIENT)
			lf__sys_close(u);
		else if (nfound < max && lf__ep_equal(&c, client))
			found[nfound++] = u;
		else
			stash_put(l->chan, u, &c, gen);
	}
	return nfound;
}

/* Reads the hello from a claimed Unix connection and checks that the TCP
 * socket it carries is the client end of the accepted connection. */
static bool verify(int unx, int tcp)
{
	struct hello h;
	struct lf_ep a, b;
	int door;
	ssize_t n = recv_with_fd(unx, &h, sizeof(h), &door);
	bool ok = n == sizeof(h) && h.magic == HELLO_MAGIC && door >= 0;

	ok = ok && sock_ep(door, false, &a) && sock_ep(tcp, true, &b) && lf__ep_equal(&a, &b);
	ok = ok && sock_ep(door, true, &a) && sock_ep(tcp, false, &b) && lf__ep_equal(&a, &b);
	if (ok) {
		/* The doorbell carried no data: reset it rather than leave a
		 * TIME_WAIT on the client's port (bind(0) cannot reuse those,
		 * and bursts of connections would run out of ports). */
		struct linger lg = { 1, 0 };
		lf__sys_setsockopt(door, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	if (door >= 0)
		lf__sys_close(door);
	return ok;
}

void lf__accept_claim(int lfd, int newfd, int flags)
{
	struct lf_fd *f = lf__fd(lfd), *nf = lf__fd(newfd);
	struct lf_ep peer;
	int family, unx;

	if (!f || !nf)
		return;
	lf__fd_reset(newfd);
	if (!f->lst) {
		unsigned fl = atomic_load(&f->flags);
		if (!(fl & LF_F_OPTIN) && !lf__global_optin)
			return;
		/* A listener that reached us without listen() here (exec,
		 * SCM_RIGHTS): opt it in now. */
		if ((fl & LF_F_NOFAST) || lf__listen_optin(lfd) || !f->lst)
			return;
	}
	if (!sock_ep(newfd, true, &peer) || !lf__ep_is_loopback(&peer))
		return;
	family = f->lst->family;
	int cand[8], n;
	struct lf_listener *l = f->lst;
	lock(l);
	lf__listener_reserve(l, false);
	n = take(l, &peer, cand, 8);
	unlock(l);
	unx = -1;
	for (int i = 0; i < n; i++) {
		if (unx < 0 && verify(cand[i], newfd))
			unx = cand[i];
		else
			lf__sys_close(cand[i]);
	}
	if (unx < 0) {
		if (n)
			DEBUG("accept fd %d: %d hello(s) for port %u failed verification: plain TCP", newfd, n, peer.port);
		lf__listener_reserve(l, true);
		return;
	}
	carry_options(newfd, unx, f, nf);
	if (switch_fd(unx, newfd, family, flags & SOCK_NONBLOCK, flags & SOCK_CLOEXEC) < 0)
		lf__sys_close(unx);
	lf__listener_reserve(l, true);
}

bool lf__fast_endpoints(int fd, int *family, struct lf_ep *local, struct lf_ep *peer)
{
	struct sockaddr_un sun;
	socklen_t l = sizeof(sun);
	struct lf_ep a, b, c, s;
	int fam, cfam;

	if (lf__sys_getsockname(fd, (void *)&sun, &l) || sun.sun_family != AF_UNIX)
		return false;
	switch (lf__name_parse(&sun, l, &fam, &a, &b)) {
	case LF_NAME_CLIENT:
		*family = fam;
		*local = a;
		*peer = b;
		return true;
	case LF_NAME_LISTENER: /* the server end: its peer's name has both */
		l = sizeof(sun);
		if (lf__sys_getpeername(fd, (void *)&sun, &l) ||
		    lf__name_parse(&sun, l, &cfam, &c, &s) != LF_NAME_CLIENT)
			return false;
		*family = fam;
		*local = s;
		*peer = c;
		return true;
	default:
		return false;
	}
}
