/* The client side of the negotiation, and the switch both sides make.
 *
 * connect(fd, loopback:P) on an opted-in TCP socket:
 *  1. sock_diag names the listener the kernel would hand the connection to
 *     (its inode and owner). None: plain TCP.
 *  2. A Unix socket, bound to a name that says which TCP connection it is
 *     for (both endpoints; the TCP socket is bound to its ephemeral port
 *     first), connects to that listener's rendezvous. No rendezvous, or
 *     one not owned by the listener's uid (SO_PEERCRED): plain TCP. This
 *     queued connection is the hello; nothing else is sent.
 *  3. The TCP connect (the doorbell) runs in the application's own mode:
 *     blocking, interruptible by signals, bounded by SO_SNDTIMEO;
 *     non-blocking, returning EINPROGRESS at once. It crosses the host's
 *     firewall as any TCP connection does.
 *  4. When the handshake has completed (at once on loopback, in the
 *     common case), the Unix socket replaces the TCP socket under the
 *     application's fd. If it has not, the connect is pending: the
 *     application sees a TCP socket in progress, and the switch happens at
 *     its next call on the fd (poll, epoll_wait, getsockopt, read, write,
 *     connect ...) once the handshake is done; if the handshake fails, the
 *     fd stays the TCP socket with TCP's error.
 * The hello is queued before the SYN, so when the server accepts the TCP
 * connection its hello is already there: the server's outcome is fixed
 * before our connect returns, and it never waits for us (claim.c). The
 * server checks with sock_diag that our TCP socket is ours (so a socket
 * made under another uid goes plain): TCP_LINGER2 keeps the socket (and
 * its owner) visible for two minutes after we close it, should the server
 * accept late. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEBUG(...) do { if (lf__debug_on) lf__debug(__VA_ARGS__); } while (0)

/* ---- the switch */

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

/* Every Unix socket loopfast switches in was made (or accepted)
 * non-blocking, and nothing else is set on it: only a blocking caller
 * needs a change. */
static void set_nonblock(int fd, bool on)
{
	if (!on)
		lf__sys_fcntl(fd, F_SETFL, 0);
}

int lf__switch_fd(int unx, int fd, int family, const struct lf_fd *src, bool nonblock, bool cloexec,
		  enum lf_switch side)
{
	bool server = side == LF_SW_SERVER;
	struct lf_fd *f = lf__fd(fd);
	struct lf_epreg regs[LF_EPOLL_MAX];

	carry_options(fd, unx, src, f);
	/* The server's TCP socket goes with the claim's mark and a FIN, which
	 * TCP delivers after it (bell.c; the client then resets it). The
	 * client's doorbell too must end with a FIN, whatever linger the
	 * application set: a connection reset before it is accepted vanishes
	 * from the accept queue, with its hello. A linger is only ever on when
	 * set through us, or (an accepted socket's) inherited from a listener
	 * that had it when it was opted in (listener.c counts that as set). */
	struct linger lg = { 0, 0 };
	if (server)
		lf__bell_mark(fd);
	if (src->sockset & (1u << 2)) /* lf__carried[2] is SO_LINGER */
		lf__sys_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	set_nonblock(unx, nonblock);
	/* epoll registrations are on the file that goes away: move them. */
	memcpy(regs, f->ep, sizeof(regs));
	for (int i = 0; i < LF_EPOLL_MAX; i++)
		if (regs[i].epfd1)
			lf__sys_epoll_ctl(regs[i].epfd1 - 1, EPOLL_CTL_DEL, fd, NULL);
	/* The client keeps its TCP socket until the claim is seen (bell.c). */
	int bell = side == LF_SW_CLIENT ? lf__fd_dup_hidden(fd) : -1;
	if (lf__sys_dup3(unx, fd, cloexec ? O_CLOEXEC : 0) < 0) {
		if (bell >= 0)
			lf__sys_close(bell);
		return -errno;
	}
	lf__sys_close(unx);
	unsigned timeo = (f->sockset & 3u) /* lf__carried[0, 1]: SO_RCVTIMEO, SO_SNDTIMEO */ ? lf__fd_timeouts(fd) : 0;
	f->family = family;
	if (!f->spin_us) /* lf_set_spin before connect wins; an accepted socket inherits its listener's */
		f->spin_us = src->spin_us ? src->spin_us : lf__global_spin_us;
	f->spin_fail = f->spin_skip = 0;
	atomic_store(&f->flags, LF_F_FAST | (nonblock ? LF_F_NONBLOCK : 0) | timeo);
	for (int i = 0; i < LF_EPOLL_MAX; i++) {
		if (regs[i].epfd1 && lf__sys_epoll_ctl(regs[i].epfd1 - 1, EPOLL_CTL_ADD, fd, &regs[i].ev) == 0)
			lf__spin_epoll_member(regs[i].epfd1 - 1, fd, EPOLL_CTL_ADD);
	}
	if (bell >= 0)
		lf__bell_keep(fd, bell);
	struct sockaddr_un sun;
	socklen_t sl = sizeof(sun);
	if (!server && lf__shm_used && !lf__sys_getsockname(fd, (void *)&sun, &sl) && lf__name_asks_shm(&sun, sl))
		lf__shm_attach_client(fd);
	return 0;
}

