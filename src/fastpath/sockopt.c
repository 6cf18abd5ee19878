/* Socket options on fast-path sockets: every option has a defined answer.
 *
 * A fast-path socket is a Unix stream. It refuses every option above
 * SOL_SOCKET and answers a few SOL_SOCKET ones differently from TCP, so
 * each option is answered from one of three places (the table below;
 * docs/sockopts.md says the same for people):
 *
 * - the Unix socket itself, for the generic SOL_SOCKET options it handles
 *   as TCP does (timeouts, buffers, linger, ...): the wrappers in
 *   interpose.c pass them straight through;
 * - TCP itself: a real TCP connection on loopback, "the reference", one per
 *   address family, made the first time a process needs it. A get of an
 *   option the application has not set is asked of the reference; a set is
 *   made on the reference, so that TCP validates and normalises the value
 *   exactly as it would for this connection (and gives TCP's error for a
 *   bad value or an unknown number); what TCP reads back is recorded for
 *   this fd, and the reference gets its own value back. No TCP default is
 *   written down here: IP_OPTIONS reads empty, TCP_CONGESTION reads the
 *   host's default and TCP_MAXSEG loopback's MSS because TCP says so;
 * - an error where TCP's behaviour cannot be kept (kernel TLS, TCP-MD5 and
 *   TCP-AO signatures, repair mode, receive timestamps, zero-copy, TCP_INQ):
 *   the error a program already handles, the kernel's answer when that
 *   feature is missing. Set before connect or listen, such an option keeps
 *   the socket on plain TCP instead.
 *
 * The reference costs each process that asks two hidden descriptors per
 * family and one idle loopback connection, reset (no TIME_WAIT) at exit. */
#include "internal.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Option numbers newer than some build machines' headers. */
#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SO_INQ
#define SO_INQ 84
#endif
#ifndef IP_LOCAL_PORT_RANGE
#define IP_LOCAL_PORT_RANGE 51
#endif
#ifndef IP_PROTOCOL
#define IP_PROTOCOL 52
#endif
#ifndef IPV6_FLOWINFO
#define IPV6_FLOWINFO 11
#endif
#ifndef IPV6_USE_MIN_MTU
#define IPV6_USE_MIN_MTU 63
#endif
#ifndef TCP_AO_ADD_KEY
#define TCP_AO_ADD_KEY 38
#define TCP_AO_REPAIR 42
#endif
#ifndef TCP_DELACK_MAX_US
#define TCP_DELACK_MAX_US 46
#endif
#ifndef SOL_TLS
#define SOL_TLS 282
#endif

enum how {
	UNIX,     /* SOL_SOCKET: the Unix socket answers as TCP would */
	FAMILY,   /* SO_DOMAIN, SO_PROTOCOL: fixed up after the Unix socket answered */
	TCP,      /* TCP's own answer (the reference; a set is recorded) */
	NOREC,    /* TCP's own answer, never recorded: it follows the connection, not the set */
	ERR_SET,  /* a set fails with err; a get is TCP's own */
	ERR_ON,   /* a set that turns it on fails with err; off is TCP's own */
	ERR_GET,  /* a get fails with err */
	INFO,     /* TCP_INFO: the state follows the connection */
	CCINFO,   /* TCP_CC_INFO: TCP's size, nothing known */
	LPORT,    /* IP_PROTOCOL: TCP answers its local port */
	PEERNAME, /* SO_PEERNAME: the TCP peer's address */
};

struct row {
	short level, first, last; /* options first..last */
	unsigned char how;
	unsigned char err;
};

/* Every option this kernel (6.18) knows at SOL_SOCKET, IPPROTO_IP,
 * IPPROTO_IPV6 and IPPROTO_TCP, and SOL_TLS. Numbers in no row are unknown
 * to loopfast: TCP's error, and an honest EOPNOTSUPP if a newer TCP
 * accepts them (their effect could not be kept). */
