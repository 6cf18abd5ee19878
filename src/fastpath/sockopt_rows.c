/* The table of socket options on fast-path sockets: how each option
 * this kernel knows is answered (sockopt.c says what each way means;
 * docs/sockopts.md says the same for people). Compiled alone into the
 * library and the CLI: loopfast run's supervisor builds its seccomp
 * filter from it (which options its library must answer), so that the
 * two never disagree. Nothing here calls anything. */
#include "sockopt.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stddef.h>

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

/* Every option this kernel (6.18) knows at SOL_SOCKET, IPPROTO_IP,
 * IPPROTO_IPV6 and IPPROTO_TCP, and SOL_TLS. Numbers in no row are unknown
 * to loopfast: TCP's error, and an honest EOPNOTSUPP if a newer TCP
 * accepts them (their effect could not be kept). */
static const struct lf_sopt_row rows[] = {
	{ SOL_SOCKET, SO_DEBUG, SO_BSDCOMPAT, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_REUSEPORT, SO_PEERCRED, LF_SO_TCP, 0 }, /* Unix: own rules, real credentials */
	{ SOL_SOCKET, SO_RCVLOWAT, SO_DETACH_FILTER, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_PEERNAME, SO_PEERNAME, LF_SO_PEERNAME, 0 },
	{ SOL_SOCKET, SO_TIMESTAMP_OLD, SO_TIMESTAMP_OLD, LF_SO_ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_ACCEPTCONN, SO_ACCEPTCONN, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_PEERSEC, SO_PEERSEC, LF_SO_TCP, 0 }, /* Unix: the peer's LSM label */
	{ SOL_SOCKET, SO_SNDBUFFORCE, SO_RCVBUFFORCE, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_PASSSEC, SO_PASSSEC, LF_SO_TCP, 0 },
	{ SOL_SOCKET, SO_TIMESTAMPNS_OLD, SO_TIMESTAMPNS_OLD, LF_SO_ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_MARK, SO_MARK, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_TIMESTAMPING_OLD, SO_TIMESTAMPING_OLD, LF_SO_ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_PROTOCOL, SO_DOMAIN, LF_SO_FAMILY, 0 },
	{ SOL_SOCKET, SO_RXQ_OVFL, SO_CNX_ADVICE, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_MEMINFO, SO_COOKIE, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_PEERGROUPS, SO_PEERGROUPS, LF_SO_TCP, 0 },
	{ SOL_SOCKET, SO_ZEROCOPY, SO_ZEROCOPY, LF_SO_ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_TXTIME, SO_BINDTOIFINDEX, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_TIMESTAMP_NEW, SO_TIMESTAMPING_NEW, LF_SO_ERR_ON, EOPNOTSUPP },
	{ SOL_SOCKET, SO_RCVTIMEO_NEW, SO_SNDTIMEO_NEW, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, SO_DETACH_REUSEPORT_BPF, LF_SO_TCP, 0 },
	{ SOL_SOCKET, SO_PREFER_BUSY_POLL, SO_RESERVE_MEM, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_TXREHASH, SO_TXREHASH, LF_SO_TCP, 0 },
	{ SOL_SOCKET, SO_RCVMARK, SO_RCVMARK, LF_SO_UNIX, 0 },
	{ SOL_SOCKET, SO_PASSPIDFD, SO_INQ, LF_SO_TCP, 0 }, /* PEERPIDFD, DEVMEM_*, RCVPRIORITY, PASSRIGHTS */
	{ IPPROTO_IP, IP_TOS, IP_RECVERR_RFC4884, LF_SO_TCP, 0 },
	{ IPPROTO_IP, IP_MULTICAST_IF, IP_LOCAL_PORT_RANGE, LF_SO_TCP, 0 },
	{ IPPROTO_IP, IP_PROTOCOL, IP_PROTOCOL, LF_SO_LPORT, 0 },
	{ IPPROTO_IPV6, IPV6_ADDRFORM, IPV6_FLOWINFO, LF_SO_TCP, 0 },
	{ IPPROTO_IPV6, IPV6_UNICAST_HOPS, IPV6_HDRINCL, LF_SO_TCP, 0 },
	{ IPPROTO_IPV6, MCAST_JOIN_GROUP, IPV6_USE_MIN_MTU, LF_SO_TCP, 0 },
	{ IPPROTO_IPV6, IPV6_RECVTCLASS, IPV6_TCLASS, LF_SO_TCP, 0 },
	{ IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, IPV6_AUTOFLOWLABEL, LF_SO_TCP, 0 },
	{ IPPROTO_IPV6, IPV6_ADDR_PREFERENCES, IPV6_FREEBIND, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_NODELAY, TCP_NODELAY, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_MAXSEG, TCP_MAXSEG, LF_SO_NOREC, 0 },
	{ IPPROTO_TCP, TCP_CORK, TCP_WINDOW_CLAMP, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_INFO, TCP_INFO, LF_SO_INFO, 0 },
	{ IPPROTO_TCP, TCP_QUICKACK, TCP_CONGESTION, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_MD5SIG, TCP_MD5SIG, LF_SO_ERR_SET, ENOPROTOOPT },
	{ IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS, TCP_USER_TIMEOUT, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR, LF_SO_ERR_ON, EPERM },
	{ IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_REPAIR_OPTIONS, LF_SO_TCP, 0 }, /* never in repair: TCP's refusal */
	{ IPPROTO_TCP, TCP_FASTOPEN, TCP_NOTSENT_LOWAT, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_CC_INFO, TCP_CC_INFO, LF_SO_CCINFO, 0 },
	{ IPPROTO_TCP, TCP_SAVE_SYN, TCP_SAVE_SYN, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_SAVED_SYN, TCP_SAVED_SYN, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_REPAIR_WINDOW, TCP_REPAIR_WINDOW, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_FASTOPEN_CONNECT, TCP_FASTOPEN_CONNECT, LF_SO_TCP, 0 }, /* connect sends no SYN */
	{ IPPROTO_TCP, TCP_ULP, TCP_ULP, LF_SO_ERR_SET, ENOENT },
	{ IPPROTO_TCP, TCP_MD5SIG_EXT, TCP_MD5SIG_EXT, LF_SO_ERR_SET, ENOPROTOOPT },
	{ IPPROTO_TCP, TCP_FASTOPEN_KEY, TCP_FASTOPEN_NO_COOKIE, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE, TCP_ZEROCOPY_RECEIVE, LF_SO_ERR_GET, EOPNOTSUPP },
	{ IPPROTO_TCP, TCP_INQ, TCP_INQ, LF_SO_ERR_ON, EOPNOTSUPP },
	{ IPPROTO_TCP, TCP_TX_DELAY, TCP_TX_DELAY, LF_SO_TCP, 0 },
	{ IPPROTO_TCP, TCP_AO_ADD_KEY, TCP_AO_REPAIR, LF_SO_ERR_SET, ENOPROTOOPT },
	{ IPPROTO_TCP, TCP_AO_REPAIR + 1, TCP_DELACK_MAX_US, LF_SO_TCP, 0 }, /* IS_MPTCP, RTO_MAX_MS, RTO_MIN_US */
	{ SOL_TLS, 1, 5, LF_SO_TCP, 0 }, /* TCP without the tls ULP: its error */
};