/* ---- listeners known to have no usable rendezvous (this process, 1 s):
 * a client that talks to a plain server pays, per connection, neither
 * the sock_diag query nor the Unix socket, binds and connect of a hello.
 *
 * What is remembered is the listener, not the address: the inode of the
 * listening socket sock_diag found at the address, and why it went plain.
 * An entry is trusted as it is for a millisecond after it was last looked
 * at; past that, the next connect asks sock_diag again (one netlink round
 * trip) and, for "no rendezvous", whether the rendezvous exists now
 * (lf__diag_rendezvous: one system call that reaches nobody). So:
 *  - "no listener" (a refused connect) is never remembered: a client that
 *    retries until its server listens negotiates the first connect that
 *    finds the listener;
 *  - a server that restarts has a new listening socket, hence a new inode:
 *    what was remembered of the old one does not apply to it, and the
 *    first connection to the new listener negotiates (a pool reconnecting
 *    after a restart, a server gone from plain to loopfast). Only a new
 *    listener that exists within a millisecond of a look at the old one
 *    (no process restarts that fast) would wait for the millisecond's end;
 *  - a listener whose inode survives while the process serving it changes
 *    (socket activation, a listener handed to a program under loopfast)
 *    gains its rendezvous under the name it always had: it is used within
 *    a millisecond.
 * The millisecond keeps what the memory is for: a client that connects to
 * a plain server back to back asks sock_diag about once a millisecond, not
 * once a connection (about 3 us each, over a TCP connect's 12).
 * A "no rendezvous" found true again is kept for another second. A full
 * rendezvous and one not owned by the listener's uid are remembered for
 * the second only: they exist, so there is nothing to look for, and a
 * flood's end must be noticed. So is a port range with no port free for
 * bind (EADDRINUSE: the range is full of other connections' TIME_WAIT
 * entries, which only a plain connect can share): the ports' release is
 * noticed within the second. The window between the kernel's listen()
 * and the rendezvous's creation is closed where it opens (listener.c,
 * lf__listen_early). Races between threads on an entry can only cost a
 * plain TCP connection or a needless negotiation, and either is safe. */

#define NEG_SLOTS 16
#define NEG_TRUST_NS 1000000 /* an entry is trusted unchecked this long */
static struct {
	struct lf_ep dst;
	uint32_t inode;      /* the listener's */
	uint64_t until_ms;
	uint64_t checked_ns; /* last looked at (lf__sys_now_ns) */
	enum lf_event ev;    /* why it went plain: counted again for each connect */
} neg[NEG_SLOTS];

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The entry remembered for dst, or -1. */
static int neg_find(const struct lf_ep *dst)
{
	uint64_t now = now_ms();
	for (int i = 0; i < NEG_SLOTS; i++)
		if (neg[i].until_ms > now && lf__ep_equal(&neg[i].dst, dst))
			return i;
	return -1;
}

/* The reason remembered for dst if its entry was looked at under a
 * millisecond ago (no need to ask sock_diag), or -1. */
static int neg_fresh(const struct lf_ep *dst)
{
	int i = neg_find(dst);
	return i >= 0 && lf__sys_now_ns() - neg[i].checked_ns < NEG_TRUST_NS ? (int)neg[i].ev : -1;
}

