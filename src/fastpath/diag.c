/* sock_diag lookups: which TCP listener the kernel would pick for a
 * connection, and who owns a TCP socket. Unprivileged, one netlink round
 * trip each: an exact lookup (no dump), answered by the kernel inside the
 * sendto, so the receive never waits (MSG_DONTWAIT: a reply that is not
 * there is an error, never a hang).
 *
 * The netlink socket is kept, hidden, for the life of the process. A
 * program may close it behind our back (close_range, a raw close) and reuse
 * the number: before each use its identity is checked (a netlink socket's
 * port id is unique), so loopfast never reads from a socket that is not
 * its own. Every call here is a raw system call: the libc names would bind
 * to loopfast's own interposed wrappers.
 *
 * The same lock and the same care keep the probe that asks whether a
 * rendezvous exists (lf__diag_rendezvous). */
#include "fdtab.h"
#include "process.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int nl_fd = -1;      /* hidden; lf__fd_relocate keeps it current */
static uint32_t nl_portid;  /* its identity */
static uint32_t nl_seq;     /* the last query's sequence number (under nl_lock) */
static uint64_t nl_netns;   /* the network namespace it looks at (SO_NETNS_COOKIE; 0: unknown) */
static int probe_fd = -1;   /* hidden, as nl_fd */
static ino_t probe_ino;     /* its identity */
static pthread_mutex_t nl_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t portid_of(int fd)
{
	struct sockaddr_nl a;
	socklen_t l = sizeof(a);

	if (lf__sys_getsockname(fd, (struct sockaddr *)&a, &l) || l < sizeof(a) || a.nl_family != AF_NETLINK)
		return 0;
	return a.nl_pid;
}

/* fork (fork.c): the lock is held across it (a child must not inherit it taken by
 * a thread that does not exist there), and the child gets a netlink socket
 * of its own on the same number (two processes on one socket share its
 * port id and could read each other's answers; made here, while the
 * child's descriptors are those of the parent, so that a worker that
 * reaches its limit later still has it). Only a number that still holds
 * our socket is touched: the application may have closed it and reused it. */
void lf__diag_fork_prepare(void) { pthread_mutex_lock(&nl_lock); }
void lf__diag_fork_parent(void) { pthread_mutex_unlock(&nl_lock); }

void lf__diag_fork_child(void)
{
	struct sockaddr_nl me = { .nl_family = AF_NETLINK };
	uint32_t id = 0;
	int fd = -1;

	pthread_mutex_unlock(&nl_lock);
	if (nl_fd < 0)
		return;
	if (!nl_portid || portid_of(nl_fd) != nl_portid) { /* the number is someone else's */
		lf__fd_unhide(nl_fd);
		nl_fd = -1;
		nl_portid = 0;
		return;
	}
	fd = lf__sys_socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd >= 0 && lf__sys_bind(fd, (struct sockaddr *)&me, sizeof(me)) == 0 && (id = portid_of(fd)) &&
	    lf__sys_dup3(fd, nl_fd, O_CLOEXEC) == nl_fd) {
		lf__sys_close(fd);
		nl_portid = id;
		return;
	}
	if (fd >= 0)
		lf__sys_close(fd);
	lf__fd_unhide(nl_fd);
	lf__sys_close(nl_fd);
	nl_fd = -1;
	nl_portid = 0;
}

/* Every user of nl_lock takes it here, so that the fork handlers are in
 * place before the lock is first held. */
static void nl_take(void)
{
	lf__fork_init();
	pthread_mutex_lock(&nl_lock);
}

/* Our netlink socket, checked; a new one if it was taken from us. */
static int nl_socket(void)
{
	if (nl_fd >= 0 && nl_portid && portid_of(nl_fd) == nl_portid)
		return nl_fd;
	if (nl_fd >= 0 && nl_portid && portid_of(nl_fd) == 0) {
		/* Not a netlink socket any more: the number is someone else's. */
		lf__fd_unhide(nl_fd);
	} else if (nl_fd >= 0) {
		lf__fd_unhide(nl_fd);
		lf__sys_close(nl_fd);
	}
	nl_fd = -1;
	int fd = lf__sys_socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	struct sockaddr_nl me = { .nl_family = AF_NETLINK };
	if (fd < 0)
		return -1;
	/* Bind now so that the port id (our identity) is fixed. */
	if (lf__sys_bind(fd, (struct sockaddr *)&me, sizeof(me)) || !(nl_portid = portid_of(fd))) {
		lf__sys_close(fd);
		return -1;
	}
	socklen_t cl = sizeof(nl_netns);
	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &nl_netns, &cl))
		nl_netns = 0;
	lf__fd_hide(fd, &nl_fd);
	return nl_fd;
}