static const struct row rows[] = {
	{ SOL_SOCKET, SO_DEBUG, SO_BSDCOMPAT, UNIX, 0 },
	{ SOL_SOCKET, SO_REUSEPORT, SO_PEERCRED, TCP, 0 }, /* Unix: own rules, real credentials */
	{ SOL_SOCKET, SO_RCVLOWAT, SO_DETACH_FILTER, UNIX, 0 },
	{ SOL_SOCKET, SO_PEERNAME, SO_PEERNAME, PEERNAME, 0 },
	{ SOL_SOCKET, SO_TIMESTAMP_OLD, SO_TIMESTAMP_OLD, ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_ACCEPTCONN, SO_ACCEPTCONN, UNIX, 0 },
	{ SOL_SOCKET, SO_PEERSEC, SO_PEERSEC, TCP, 0 }, /* Unix: the peer's LSM label */
	{ SOL_SOCKET, SO_SNDBUFFORCE, SO_RCVBUFFORCE, UNIX, 0 },
	{ SOL_SOCKET, SO_PASSSEC, SO_PASSSEC, TCP, 0 },
	{ SOL_SOCKET, SO_TIMESTAMPNS_OLD, SO_TIMESTAMPNS_OLD, ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_MARK, SO_MARK, UNIX, 0 },
	{ SOL_SOCKET, SO_TIMESTAMPING_OLD, SO_TIMESTAMPING_OLD, ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_PROTOCOL, SO_DOMAIN, FAMILY, 0 },
	{ SOL_SOCKET, SO_RXQ_OVFL, SO_CNX_ADVICE, UNIX, 0 },
	{ SOL_SOCKET, SO_MEMINFO, SO_COOKIE, UNIX, 0 },
	{ SOL_SOCKET, SO_PEERGROUPS, SO_PEERGROUPS, TCP, 0 },
	{ SOL_SOCKET, SO_ZEROCOPY, SO_ZEROCOPY, ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_TXTIME, SO_BINDTOIFINDEX, UNIX, 0 },
	{ SOL_SOCKET, SO_TIMESTAMP_NEW, SO_TIMESTAMPING_NEW, ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_RCVTIMEO_NEW, SO_SNDTIMEO_NEW, UNIX, 0 },
	{ SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, SO_DETACH_REUSEPORT_BPF, TCP, 0 },
	{ SOL_SOCKET, SO_PREFER_BUSY_POLL, SO_RESERVE_MEM, UNIX, 0 },
	{ SOL_SOCKET, SO_TXREHASH, SO_TXREHASH, TCP, 0 },
	{ SOL_SOCKET, SO_RCVMARK, SO_RCVMARK, UNIX, 0 },
	{ SOL_SOCKET, SO_PASSPIDFD, SO_INQ, TCP, 0 }, /* PEERPIDFD, DEVMEM_*, RCVPRIORITY, PASSRIGHTS */
	{ IPPROTO_IP, IP_TOS, IP_RECVERR_RFC4884, TCP, 0 },
	{ IPPROTO_IP, IP_MULTICAST_IF, IP_LOCAL_PORT_RANGE, TCP, 0 },
	{ IPPROTO_IP, IP_PROTOCOL, IP_PROTOCOL, LPORT, 0 },
	{ IPPROTO_IPV6, IPV6_ADDRFORM, IPV6_FLOWINFO, TCP, 0 },
	{ IPPROTO_IPV6, IPV6_UNICAST_HOPS, IPV6_HDRINCL, TCP, 0 },
	{ IPPROTO_IPV6, MCAST_JOIN_GROUP, IPV6_USE_MIN_MTU, TCP, 0 },
	{ IPPROTO_IPV6, IPV6_RECVTCLASS, IPV6_TCLASS, TCP, 0 },
	{ IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, IPV6_AUTOFLOWLABEL, TCP, 0 },
	{ IPPROTO_IPV6, IPV6_ADDR_PREFERENCES, IPV6_FREEBIND, TCP, 0 },
	{ IPPROTO_TCP, TCP_NODELAY, TCP_NODELAY, TCP, 0 },
	{ IPPROTO_TCP, TCP_MAXSEG, TCP_MAXSEG, NOREC, 0 },
	{ IPPROTO_TCP, TCP_CORK, TCP_WINDOW_CLAMP, TCP, 0 },
	{ IPPROTO_TCP, TCP_INFO, TCP_INFO, INFO, 0 },
	{ IPPROTO_TCP, TCP_QUICKACK, TCP_CONGESTION, TCP, 0 },
	{ IPPROTO_TCP, TCP_MD5SIG, TCP_MD5SIG, ERR_SET, ENOPROTOOPT },
	{ IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS, TCP_USER_TIMEOUT, TCP, 0 },
	{ IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR, ERR_ON, EPERM },
	{ IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_REPAIR_OPTIONS, TCP, 0 }, /* never in repair: TCP's refusal */
	{ IPPROTO_TCP, TCP_FASTOPEN, TCP_NOTSENT_LOWAT, TCP, 0 },
	{ IPPROTO_TCP, TCP_CC_INFO, TCP_CC_INFO, CCINFO, 0 },
	{ IPPROTO_TCP, TCP_SAVE_SYN, TCP_SAVE_SYN, TCP, 0 },
	{ IPPROTO_TCP, TCP_SAVED_SYN, TCP_SAVED_SYN, TCP, 0 },
	{ IPPROTO_TCP, TCP_REPAIR_WINDOW, TCP_REPAIR_WINDOW, TCP, 0 },
	{ IPPROTO_TCP, TCP_FASTOPEN_CONNECT, TCP_FASTOPEN_CONNECT, TCP, 0 }, /* connect sends no SYN */
	{ IPPROTO_TCP, TCP_ULP, TCP_ULP, ERR_SET, ENOENT },
	{ IPPROTO_TCP, TCP_MD5SIG_EXT, TCP_MD5SIG_EXT, ERR_SET, ENOPROTOOPT },
	{ IPPROTO_TCP, TCP_FASTOPEN_KEY, TCP_FASTOPEN_NO_COOKIE, TCP, 0 },
	{ IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE, TCP_ZEROCOPY_RECEIVE, ERR_GET, EOPNOTSUPP },
	{ IPPROTO_TCP, TCP_INQ, TCP_INQ, ERR_ON, EOPNOTSUPP },
	{ IPPROTO_TCP, TCP_TX_DELAY, TCP_TX_DELAY, TCP, 0 },
	{ IPPROTO_TCP, TCP_AO_ADD_KEY, TCP_AO_REPAIR, ERR_SET, ENOPROTOOPT },
	{ IPPROTO_TCP, TCP_AO_REPAIR + 1, TCP_DELACK_MAX_US, TCP, 0 }, /* IS_MPTCP, RTO_MAX_MS, RTO_MIN_US */
	{ SOL_TLS, 1, 5, TCP, 0 }, /* TCP without the tls ULP: its error */
};