/* The reason remembered for dst, now that sock_diag says the listener
 * there is lst, or -1: nothing remembered of this listener (a new one: the
 * entry is dropped), or a rendezvous has appeared since (dropped too). */
static int neg_cached(const struct lf_ep *dst, const struct lf_diag_sock *lst)
{
	int i = neg_find(dst);
	if (i < 0)
		return -1;
	neg[i].checked_ns = lf__sys_now_ns();
	if (neg[i].inode != lst->inode) {
		neg[i].until_ms = 0;
		return -1;
	}
	if (neg[i].ev == LF_EV_NO_RENDEZVOUS) {
		struct sockaddr_un rname;
		socklen_t rl = lf__name_listener(&rname, lst->family, lst->inode);
		if (lf__diag_rendezvous(&rname, rl) != 0) {
			neg[i].until_ms = 0;
			return -1;
		}
		neg[i].until_ms = now_ms() + 1000; /* true now: another second */
	}
	return (int)neg[i].ev;
}

static void neg_add(const struct lf_ep *dst, const struct lf_diag_sock *lst, enum lf_event ev)
{
	static unsigned next;
	int i = neg_find(dst);
	if (i < 0)
		i = (int)(__atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % NEG_SLOTS);
	neg[i].dst = *dst;
	neg[i].inode = lst->inode;
	neg[i].ev = ev;
	neg[i].checked_ns = lf__sys_now_ns();
	neg[i].until_ms = now_ms() + 1000;
}

/* ---- pending connects */

/* Connects in progress with a hello queued. The SYN already said so, so
 * they must end on the fast path or fail: never carry on as plain TCP. */
static int *pending_fds;
static int npending, cap_pending;
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;

static bool pending_add(int fd, int unx)
{
	struct lf_fd *f = lf__fd(fd);
	bool ok = true;

	pthread_mutex_lock(&pending_lock);
	if (npending == cap_pending) {
		int n = cap_pending ? cap_pending * 2 : 64, *p = realloc(pending_fds, (size_t)n * sizeof(*p));
		if (p) {
			pending_fds = p;
			cap_pending = n;
		}
	}
	if (npending < cap_pending)
		pending_fds[npending++] = fd;
	else
		ok = false;
	pthread_mutex_unlock(&pending_lock);
	if (!ok)
		return false;
	lf__fd_hide(unx, &f->pend);
	lf__fd_on_drop(LF_F_PENDING, lf__pending_drop);
	atomic_fetch_or(&f->flags, LF_F_PENDING);
	for (int i = 0; i < LF_EPOLL_MAX; i++)
		if (f->ep[i].epfd1 && lf__fd(f->ep[i].epfd1 - 1))
			lf__fd(f->ep[i].epfd1 - 1)->pending_members++;
	return true;
}

/* Takes fd off the pending list; returns its hidden Unix socket (or -1). */
static int pending_remove(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	int unx;

	if (!(atomic_fetch_and(&f->flags, ~LF_F_PENDING) & LF_F_PENDING))
		return -1;
	pthread_mutex_lock(&pending_lock);
	for (int i = 0; i < npending; i++)
		if (pending_fds[i] == fd)
			pending_fds[i--] = pending_fds[--npending];
	pthread_mutex_unlock(&pending_lock);
	for (int i = 0; i < LF_EPOLL_MAX; i++) {
		struct lf_fd *e = f->ep[i].epfd1 ? lf__fd(f->ep[i].epfd1 - 1) : NULL;
		if (e && e->pending_members > 0)
			e->pending_members--;
	}
	unx = f->pend;
	f->pend = -1;
	lf__fd_unhide(unx);
	return unx;
}

void lf__pending_drop(int fd)
{
	int unx = pending_remove(fd);
	if (unx >= 0)
		lf__sys_close(unx);
}

/* Where a TCP handshake stands, from kernel state: 1 it completed (the
 * socket is connected: the server's claim, a mark and a FIN, leaves it
 * so), 0 still in progress, -1 it failed (*err: TCP's error, which this
 * read consumed; a reset is never the claim). */