static void fill(struct lf_diag_sock *out, const struct inet_diag_msg *m)
{
	struct sockaddr_storage ss = { .ss_family = m->idiag_family };

	memset(out, 0, sizeof(*out));
	if (m->idiag_family == AF_INET)
		memcpy(&((struct sockaddr_in *)&ss)->sin_addr, m->id.idiag_src, 4);
	else
		memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, m->id.idiag_src, 16);
	lf__ep_from_sockaddr(&out->ep, (struct sockaddr *)&ss, sizeof(ss));
	out->ep.port = ntohs(m->id.idiag_sport);
	out->family = m->idiag_family;
	out->uid = m->idiag_uid;
	out->inode = m->idiag_inode;
	out->state = m->idiag_state;
}

static void put_addr(__be32 *dst, const struct lf_ep *ep, int family)
{
	memset(dst, 0, 16);
	if (family == AF_INET) {
		memcpy(dst, &ep->addr.v4, 4);
	} else if (ep->family == AF_INET) { /* v4-mapped */
		((uint8_t *)dst)[10] = ((uint8_t *)dst)[11] = 0xff;
		memcpy((uint8_t *)dst + 12, &ep->addr.v4, 4);
	} else {
		memcpy(dst, &ep->addr.v6, 16);
	}
}

/* One exact lookup in the table of `family`: the socket whose local end is
 * `local` and remote end `remote` (the kernel looks up established sockets
 * first, then the listener it would hand such a connection to). */
static int lookup(int family, const struct lf_ep *local, const struct lf_ep *remote, struct lf_diag_sock *out)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST,
			 .nlmsg_seq = 1 },
		.req = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0u },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	long buf[1024];
	int r = -ENOENT;

	msg.req.id.idiag_sport = htons(local->port);
	msg.req.id.idiag_dport = htons(remote->port);
	put_addr(msg.req.id.idiag_src, local, family);
	put_addr(msg.req.id.idiag_dst, remote, family);
	msg.req.id.idiag_cookie[0] = msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

	nl_take();
	msg.nlh.nlmsg_seq = ++nl_seq;
	int nl = nl_socket();
	if (nl < 0) {
		r = -errno;
	} else if (lf__sys_sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		r = -errno;
	} else {
		/* One reply, already queued: an exact lookup is answered inside
		 * the sendto. A reply to an older query (one that failed half
		 * way) has another sequence number and is skipped. */
		for (int tries = 0; tries < 4; tries++) {
			ssize_t len = lf__sys_recvfrom(nl, buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL);
			if (len < 0) {
				r = -errno;
				break;
			}
			struct nlmsghdr *h = (void *)buf;
			if (!NLMSG_OK(h, (size_t)len) || h->nlmsg_seq != msg.nlh.nlmsg_seq)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				r = e->error ? e->error : -ENOENT;
			} else if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
				   h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
				fill(out, NLMSG_DATA(h));
				r = 0;
			}
			break;
		}
	}
	pthread_mutex_unlock(&nl_lock);
	return r;
}

#ifndef TCP_BOUND_INACTIVE
#define TCP_BOUND_INACTIVE 13 /* Linux 6.7: bound, neither listening nor connecting */
#endif

/* One dump of family's TCP sockets that are bound and inactive: 1 when
 * one is at ep and owned by uid. An older kernel dumps none. */