static const struct row *find(int level, int opt)
{
	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].level == level && opt >= rows[i].first && opt <= rows[i].last)
			return &rows[i];
	return NULL;
}

bool lf__sopt_claimed(int level, int opt)
{
	const struct row *r = find(level, opt);

	return !r || (r->how != UNIX && r->how != FAMILY);
}

/* ---- the reference: a TCP connection on loopback, per family */

struct ref {
	int c, s;      /* client end, server end (each asked for its side) */
	ino_t ino[2];  /* of c and s: their numbers may be reused behind our back (close_range) */
	bool up;
};

static struct ref refs[2];
static pthread_mutex_t ref_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork (fork.c): the lock is held across it. */
void lf__sopt_fork_prepare(void) { pthread_mutex_lock(&ref_lock); }
void lf__sopt_fork_parent(void) { pthread_mutex_unlock(&ref_lock); }

/* Retires a reference: closes the ends that are still ours (a program
 * that closed every descriptor may have reused their numbers). */
static void ref_drop(struct ref *r)
{
	int fds[2] = { r->c, r->s };
	struct stat st;

	for (int k = 0; k < 2 && r->up; k++) {
		if (fstat(fds[k], &st) || st.st_ino != r->ino[k])
			continue;
		lf__fd_unhide(fds[k]);
		lf__sys_close(fds[k]);
	}
	r->up = false;
}