static int handshake(int fd, int timeout_ms, int *err)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss), el = sizeof(*err);
	int ev;

	*err = 0;
	/* Connected already (loopback's usual case): one call, not two. */
	if (lf__sys_getpeername(fd, (void *)&ss, &sl) == 0)
		return 1;
	sl = sizeof(ss);
	ev = lf__sys_poll1(fd, POLLOUT, timeout_ms);
	if (ev < 0) {
		*err = errno;
		return errno == EINTR ? -2 : -1;
	}
	if (ev == 0)
		return 0;
	if (lf__sys_getpeername(fd, (void *)&ss, &sl) == 0 || lf__bell_marked(fd))
		return 1;
	lf__sys_getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &el);
	return *err ? -1 : 0;
}

/* Ends the pending state of fd: switches it (h == 1) or leaves it the
 * failed TCP socket it is (h == -1, err: TCP's error for SO_ERROR). */
static int conclude(int fd, int h, int err)
{
	struct lf_fd *f = lf__fd(fd);
	int fdfl = lf__sys_fcntl(fd, F_GETFL, 0), fdd = lf__sys_fcntl(fd, F_GETFD, 0);
	int unx = pending_remove(fd);

	if (h > 0 && unx >= 0 && (lf__count(LF_EV_FAST_CLIENT), 1) &&
	    lf__switch_fd(unx, fd, f->family, f, fdfl >= 0 && (fdfl & O_NONBLOCK), fdd > 0 && (fdd & FD_CLOEXEC),
			  LF_SW_CLIENT) == 0) {
		atomic_fetch_or(&f->flags, LF_F_INPROGRESS);
		return 0;
	}
	if (unx >= 0)
		lf__sys_close(unx);
	f->pend_err = err;
	return 0;
}

int lf__finalize(int fd, bool wait)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f || !(atomic_load(&f->flags) & LF_F_PENDING))
		return 0;
	int err, h = handshake(fd, wait ? -1 : 0, &err);
	if (h == -2)
		return -1; /* EINTR: as the blocking call it stands for */
	if (h == 0) {
		errno = EAGAIN;
		return -1;
	}
	return conclude(fd, h, err);
}

void lf__finalize_epoll(int epfd)
{
	struct lf_fd *e = lf__fd(epfd);
	int fds[64], n;

	if (!e || e->pending_members <= 0)
		return;
	do { /* in batches: finalizing takes fds off the list */
		n = 0;
		pthread_mutex_lock(&pending_lock);
		for (int i = 0; i < npending && n < 64; i++) {
			struct lf_fd *f = lf__fd(pending_fds[i]);
			for (int k = 0; k < LF_EPOLL_MAX; k++)
				if (f->ep[k].epfd1 == epfd + 1 && lf__sys_poll1(pending_fds[i], POLLOUT, 0) > 0)
					fds[n++] = pending_fds[i];
		}
		pthread_mutex_unlock(&pending_lock);
		for (int i = 0; i < n; i++)
			lf__finalize(fds[i], false);
	} while (n == 64);
}

/* ---- connect */

static void to_loopback(struct lf_ep *ep, int family)
{
	ep->family = family;
	if (family == AF_INET)
		ep->addr.v4.s_addr = htonl(INADDR_LOOPBACK);
	else
		ep->addr.v6 = in6addr_loopback;
}

/* Keeps the client name unique when the kernel gives a live fast-path
 * connection's old port to a new one: a random base drawn per process
 * (again in a fork's child) plus a counter. Random, not the pid: the
 * names are visible to every user (/proc/net/unix), and a pid there
 * would tell them which process makes each connection. */
static atomic_ulong base;
void lf__connect_fork_child(void) { base = 0; } /* fork.c */

static unsigned long nonce(void)
{
	static atomic_ulong counter;
	unsigned long b = base;

	while (!b) {
		lf__fork_init();
		if (getrandom(&b, sizeof(b), GRND_NONBLOCK) != sizeof(b))
			b = (unsigned long)lf__sys_now_ns() * 0x9e3779b97f4a7c15ull ^ (unsigned long)getpid();
		base = b;
	}
	return b + atomic_fetch_add(&counter, 1);
}

/* Was fd non-blocking at its connect (e: what the connect said)? A
 * non-blocking TCP connect answers EINPROGRESS before its handshake can
 * have completed, and a blocking one waits for it, unless SO_SNDTIMEO
 * bounds the wait (then it too can answer EINPROGRESS): TCP's answer says
 * so without a system call when the application set no send timeout
 * through us. A blocking connect's 0 is not taken as proof (a connect
 * deferred by TCP_FASTOPEN_CONNECT also answers 0): asked. */