const struct lf_sopt_row *lf__sopt_row(int level, int opt)
{
	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].level == level && opt >= rows[i].first && opt <= rows[i].last)
			return &rows[i];
	return NULL;
}

/* Of the options set on a listener, those TCP does not give a connection
 * accepted from it (Linux 6.18, checked over TCP for the IPv4, IPv6, TCP
 * and SOL_SOCKET options a TCP listener takes; test_sockopt_edges.py): the
 * accept queue's own (TCP_FASTOPEN's length, TCP_DEFER_ACCEPT: 0 on the
 * accepted socket) and IP_OPTIONS (an accepted socket's come from its
 * SYN). IPv6's sticky options, like every other, are inherited. */
bool lf__sopt_not_inherited(int level, int opt)
{
	return (level == IPPROTO_TCP && (opt == TCP_FASTOPEN || opt == TCP_DEFER_ACCEPT)) ||
	       (level == IPPROTO_IP && opt == IP_OPTIONS);
}

bool lf__sopt_claimed(int level, int opt)
{
	const struct lf_sopt_row *r = lf__sopt_row(level, opt);

	return !r || (r->how != LF_SO_UNIX && r->how != LF_SO_FAMILY);
}

int lf__sopt_levels(int *levels, int max)
{
	int n = 0;

	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int k = 0;
		while (k < n && levels[k] != rows[i].level)
			k++;
		if (k == n && rows[i].level != SOL_SOCKET && n < max)
			levels[n++] = rows[i].level;
	}
	return n;
}