static int bound_in(int family, const struct lf_ep *ep, uint32_t uid)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.req = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
			 .idiag_states = 1u << TCP_BOUND_INACTIVE },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	long buf[1024]; /* parts of a dump are as long as the reads that take them */
	int r = 0;

	nl_take();
	msg.nlh.nlmsg_seq = ++nl_seq;
	int nl = nl_socket();
	if (nl < 0 || lf__sys_sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		r = -errno;
		goto out;
	}
	/* Each part of a dump is made by the read of the one before: all
	 * are there to read without waiting, up to NLMSG_DONE. Replies to
	 * an older query are skipped. */
	for (;;) {
		ssize_t len = lf__sys_recvfrom(nl, buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL);
		if (len < 0) {
			r = -errno;
			goto out;
		}
		for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_seq != msg.nlh.nlmsg_seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE)
				goto out;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				r = e->error ? e->error : r;
				goto out;
			}
			struct lf_diag_sock d;
			if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
			    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
				fill(&d, NLMSG_DATA(h));
				if (d.state == TCP_CLOSE && d.uid == uid && lf__ep_equal(&d.ep, ep))
					r = 1;
			}
		}
	}
out:
	pthread_mutex_unlock(&nl_lock);
	return r;
}

int lf__diag_bound(const struct lf_ep *ep, uint32_t uid)
{
	/* A v4 endpoint may be a dual-stack socket's (v4-mapped). */
	int r = bound_in(ep->family, ep, uid);

	return r == 0 && ep->family == AF_INET ? bound_in(AF_INET6, ep, uid) : r;
}

bool lf__diag_same_netns(int fd)
{
	uint64_t c = 0;
	socklen_t cl = sizeof(c);

	if (!nl_netns)
		return true; /* a kernel without the cookie (before Linux 5.14) */
	return lf__sys_getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &c, &cl) == 0 && c == nl_netns;
}

/* Makes the netlink socket now, for a listener: every hello its accepts
 * take is checked through it, and a server may reach its descriptor limit
 * before its first accept (then no socket could be made, and no hello be
 * vouched for). Kept for the life of the process, as on first use. */
void lf__diag_ready(void)
{
	nl_take();
	(void)nl_socket();
	pthread_mutex_unlock(&nl_lock);
}

int lf__diag_listener(const struct lf_ep *dst, const struct lf_ep *from, struct lf_diag_sock *out)
{
	int r = lookup(dst->family, dst, from, out);

	if (r == 0 && out->state != TCP_LISTEN)
		return -ENOENT; /* an established socket with that 4-tuple: not ours to ask */
	return r;
}

int lf__diag_socket(const struct lf_ep *local, const struct lf_ep *remote, struct lf_diag_sock *out)
{
	int r = lookup(local->family, local, remote, out);

	if (r == 0 && out->state == TCP_LISTEN)
		return -ENOENT; /* no such connection: the lookup fell through to a listener */
	return r;
}

/* Our probe socket, checked; a new one if it was taken from us. One end of
 * a Unix stream socketpair (the other end closed at once): a connected
 * stream socket, non-blocking. */
static int probe_socket(void)
{
	struct stat st;
	int sv[2];

	if (probe_fd >= 0 && fstat(probe_fd, &st) == 0 && st.st_ino == probe_ino)
		return probe_fd;
	if (probe_fd >= 0) /* not ours any more: the number is someone else's */
		lf__fd_unhide(probe_fd);
	probe_fd = -1;
	if (lf__sys_socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv))
		return -1;
	lf__sys_close(sv[1]);
	if (fstat(sv[0], &st)) {
		lf__sys_close(sv[0]);
		return -1;
	}
	probe_ino = st.st_ino;
	lf__fd_hide(sv[0], &probe_fd);
	return probe_fd;
}

/* Whether anything listens on the abstract name: 1 yes, 0 no, -errno when
 * the probe could not ask. connect() on a Unix stream socket that is
 * already connected looks the name up before it looks at its own state:
 * ECONNREFUSED when no socket has the name, EISCONN when one listens
 * there (EAGAIN: one whose backlog is full). No connection is made, so the
 * rendezvous's owner sees nothing: one system call, and no hello that the
 * server would have to take and drop. */
int lf__diag_rendezvous(const struct sockaddr_un *name, socklen_t len)
{
	int r;

	nl_take();
	int p = probe_socket();
	if (p < 0)
		r = -errno;
	else if (lf__sys_connect(p, (const struct sockaddr *)name, len) == 0)
		r = 1; /* cannot happen on a connected socket: say yes, negotiation decides */
	else
		r = errno == ECONNREFUSED ? 0 : errno == EISCONN || errno == EAGAIN ? 1 : -errno;
	pthread_mutex_unlock(&nl_lock);
	return r;
}