static bool was_nonblock(int fd, const struct lf_fd *f, int e)
{
	if (e == EINPROGRESS && !(f->sockset & 2u) /* lf__carried[1] is SO_SNDTIMEO */)
		return true;
	int fl = lf__sys_fcntl(fd, F_GETFL, 0);
	return fl >= 0 && (fl & O_NONBLOCK);
}

/* The connect goes on as plain TCP: count why (`loopfast status`), say it
 * under LOOPFAST_DEBUG, and remember the listener lst (when given) as one
 * without a usable rendezvous (no Unix connect per connect to a plain
 * server). */
static int plain(enum lf_event ev, const char *why, int fd, const struct lf_ep *dst, const struct lf_diag_sock *lst)
{
	int e = errno;

	lf__count(ev);
	if (why)
		DEBUG("connect fd %d to port %u: %s%s%s%s: plain TCP", fd, dst->port, why, e ? " (" : "",
		      e ? strerror(e) : "", e ? ")" : "");
	if (lst)
		neg_add(dst, lst, ev);
	errno = e;
	return 0;
}

/* A connect again while the first is in progress (LF_F_PENDING): TCP's
 * answers, EALREADY until the handshake is done, then 0 once. */
static int connect_again(int fd, struct lf_fd *f, const struct sockaddr *sa, socklen_t len, int *ret)
{
	/* Claimed, and then reset (a server's close under memory pressure)?
	 * The kernel's connect would empty the queue first. */
	int r = lf__bell_marked(fd) ? 0 : lf__sys_connect(fd, sa, len);
	int e = r ? errno : 0;

	if (r == 0 || e == EISCONN) {
		conclude(fd, 1, 0);
		/* This call is TCP's one 0 after EINPROGRESS: the next connect
		 * says EISCONN. */
		atomic_fetch_and(&f->flags, ~LF_F_INPROGRESS);
		*ret = 0;
		errno = 0;
		return 1;
	}
	if (e != EALREADY && e != EINPROGRESS && e != EINTR && e != EAGAIN)
		conclude(fd, -1, 0); /* failed: connect itself reports it */
	*ret = -1;
	errno = e;
	return 1;
}

/* Step 2, the hello: the Unix socket, connected to the listener's
 * rendezvous under a name that says which TCP connection it is for, or
 * -1 (counted and said: plain TCP). Our TCP endpoint must be known before
 * the hello is queued (a socket already connected keeps its port; its
 * connect then fails as the kernel says, and the server drops the hello). */