/* A child makes its own references: sets on a shared one would race. */
void lf__sopt_fork_child(void)
{
	ref_drop(&refs[0]);
	ref_drop(&refs[1]);
	pthread_mutex_unlock(&ref_lock);
}

static socklen_t loopback_any_port(int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (void *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		return sizeof(*a);
	}
	struct sockaddr_in *a = (void *)ss;
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sizeof(*a);
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
					 : ((const struct sockaddr_in *)ss)->sin_port;
}

/* Makes the reference with raw system calls (never opted in). The accepted
 * end must be the one we connected: another uid could race us to the
 * listener, and its connection would only ever be closed. 0 or -errno. */
static int ref_open(int family, struct ref *r)
{
	struct sockaddr_storage ss, a, b;
	socklen_t sl = loopback_any_port(family, &ss), al, bl;
	int l = lf__sys_socket(family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP), c = -1, s = -1, e = 0;
	struct linger rst = { 1, 0 };
	struct stat st;

	if (l < 0)
		return -errno;
	if (lf__sys_bind(l, (void *)&ss, sl) || lf__sys_listen(l, 4) || lf__sys_getsockname(l, (void *)&ss, &sl) ||
	    (c = lf__sys_socket(family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP)) < 0 ||
	    lf__sys_connect(c, (void *)&ss, sl))
		e = errno;
	for (int tries = 0; !e && s < 0 && tries < 4; tries++) {
		al = sizeof(a), bl = sizeof(b);
		if ((s = lf__sys_accept4(l, (void *)&a, &al, SOCK_CLOEXEC)) < 0)
			e = errno;
		else if (lf__sys_getsockname(c, (void *)&b, &bl) || port_of(&a) != port_of(&b)) {
			lf__sys_close(s);
			s = -1;
		}
	}
	lf__sys_close(l);
	if (!e && s < 0)
		e = EADDRINUSE;
	if (!e && fstat(c, &st))
		e = errno;
	r->ino[0] = st.st_ino;
	if (!e && fstat(s, &st))
		e = errno;
	r->ino[1] = st.st_ino;
	if (e) {
		lf__sys_close(c);
		lf__sys_close(s);
		return -e;
	}
	lf__sys_setsockopt(c, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
	lf__sys_setsockopt(s, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
	r->c = c;
	r->s = s;
	lf__fd_hide(c, &r->c); /* their numbers follow a dup2 onto them */
	lf__fd_hide(s, &r->s);
	r->up = true;
	return 0;
}

/* The reference of a family (with ref_lock held): its client end, or its
 * server end for the accepted side of a fast-path connection (TCP answers
 * some options differently there: the MSS, the multicast TTL taken from
 * the SYN, V6ONLY inherited from a listener bound to ::1), or -errno. */
static int ref_get(int family, bool server)
{
	struct ref *r = &refs[family == AF_INET6];
	struct stat st;

	lf__fork_init();
	if (r->up && (fstat(server ? r->s : r->c, &st) || st.st_ino != r->ino[server]))
		ref_drop(r); /* closed behind our back */
	if (!r->up) {
		int e = ref_open(family, r);
		if (e < 0)
			return e;
	}
	return server ? r->s : r->c;
}

/* ---- what the application set, as TCP read it back */

#define REC_HEAD 5 /* int16 level, int16 opt, uint8 len */

/* The offset of fd's record of an option in f->opt, or -1. */
static int rec_find(const struct lf_fd *f, int level, int opt)
{
	for (uint32_t at = 0; f && at + REC_HEAD <= f->optset && f->optset <= LF_OPTBYTES;
	     at += REC_HEAD + f->opt[at + 4]) {
		int16_t l, o;
		memcpy(&l, f->opt + at, 2);
		memcpy(&o, f->opt + at + 2, 2);
		if (l == level && o == opt)
			return (int)at;
	}
	return -1;
}

static void rec_drop(struct lf_fd *f, int level, int opt)
{
	int at = rec_find(f, level, opt);

	if (at >= 0) {
		uint32_t end = (uint32_t)at + REC_HEAD + f->opt[at + 4];
		memmove(f->opt + at, f->opt + end, f->optset - end);
		f->optset -= end - (uint32_t)at;
	}
}

static int rec_put(struct lf_fd *f, int level, int opt, const void *val, socklen_t len)
{
	int16_t l = (int16_t)level, o = (int16_t)opt;

	if (!f)
		return 0;
	if (len > 255)
		return -ENOBUFS;
	rec_drop(f, level, opt);
	if (f->optset + REC_HEAD + len > LF_OPTBYTES)
		return -ENOBUFS;
	memcpy(f->opt + f->optset, &l, 2);
	memcpy(f->opt + f->optset + 2, &o, 2);
	f->opt[f->optset + 4] = (uint8_t)len;
	memcpy(f->opt + f->optset + REC_HEAD, val, len);
	f->optset += REC_HEAD + len;
	return 0;
}

/* TCP's rule for a get: copy what fits, report what was copied. */
static int put(void *val, socklen_t *len, const void *src, socklen_t n)
{
	if (!len || (int)*len < 0)
		return len ? -EINVAL : -EFAULT;
	if (*len < n)
		n = *len;
	if (n && !val)
		return -EFAULT;
	memcpy(val, src, n);
	*len = n;
	return 0;
}

/* ---- get */

/* Which end of its connection a fast-path socket is: the accepted end
 * carries the listener's name. */
static bool server_end(int fd)
{
	struct sockaddr_un sun;
	socklen_t l = sizeof(sun);
	struct lf_ep a, b;
	unsigned long ino;
	int family;

	return lf__sys_getsockname(fd, (void *)&sun, &l) == 0 &&
	       lf__name_parse(&sun, l, &ino, &family, &a, &b) == LF_NAME_LISTENER;
}

static int ref_getopt(int family, bool server, int level, int opt, void *val, socklen_t *len)
{
	pthread_mutex_lock(&ref_lock);
	int c = ref_get(family, server), r = c < 0 ? c : lf__sys_getsockopt(c, level, opt, val, len) ? -errno : 0;
	pthread_mutex_unlock(&ref_lock);
	return r;
}

/* The state TCP would be in: the Unix socket knows whether the peer shut
 * its side (or closed, or reset), the fd table whether this side did. A
 * reset is remembered once seen: the Unix socket forgets it when the error
 * is read (SO_ERROR, a read), TCP stays CLOSE. */
static uint8_t tcp_state(int fd, struct lf_fd *f)
{
	struct pollfd p = { fd, POLLRDHUP, 0 };
	struct timespec zero = { 0, 0 };
	bool wr = f && (atomic_load(&f->flags) & LF_F_SHUT_WR), rd;

	if (lf__sys_ppoll(&p, 1, &zero, NULL) != 1)
		p.revents = 0;
	if ((p.revents & POLLERR) && f)
		atomic_fetch_or(&f->flags, LF_F_RESET);
	if ((p.revents & POLLERR) || (f && (atomic_load(&f->flags) & LF_F_RESET)))
		return TCP_CLOSE; /* the peer reset: TCP got a RST */
	rd = p.revents & (POLLRDHUP | POLLHUP);
	return rd && wr ? TCP_CLOSE : rd ? TCP_CLOSE_WAIT : wr ? TCP_FIN_WAIT2 : TCP_ESTABLISHED;
}

/* struct tcp_info as Linux defines it (an append-only ABI), for the
 * counters of this connection that loopfast does not see: zero. */
struct lf_tcp_info {
	uint8_t state, ca_state, retransmits, probes, backoff, options, wscale, flags;
	uint32_t rto, ato, snd_mss, rcv_mss;
	uint32_t unacked, sacked, lost, retrans, fackets;
	uint32_t last_data_sent, last_ack_sent, last_data_recv, last_ack_recv;
	uint32_t pmtu, rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering;
	uint32_t rcv_rtt, rcv_space, total_retrans;
	uint64_t pacing_rate, max_pacing_rate, bytes_acked, bytes_received;
	uint32_t segs_out, segs_in, notsent_bytes, min_rtt, data_segs_in, data_segs_out;
	uint64_t delivery_rate, busy_time, rwnd_limited, sndbuf_limited;
	uint32_t delivered, delivered_ce;
	uint64_t bytes_sent, bytes_retrans;
	uint32_t dsack_dups, reord_seen, rcv_ooopack, snd_wnd, rcv_wnd;
};

#define SPAN(a, b) { offsetof(struct lf_tcp_info, a), offsetof(struct lf_tcp_info, b) }
static const struct { size_t from, to; } unknown_spans[] = {
	SPAN(ca_state, options), SPAN(flags, rto), SPAN(unacked, pmtu), SPAN(total_retrans, pacing_rate),
	SPAN(bytes_acked, min_rtt), SPAN(data_segs_in, snd_wnd),
};

/* TCP_INFO: the reference's answer (a loopback connection's MSS, MTU,
 * options, window scales, RTO), this connection's state, and zero for
 * what happened on it (bytes, segments, retransmits, times). */
static int tcp_info(int fd, int family, void *val, socklen_t *len)
{
	int r = ref_getopt(family, server_end(fd), IPPROTO_TCP, TCP_INFO, val, len);
	unsigned char *p = val;

	if (r < 0)
		return r;
	if (*len >= 1)
		p[0] = tcp_state(fd, lf__fd(fd));
	for (unsigned i = 0; i < sizeof(unknown_spans) / sizeof(unknown_spans[0]); i++)
		if (unknown_spans[i].from < *len)
			memset(p + unknown_spans[i].from, 0,
			       (unknown_spans[i].to < *len ? unknown_spans[i].to : *len) - unknown_spans[i].from);
	if (*len > sizeof(struct lf_tcp_info)) /* fields newer than this file: counters so far */
		memset(p + sizeof(struct lf_tcp_info), 0, *len - sizeof(struct lf_tcp_info));
	return 0;
}

int lf__sopt_get(int fd, int family, int level, int opt, void *val, socklen_t *len)
{
	const struct row *row = find(level, opt);
	struct lf_fd *f = lf__fd(fd);
	struct lf_ep local, peer;
	int f6 = family, at;

	switch (row ? row->how : TCP) {
	case INFO:
		return tcp_info(fd, family, val, len);
	case CCINFO: {
		int r = ref_getopt(family, server_end(fd), level, opt, val, len);
		if (r == 0 && val)
			memset(val, 0, *len);
		return r;
	}
	case ERR_GET:
		return -row->err;
	case LPORT:
	case PEERNAME:
		if (!lf__fast_endpoints(fd, &f6, &local, &peer))
			return -ENOTCONN;
		if (row->how == LPORT) {
			int v = local.port;
			return put(val, len, &v, sizeof(v));
		} else {
			struct sockaddr_storage ss;
			socklen_t n = lf__ep_to_sockaddr(&peer, family, &ss);
			if (!len || n < *len) /* TCP: a buffer larger than the address is refused */
				return len ? -EINVAL : -EFAULT;
			int r = put(val, len, &ss, *len);
			if (r == 0)
				*len = n;
			return r;
		}
	default:
		if ((at = rec_find(f, level, opt)) >= 0)
			return put(val, len, f->opt + at + REC_HEAD, f->opt[at + 4]);
		return ref_getopt(family, server_end(fd), level, opt, val, len);
	}
}

/* ---- set */

/* Makes the set on the reference, reads back what TCP made of it, and
 * gives the reference its own value back. A set that cannot be undone
 * (nothing to read back before it) retires the reference. */
static int ref_setopt(int family, bool server, int level, int opt, const void *val, socklen_t len, void *back,
		      socklen_t *blen)
{
	unsigned char saved[256];
	socklen_t sl = sizeof(saved);
	int r, mtu;

	pthread_mutex_lock(&ref_lock);
	int c = ref_get(family, server);
	if (c < 0) {
		pthread_mutex_unlock(&ref_lock);
		return c;
	}
	bool have = lf__sys_getsockopt(c, level, opt, saved, &sl) == 0;
	r = lf__sys_setsockopt(c, level, opt, val, len) ? -errno : 0;
	if (r == 0 && lf__sys_getsockopt(c, level, opt, back, blen))
		*blen = 0, r = 1; /* accepted, nothing to read back */
	else if (r == 0 && have && *blen == sl && !memcmp(back, saved, sl))
		r = 2; /* TCP's own value: nothing to remember */
	/* Undo it. Some sets (IP_TOS) also drop the route TCP keeps, and an
	 * idle connection only finds it again when it sends: IP_MTU would
	 * then say ENOTCONN. Such a reference is retired too. */
	sl = have ? sl : 0;
	if (r >= 0 && (!have || lf__sys_setsockopt(c, level, opt, saved, sl) ||
		       lf__sys_getsockopt(c, IPPROTO_IP, IP_MTU, &mtu, &(socklen_t){ sizeof(mtu) })))
		ref_drop(&refs[family == AF_INET6]);
	pthread_mutex_unlock(&ref_lock);
	return r;
}

int lf__sopt_set(int fd, int family, int level, int opt, const void *val, socklen_t len)
{
	const struct row *row = find(level, opt);
	unsigned char back[256];
	socklen_t blen = sizeof(back);
	int how = row ? row->how : -1, r;

	if (how == ERR_SET || (how == ERR_ON && lf__sopt_turns_on(val, len)))
		return -row->err;
	r = ref_setopt(family, server_end(fd), level, opt, val, len, back, &blen);
	if (r < 0)
		return r;
	if (how == -1)
		return -EOPNOTSUPP; /* TCP knows it, loopfast does not: no false yes */
	if (r == 1 || how == NOREC)
		return 0;
	if (r == 2) {
		rec_drop(lf__fd(fd), level, opt);
		return 0;
	}
	return rec_put(lf__fd(fd), level, opt, back, blen);
}

void lf__sopt_note(int fd, int level, int opt, const void *val, socklen_t len)
{
	struct lf_fd *f = lf__fd(fd);
	const struct row *row = find(level, opt);
	unsigned char back[256];
	socklen_t blen = sizeof(back);

	if (!f)
		return;
	if (level == SOL_SOCKET)
		f->sockset |= lf__carried_bit(opt);
	/* Pinned whether or not the socket is opted in yet: an opt-in that
	 * comes after the option (the per-socket mode's order: the option,
	 * then SOL_LOOPFAST) is refused (api.c), or its connection would lose
	 * the option's effect (MSG_ZEROCOPY's completions never come). */
	if (lf__sopt_pins(level, opt, val, len)) {
		unsigned fl = atomic_fetch_or(&f->flags, LF_F_PINNED);
		if (!(fl & (LF_F_OPTIN | LF_F_PENDING)) && !f->lst)
			return;
		if (lf__debug_on && !(fl & LF_F_NOFAST))
			lf__debug("fd %d: option %d/%d cannot be kept on the fast path: plain TCP", fd, level, opt);
		atomic_fetch_and(&f->flags, ~LF_F_OPTIN);
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return;
	}
	/* Only a socket that may still become a fast-path one (opted in, or
	 * its connect pending) or a listener needs it: a connected plain TCP
	 * socket pays nothing. */
	if (!(atomic_load(&f->flags) & (LF_F_OPTIN | LF_F_PENDING)) && !f->lst)
		return;
	if (!row || row->how == UNIX || row->how == FAMILY || row->how == NOREC)
		return;
	if (lf__sys_getsockopt(fd, level, opt, back, &blen) == 0)
		rec_put(f, level, opt, back, blen);
}

bool lf__fast_family(int fd, int *family)
{
	struct lf_ep a, b;
	struct lf_fd *f = lf__fd(fd);

	if (!lf__fast_endpoints(fd, family, &a, &b))
		return false;
	if (f && !(atomic_load(&f->flags) & LF_F_FAST)) { /* arrived by fd passing or exec */
		f->optset = 0;
		f->family = *family;
		atomic_store(&f->flags, LF_F_FAST);
	}
	return true;
}
