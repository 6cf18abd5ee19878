/* Socket options on fast-path sockets: every option has a defined answer.
 *
 * A fast-path socket is a Unix stream. It refuses every option above
 * SOL_SOCKET and answers a few SOL_SOCKET ones differently from TCP, so
 * each option is answered from one of three places (the table is
 * sockopt_rows.c's; docs/sockopts.md says the same for people):
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
	const struct lf_sopt_row *row = lf__sopt_row(level, opt);
	struct lf_fd *f = lf__fd(fd);
	struct lf_ep local, peer;
	int f6 = family, at;

	switch (row ? row->how : LF_SO_TCP) {
	case LF_SO_INFO:
		return tcp_info(fd, family, val, len);
	case LF_SO_CCINFO: {
		int r = ref_getopt(family, server_end(fd), level, opt, val, len);
		if (r == 0 && val)
			memset(val, 0, *len);
		return r;
	}
	case LF_SO_ERR_GET:
		return -row->err;
	case LF_SO_LPORT:
	case LF_SO_PEERNAME:
		if (!lf__fast_endpoints(fd, &f6, &local, &peer))
			return -ENOTCONN;
		if (row->how == LF_SO_LPORT) {
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
	const struct lf_sopt_row *row = lf__sopt_row(level, opt);
	unsigned char back[256];
	socklen_t blen = sizeof(back);
	int how = row ? row->how : -1, r;

	if (how == LF_SO_ERR_SET || (how == LF_SO_ERR_ON && lf__sopt_turns_on(val, len)))
		return -row->err;
	r = ref_setopt(family, server_end(fd), level, opt, val, len, back, &blen);
	if (r < 0)
		return r;
	if (how == -1)
		return -EOPNOTSUPP; /* TCP knows it, loopfast does not: no false yes */
	if (r == 1 || how == LF_SO_NOREC)
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
	const struct lf_sopt_row *row = lf__sopt_row(level, opt);
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
		/* A listener's connections are still claimed (claim.c), and
		 * TCP's accepted socket inherits the value: TCP_SAVE_SYN reads 1
		 * there, so it is recorded like any other (the kernel's answer
		 * on the listener is the program's: its set ended the marks). */
		if (!f->lst || !row || row->how != LF_SO_TCP)
			return;
	}
	/* Only a socket that may still become a fast-path one (opted in, or
	 * its connect pending) or a listener needs it: a connected plain TCP
	 * socket pays nothing. */
	if (!(atomic_load(&f->flags) & (LF_F_OPTIN | LF_F_PENDING)) && !f->lst)
		return;
	if (!row || row->how == LF_SO_UNIX || row->how == LF_SO_FAMILY || row->how == LF_SO_NOREC)
		return;
	if (lf__sys_getsockopt(fd, level, opt, back, &blen) == 0)
		rec_put(f, level, opt, back, blen);
}

void lf__sopt_accepted(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	for (uint32_t at = 0; f && at + REC_HEAD <= f->optset && f->optset <= LF_OPTBYTES;) {
		int16_t l, o;
		memcpy(&l, f->opt + at, 2);
		memcpy(&o, f->opt + at + 2, 2);
		if (lf__sopt_not_inherited(l, o))
			rec_drop(f, l, o);
		else
			at += REC_HEAD + f->opt[at + 4];
	}
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
		atomic_store(&f->flags, LF_F_FAST | lf__fd_timeouts(fd));
	}
	return true;
}