static int queue_hello(int fd, int family, struct lf_ep src, struct lf_ep dst, struct lf_diag_sock lst)
{
	struct sockaddr_un cname, rname;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct lf_ep tmp;
	int unx = lf__sys_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (unx < 0) {
		plain(LF_EV_FAILED, "no socket for the hello", fd, &dst, NULL);
		return -1;
	}
	if (!lf__diag_same_netns(unx)) { /* this thread is in another network namespace than the look-up's */
		lf__sys_close(unx);
		plain(LF_EV_FAILED, "the thread is in another network namespace", fd, &dst, NULL);
		return -1;
	}
	bool shm = lf__shm_wants(fd);
	if (!shm) /* a client that asks for the tier takes the server's memfd with its answer (shm.c) */
		lf__sys_no_rights(unx);
	if (src.port == 0) {
		socklen_t bl = lf__ep_to_sockaddr(&src, family, &ss);
		if (lf__sys_bind(fd, (void *)&ss, bl) || lf__sys_getsockname(fd, (void *)&ss, &sl) ||
		    !lf__ep_from_sockaddr(&tmp, (void *)&ss, sl)) {
			/* No port free for bind: every port of the range has a
			 * socket, TIME_WAIT ones included, which connect's own
			 * choice may share (another destination, tcp_tw_reuse)
			 * and no bind can (docs/connect.md, "A port range full
			 * of TIME_WAIT"). The failed search walked the whole
			 * range: remembered for the second, as a full
			 * rendezvous is, so that the connects after this one
			 * go plain without it. */
			bool full = errno == EADDRINUSE;
			lf__sys_close(unx);
			plain(LF_EV_FAILED, "bind to an ephemeral port", fd, &dst, full ? &lst : NULL);
			return -1;
		}
		src.port = tmp.port;
	}
	socklen_t cl = lf__name_client_tier(&cname, family, &src, &dst, nonce(), shm);
	socklen_t rl = lf__name_listener(&rname, lst.family, lst.inode);
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	int ev = -1;
	const char *why = NULL;
	if (lf__sys_bind(unx, (void *)&cname, cl))
		ev = LF_EV_FAILED, why = "bind the hello's name";
	else if (lf__sys_connect(unx, (void *)&rname, rl))
		ev = errno == EAGAIN ? LF_EV_BUSY : LF_EV_NO_RENDEZVOUS, why = "no rendezvous";
	else if (lf__sys_getsockopt(unx, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.uid != lst.uid)
		ev = LF_EV_NOT_OWNER, why = "the rendezvous is not the listener owner's";
	if (why) {
		lf__sys_close(unx); /* the server sees no hello: plain TCP */
		plain(ev, why, fd, &dst, ev != LF_EV_FAILED ? &lst : NULL);
		return -1;
	}
	/* The SYN says our hello is queued. */
	int mss = LF_HELLO_MSS;
	lf__sys_setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
	/* The server asks sock_diag who owns our TCP socket (whatever our
	 * uid): keep it a full socket for two minutes after we let go of it.
	 * Without this, an orphan's FIN_WAIT2 becomes a TIME_WAIT entry at
	 * once, which reports uid 0, and none at all when the host's
	 * TIME_WAIT table is full (tcp_max_tw_buckets): a client that wrote
	 * and closed before the accept would lose its request. */
	int linger2 = 120;
	lf__sys_setsockopt(fd, IPPROTO_TCP, TCP_LINGER2, &linger2, sizeof(linger2));
	return unx;
}

/* Steps 3 and 4: the doorbell, TCP's connect in the application's mode,
 * then the switch of fd to the hello's socket. *ret and errno: what
 * connect answers. */
static int ring(int fd, struct lf_fd *f, int family, int unx, const struct sockaddr *sa, socklen_t len, int *ret)
{
	int e;

	f->family = family;
	int r = lf__sys_connect(fd, sa, len);
	e = r ? errno : 0;
	if (r < 0 && (e == EINPROGRESS || e == EINTR || e == EAGAIN)) {
		/* On loopback the handshake has usually completed already (and
		 * the server may even have claimed the hello). */
		int err, h = handshake(fd, 0, &err);
		if (h > 0) {
			r = 0;
		} else if (h == 0 && pending_add(fd, unx)) {
			*ret = -1;
			errno = e;
			return 1;
		} else if (h < 0) {
			f->pend_err = err; /* what SO_ERROR would have said */
		}
		/* h == 0 here: no memory for the pending list. The connection
		 * goes on as TCP without its hello (the server drops a hello
		 * whose client has gone), with the small MSS of its SYN. */
	}
	if (r < 0) {
		/* Refused, unreachable, or failed at once: TCP's answer. */
		lf__sys_close(unx);
		*ret = -1;
		errno = e;
		return 1;
	}

	/* The switch. */
	bool nonblock = was_nonblock(fd, f, e);
	bool cloexec = lf__sys_fcntl(fd, F_GETFD, 0) & FD_CLOEXEC;
	lf__count(LF_EV_FAST_CLIENT);
	if (lf__switch_fd(unx, fd, family, f, nonblock, cloexec, LF_SW_CLIENT) < 0) {
		/* dup3 cannot fail for valid fds; if it did, the connection is
		 * unusable on both paths: report it as reset. */
		lf__sys_close(unx);
		*ret = -1;
		errno = ECONNRESET;
		return 1;
	}
	if (e == EINPROGRESS || e == EINTR || e == EAGAIN) {
		/* Answer as TCP did: the connection completes "in the
		 * background", a second connect returns 0 once. */
		atomic_fetch_or(&f->flags, LF_F_INPROGRESS);
		*ret = -1;
		errno = e;
		return 1;
	}
	*ret = 0;
	errno = 0;
	return 1;
}

/* 1 when the connect was made here (*ret and errno: its answer), 0 when
 * the caller makes the kernel's plain connect. */
int lf__connect(int fd, const struct sockaddr *sa, socklen_t len, int *ret)
{
	struct lf_fd *f = lf__fd(fd);
	struct lf_diag_sock lst;
	struct lf_ep dst, src;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int family, unx;

	if (!f)
		return 0;
	unsigned fl = atomic_load(&f->flags);
	if (fl & LF_F_PENDING)
		return connect_again(fd, f, sa, len, ret);
	if (!(fl & LF_F_OPTIN))
		return 0;
	atomic_fetch_and(&f->flags, ~LF_F_OPTIN);
	if (!lf__ep_from_sockaddr(&dst, sa, len))
		return 0;
	if (!lf__ep_is_loopback(&dst))
		return plain(LF_EV_NOT_LOOPBACK, NULL, fd, &dst, NULL);
	if (lf__excluded(&dst)) { /* LOOPFAST_EXCLUDE: the operator's opt-out */
		DEBUG("connect fd %d to port %u: excluded (LOOPFAST_EXCLUDE): plain TCP", fd, dst.port);
		return plain(LF_EV_EXCLUDED, NULL, fd, &dst, NULL);
	}
	int cached = neg_fresh(&dst);
	if (cached >= 0) /* counted under the reason it was remembered for */
		return plain((enum lf_event)cached, NULL, fd, &dst, NULL);
	if (!(fl & LF_F_TCP) && !lf__sys_tcp_family(fd, &family))
		return 0;
	if (lf__sys_getsockname(fd, (void *)&ss, &sl) || !lf__ep_from_sockaddr(&src, (void *)&ss, sl))
		return 0;
	family = ss.ss_family; /* the socket's domain, as SO_DOMAIN says (src.family is AF_INET for a v4-mapped address) */
	if (lf__ep_is_any(&src))
		to_loopback(&src, dst.family);

	/* The server vouches for a hello only if its sender owns the TCP
	 * socket: one made before a credential change (root, then a service
	 * account), or by another process, is not ours to announce. */
	struct stat st;
	if (fstat(fd, &st) || st.st_uid != geteuid())
		return plain(LF_EV_FAILED, "the socket is another uid's", fd, &dst, NULL);

	/* 1. The listener that will get the connection. None (the connect
	 * will be refused, or the server is not listening yet): plain TCP,
	 * and nothing remembered, so that the connect that finds it
	 * negotiates. A listener that appears between this look-up and our
	 * SYN gets a plain TCP connection: nothing can be done about that
	 * (the hello must precede the SYN, and a connection cannot be taken
	 * back); the window runs from this look-up to the real connect. */
	if (lf__diag_listener(&dst, &src, &lst) < 0)
		return plain(LF_EV_NO_LISTENER, "no listener", fd, &dst, NULL);
	if (!lf__diag_same_netns(fd))
		return plain(LF_EV_FAILED, "the socket is in another network namespace", fd, &dst, NULL);
	if ((cached = neg_cached(&dst, &lst)) >= 0)
		return plain((enum lf_event)cached, NULL, fd, &dst, NULL);

	/* 2. The hello; 3. the doorbell; 4. the switch. */
	if ((unx = queue_hello(fd, family, src, dst, lst)) < 0)
		return 0;
	return ring(fd, f, family, unx, sa, len, ret);
}

bool lf__fast_endpoints(int fd, int *family, struct lf_ep *local, struct lf_ep *peer)
{
	struct sockaddr_un sun;
	socklen_t l = sizeof(sun);
	struct lf_ep a, b;
	unsigned long ino;
	int fam;

	if (lf__sys_getsockname(fd, (void *)&sun, &l) || sun.sun_family != AF_UNIX)
		return false;
	switch (lf__name_parse(&sun, l, &ino, &fam, &a, &b)) {
	case LF_NAME_CLIENT:
		*family = fam;
		*local = a;
		*peer = b;
		return true;
	case LF_NAME_LISTENER: { /* the server end: its peer's name has both */
		int cfam;
		l = sizeof(sun);
		if (lf__sys_getpeername(fd, (void *)&sun, &l) ||
		    lf__name_parse(&sun, l, &ino, &cfam, &b, &a) != LF_NAME_CLIENT)
			return false;
		*family = fam; /* the listener's: an accepted socket has its family */
		*local = a;
		*peer = b;
		return true;
	}
	default:
		return false;
	}
}
