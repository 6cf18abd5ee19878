/* lfprobe scenarios: every socket option a TCP socket has, asked of both
 * ends of a connection (get, set, get again), TCP_INFO through a
 * connection's life, and options set before connect that a program relies
 * on having on the wire. Each option gets a fresh connection, so that no
 * answer depends on an earlier row. */
#include "probe.h"

#include <linux/filter.h>
#include <linux/net_tstamp.h>
#include <linux/tls.h>

#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#define SO_DEVMEM_LINEAR 78
#define SO_DEVMEM_DMABUF 79
#define SO_DEVMEM_DONTNEED 80
#define SO_RCVPRIORITY 82
#define SO_PASSRIGHTS 83
#define SO_INQ 84
#ifndef IP_LOCAL_PORT_RANGE
#define IP_LOCAL_PORT_RANGE 51
#endif
#ifndef IP_PROTOCOL
#define IP_PROTOCOL 52
#endif
#ifndef IPV6_FLOWINFO
#define IPV6_FLOWINFO 11
#endif
#ifndef IPV6_FLOWLABEL_MGR
#define IPV6_FLOWLABEL_MGR 32
#define IPV6_FLOWINFO_SEND 33
#endif
#ifndef IPV6_PREFER_SRC_TMP
#define IPV6_PREFER_SRC_TMP 0x0001
#endif
#include <netinet/udp.h>
#ifndef IPV6_USE_MIN_MTU
#define IPV6_USE_MIN_MTU 63
#endif
#define TCP_AO_ADD_KEY 38
#define TCP_AO_DEL_KEY 39
#define TCP_AO_INFO 40
#define TCP_AO_GET_KEYS 41
#define TCP_AO_REPAIR 42
#define TCP_IS_MPTCP 43
#define TCP_RTO_MAX_MS 44
#define TCP_RTO_MIN_US 45
#define TCP_DELACK_MAX_US 46
#ifndef TLS_TX_ZEROCOPY_RO
#define TLS_TX_ZEROCOPY_RO 3
#endif
#ifndef TLS_RX_EXPECT_NO_PAD
#define TLS_RX_EXPECT_NO_PAD 4
#endif

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "E?";
}

/* How a row's value is printed: only what is the same on every run. */
enum fmt {
	F_INT,   /* the value (an int, or bytes in hex) */
	F_STR,   /* a string */
	F_LEN,   /* its length only (cookies, clocks, memory counters) */
	F_POS,   /* positive (buffer sizes before a set) */
	F_PORT,  /* whether it is the socket's local port */
	F_PEER,  /* whether it is the peer's address */
	F_ZERO,  /* its length and whether it is all zero */
	F_STATE, /* TCP_INFO: the state */
};

struct row {
	int level;
	const char *lname;
	int opt;
	const char *name;
	enum fmt fmt;
	const void *val; /* the set: these bytes, or the int ival */
	socklen_t len;
	int ival;
	socklen_t glen; /* the get's buffer, 0 = 256 bytes */
	bool raw;       /* set val/len (else the int ival) */
};

static const struct linger linger_on = { 1, 5 };
static const struct timeval tv_1s5 = { 1, 500000 };
static const long long ktv_1s5[2] = { 1, 500000 };
static struct sock_filter accept_all[] = { { BPF_RET | BPF_K, 0, 0, 0xffffffff } };
static const struct sock_fprog fprog = { 1, accept_all };
static const struct sock_txtime txtime = { CLOCK_MONOTONIC, 0 };
static const unsigned char ip_nops[] = { 1, 1, 1, 0 }; /* NOP NOP NOP EOL */
static const unsigned port_range = (50000u << 16) | 40000u;
static struct ip_mreq mreq4 = { .imr_multiaddr.s_addr = 0xfb0000e0 /* 224.0.0.251 */ };
static struct ipv6_mreq mreq6 = { .ipv6mr_multiaddr.s6_addr = { 0xff, 0x02, [15] = 0xfb } };
static struct in6_pktinfo pktinfo6;
static struct in_addr any4;
static const char fokey[16] = "0123456789abcdef";
static const struct tcp_repair_opt ropt = { TCPOPT_MAXSEG, 1000 };
static struct tcp_repair_window rwin;
static struct tcp_md5sig md5; /* filled for the peer's address */
static struct tls12_crypto_info_aes_gcm_128 tls_info = { .info = { TLS_1_2_VERSION, TLS_CIPHER_AES_GCM_128 } };

#define I(lv, o, f, v) { lv, #lv, o, #o, f, NULL, 0, v, 0, false }
#define B(lv, o, f, p, n) { lv, #lv, o, #o, f, p, n, 0, 0, true }
#define N(lv, o, label, f, v) { lv, #lv, o, label, f, NULL, 0, v, 0, false }

static const struct row rows[] = {
	I(SOL_SOCKET, SO_DEBUG, F_INT, 1), I(SOL_SOCKET, SO_REUSEADDR, F_INT, 1), I(SOL_SOCKET, SO_TYPE, F_INT, 1),
	I(SOL_SOCKET, SO_ERROR, F_INT, 1), I(SOL_SOCKET, SO_DONTROUTE, F_INT, 1), I(SOL_SOCKET, SO_BROADCAST, F_INT, 1),
	I(SOL_SOCKET, SO_SNDBUF, F_POS, 65536), I(SOL_SOCKET, SO_RCVBUF, F_POS, 65536),
	I(SOL_SOCKET, SO_KEEPALIVE, F_INT, 1), I(SOL_SOCKET, SO_OOBINLINE, F_INT, 1), I(SOL_SOCKET, SO_NO_CHECK, F_INT, 1),
	I(SOL_SOCKET, SO_PRIORITY, F_INT, 3), B(SOL_SOCKET, SO_LINGER, F_INT, &linger_on, sizeof(linger_on)),
	I(SOL_SOCKET, SO_BSDCOMPAT, F_INT, 1), I(SOL_SOCKET, SO_REUSEPORT, F_INT, 1), I(SOL_SOCKET, SO_PASSCRED, F_INT, 1),
	I(SOL_SOCKET, SO_PEERCRED, F_INT, 1), I(SOL_SOCKET, SO_RCVLOWAT, F_INT, 5), I(SOL_SOCKET, SO_SNDLOWAT, F_INT, 1),
	B(SOL_SOCKET, SO_RCVTIMEO_OLD, F_INT, &tv_1s5, sizeof(tv_1s5)),
	B(SOL_SOCKET, SO_SNDTIMEO_OLD, F_INT, &tv_1s5, sizeof(tv_1s5)),
	I(SOL_SOCKET, SO_SECURITY_AUTHENTICATION, F_INT, 1), I(SOL_SOCKET, SO_SECURITY_ENCRYPTION_TRANSPORT, F_INT, 1),
	I(SOL_SOCKET, SO_SECURITY_ENCRYPTION_NETWORK, F_INT, 1), B(SOL_SOCKET, SO_BINDTODEVICE, F_STR, "lo", 3),
	B(SOL_SOCKET, SO_ATTACH_FILTER, F_INT, &fprog, sizeof(fprog)), I(SOL_SOCKET, SO_DETACH_FILTER, F_INT, 0),
	I(SOL_SOCKET, SO_PEERNAME, F_PEER, 1), I(SOL_SOCKET, SO_TIMESTAMP_OLD, F_INT, 1),
	I(SOL_SOCKET, SO_ACCEPTCONN, F_INT, 1), I(SOL_SOCKET, SO_PEERSEC, F_INT, 1),
	I(SOL_SOCKET, SO_SNDBUFFORCE, F_POS, 65536), I(SOL_SOCKET, SO_RCVBUFFORCE, F_POS, 65536),
	I(SOL_SOCKET, SO_PASSSEC, F_INT, 1), I(SOL_SOCKET, SO_TIMESTAMPNS_OLD, F_INT, 1), I(SOL_SOCKET, SO_MARK, F_INT, 7),
	I(SOL_SOCKET, SO_TIMESTAMPING_OLD, F_INT, SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE),
	I(SOL_SOCKET, SO_PROTOCOL, F_INT, 1), I(SOL_SOCKET, SO_DOMAIN, F_INT, 1), I(SOL_SOCKET, SO_RXQ_OVFL, F_INT, 1),
	I(SOL_SOCKET, SO_WIFI_STATUS, F_INT, 1), I(SOL_SOCKET, SO_PEEK_OFF, F_INT, 0), I(SOL_SOCKET, SO_NOFCS, F_INT, 1),
	I(SOL_SOCKET, SO_LOCK_FILTER, F_INT, 1), I(SOL_SOCKET, SO_SELECT_ERR_QUEUE, F_INT, 1),
	I(SOL_SOCKET, SO_BUSY_POLL, F_INT, 10), I(SOL_SOCKET, SO_MAX_PACING_RATE, F_INT, 1000000),
	I(SOL_SOCKET, SO_BPF_EXTENSIONS, F_INT, 1), I(SOL_SOCKET, SO_INCOMING_CPU, F_INT, 0),
	I(SOL_SOCKET, SO_ATTACH_BPF, F_INT, -1), B(SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, F_INT, &fprog, sizeof(fprog)),
	I(SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, F_INT, -1), I(SOL_SOCKET, SO_CNX_ADVICE, F_INT, 1),
	I(SOL_SOCKET, SO_MEMINFO, F_LEN, 1), I(SOL_SOCKET, SO_INCOMING_NAPI_ID, F_INT, 1),
	I(SOL_SOCKET, SO_COOKIE, F_LEN, 1), I(SOL_SOCKET, SO_PEERGROUPS, F_INT, 1), I(SOL_SOCKET, SO_ZEROCOPY, F_INT, 1),
	B(SOL_SOCKET, SO_TXTIME, F_INT, &txtime, sizeof(txtime)), I(SOL_SOCKET, SO_BINDTOIFINDEX, F_INT, 1),
	I(SOL_SOCKET, SO_TIMESTAMP_NEW, F_INT, 1), I(SOL_SOCKET, SO_TIMESTAMPNS_NEW, F_INT, 1),
	I(SOL_SOCKET, SO_TIMESTAMPING_NEW, F_INT, SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE),
	B(SOL_SOCKET, SO_RCVTIMEO_NEW, F_INT, ktv_1s5, sizeof(ktv_1s5)),
	B(SOL_SOCKET, SO_SNDTIMEO_NEW, F_INT, ktv_1s5, sizeof(ktv_1s5)),
	I(SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, F_INT, 0), I(SOL_SOCKET, SO_PREFER_BUSY_POLL, F_INT, 1),
	I(SOL_SOCKET, SO_BUSY_POLL_BUDGET, F_INT, 8), { SOL_SOCKET, "SOL_SOCKET", SO_NETNS_COOKIE, "SO_NETNS_COOKIE", F_LEN, NULL, 0, 1, 8, false },
	I(SOL_SOCKET, SO_BUF_LOCK, F_INT, 1), I(SOL_SOCKET, SO_RESERVE_MEM, F_INT, 4096), I(SOL_SOCKET, SO_TXREHASH, F_INT, 0),
	I(SOL_SOCKET, SO_RCVMARK, F_INT, 1), I(SOL_SOCKET, SO_PASSPIDFD, F_INT, 1), I(SOL_SOCKET, SO_PEERPIDFD, F_INT, 1),
	I(SOL_SOCKET, SO_DEVMEM_LINEAR, F_INT, 1), I(SOL_SOCKET, SO_DEVMEM_DMABUF, F_INT, 1),
	I(SOL_SOCKET, SO_DEVMEM_DONTNEED, F_INT, 1), I(SOL_SOCKET, SO_RCVPRIORITY, F_INT, 1),
	I(SOL_SOCKET, SO_PASSRIGHTS, F_INT, 0), I(SOL_SOCKET, SO_INQ, F_INT, 1),
	N(SOL_SOCKET, 0, "0 (unassigned)", F_INT, 1), N(SOL_SOCKET, 99, "99 (unassigned)", F_INT, 1),

	I(IPPROTO_IP, IP_TOS, F_INT, 0x11), I(IPPROTO_IP, IP_TTL, F_INT, 17), I(IPPROTO_IP, IP_HDRINCL, F_INT, 1),
	B(IPPROTO_IP, IP_OPTIONS, F_INT, ip_nops, sizeof(ip_nops)), I(IPPROTO_IP, IP_ROUTER_ALERT, F_INT, 1),
	I(IPPROTO_IP, IP_RECVOPTS, F_INT, 1), I(IPPROTO_IP, IP_RETOPTS, F_INT, 1), I(IPPROTO_IP, IP_PKTINFO, F_INT, 1),
	I(IPPROTO_IP, IP_PKTOPTIONS, F_INT, 1), I(IPPROTO_IP, IP_MTU_DISCOVER, F_INT, IP_PMTUDISC_DO),
	I(IPPROTO_IP, IP_RECVERR, F_INT, 1), I(IPPROTO_IP, IP_RECVTTL, F_INT, 1), I(IPPROTO_IP, IP_RECVTOS, F_INT, 1),
	I(IPPROTO_IP, IP_MTU, F_INT, 1), I(IPPROTO_IP, IP_FREEBIND, F_INT, 1), I(IPPROTO_IP, IP_IPSEC_POLICY, F_INT, 1),
	I(IPPROTO_IP, IP_XFRM_POLICY, F_INT, 1), I(IPPROTO_IP, IP_PASSSEC, F_INT, 1), I(IPPROTO_IP, IP_TRANSPARENT, F_INT, 1),
	I(IPPROTO_IP, IP_ORIGDSTADDR, F_INT, 1), I(IPPROTO_IP, IP_MINTTL, F_INT, 1), I(IPPROTO_IP, IP_NODEFRAG, F_INT, 1),
	I(IPPROTO_IP, IP_CHECKSUM, F_INT, 1), I(IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, F_INT, 1),
	I(IPPROTO_IP, IP_RECVFRAGSIZE, F_INT, 1), I(IPPROTO_IP, IP_RECVERR_RFC4884, F_INT, 1),
	B(IPPROTO_IP, IP_MULTICAST_IF, F_INT, &any4, sizeof(any4)), I(IPPROTO_IP, IP_MULTICAST_TTL, F_INT, 2),
	I(IPPROTO_IP, IP_MULTICAST_LOOP, F_INT, 0), B(IPPROTO_IP, IP_ADD_MEMBERSHIP, F_INT, &mreq4, sizeof(mreq4)),
	B(IPPROTO_IP, IP_DROP_MEMBERSHIP, F_INT, &mreq4, sizeof(mreq4)), I(IPPROTO_IP, IP_UNBLOCK_SOURCE, F_INT, 1),
	I(IPPROTO_IP, IP_BLOCK_SOURCE, F_INT, 1), I(IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, F_INT, 1),
	I(IPPROTO_IP, IP_DROP_SOURCE_MEMBERSHIP, F_INT, 1), I(IPPROTO_IP, IP_MSFILTER, F_INT, 1),
	I(IPPROTO_IP, MCAST_JOIN_GROUP, F_INT, 1), I(IPPROTO_IP, MCAST_BLOCK_SOURCE, F_INT, 1),
	I(IPPROTO_IP, MCAST_UNBLOCK_SOURCE, F_INT, 1), I(IPPROTO_IP, MCAST_LEAVE_GROUP, F_INT, 1),
	I(IPPROTO_IP, MCAST_JOIN_SOURCE_GROUP, F_INT, 1), I(IPPROTO_IP, MCAST_LEAVE_SOURCE_GROUP, F_INT, 1),
	I(IPPROTO_IP, MCAST_MSFILTER, F_INT, 1), I(IPPROTO_IP, IP_MULTICAST_ALL, F_INT, 0),
	I(IPPROTO_IP, IP_UNICAST_IF, F_INT, 1), B(IPPROTO_IP, IP_LOCAL_PORT_RANGE, F_INT, &port_range, sizeof(port_range)),
	I(IPPROTO_IP, IP_PROTOCOL, F_PORT, 1), N(IPPROTO_IP, 99, "99 (unassigned)", F_INT, 1),

	I(IPPROTO_IPV6, IPV6_ADDRFORM, F_INT, AF_INET), I(IPPROTO_IPV6, IPV6_2292PKTINFO, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_2292HOPOPTS, F_INT, 1), I(IPPROTO_IPV6, IPV6_2292DSTOPTS, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_2292RTHDR, F_INT, 1), I(IPPROTO_IPV6, IPV6_2292PKTOPTIONS, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_CHECKSUM, F_INT, 1), I(IPPROTO_IPV6, IPV6_2292HOPLIMIT, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_NEXTHOP, F_INT, 1), I(IPPROTO_IPV6, IPV6_AUTHHDR, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_FLOWINFO, F_INT, 1), I(IPPROTO_IPV6, IPV6_UNICAST_HOPS, F_INT, 17),
	I(IPPROTO_IPV6, IPV6_MULTICAST_IF, F_INT, 0), I(IPPROTO_IPV6, IPV6_MULTICAST_HOPS, F_INT, 2),
	I(IPPROTO_IPV6, IPV6_MULTICAST_LOOP, F_INT, 0), B(IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, F_INT, &mreq6, sizeof(mreq6)),
	B(IPPROTO_IPV6, IPV6_DROP_MEMBERSHIP, F_INT, &mreq6, sizeof(mreq6)), I(IPPROTO_IPV6, IPV6_ROUTER_ALERT, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_MTU_DISCOVER, F_INT, IPV6_PMTUDISC_DO), I(IPPROTO_IPV6, IPV6_MTU, F_INT, 1280),
	I(IPPROTO_IPV6, IPV6_RECVERR, F_INT, 1), I(IPPROTO_IPV6, IPV6_V6ONLY, F_INT, 1),
	B(IPPROTO_IPV6, IPV6_JOIN_ANYCAST, F_INT, &mreq6, sizeof(mreq6)),
	B(IPPROTO_IPV6, IPV6_LEAVE_ANYCAST, F_INT, &mreq6, sizeof(mreq6)), I(IPPROTO_IPV6, IPV6_MULTICAST_ALL, F_INT, 0),
	I(IPPROTO_IPV6, IPV6_ROUTER_ALERT_ISOLATE, F_INT, 1), I(IPPROTO_IPV6, IPV6_RECVERR_RFC4884, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_FLOWLABEL_MGR, F_INT, 1), I(IPPROTO_IPV6, IPV6_FLOWINFO_SEND, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_IPSEC_POLICY, F_INT, 1), I(IPPROTO_IPV6, IPV6_XFRM_POLICY, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_HDRINCL, F_INT, 1), I(IPPROTO_IPV6, MCAST_JOIN_GROUP, F_INT, 1),
	I(IPPROTO_IPV6, MCAST_BLOCK_SOURCE, F_INT, 1), I(IPPROTO_IPV6, MCAST_UNBLOCK_SOURCE, F_INT, 1),
	I(IPPROTO_IPV6, MCAST_LEAVE_GROUP, F_INT, 1), I(IPPROTO_IPV6, MCAST_JOIN_SOURCE_GROUP, F_INT, 1),
	I(IPPROTO_IPV6, MCAST_LEAVE_SOURCE_GROUP, F_INT, 1), I(IPPROTO_IPV6, MCAST_MSFILTER, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_RECVPKTINFO, F_INT, 1), B(IPPROTO_IPV6, IPV6_PKTINFO, F_INT, &pktinfo6, sizeof(pktinfo6)),
	I(IPPROTO_IPV6, IPV6_RECVHOPLIMIT, F_INT, 1), I(IPPROTO_IPV6, IPV6_HOPLIMIT, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_RECVHOPOPTS, F_INT, 1), B(IPPROTO_IPV6, IPV6_HOPOPTS, F_INT, NULL, 0),
	B(IPPROTO_IPV6, IPV6_RTHDRDSTOPTS, F_INT, NULL, 0), I(IPPROTO_IPV6, IPV6_RECVRTHDR, F_INT, 1),
	B(IPPROTO_IPV6, IPV6_RTHDR, F_INT, NULL, 0), I(IPPROTO_IPV6, IPV6_RECVDSTOPTS, F_INT, 1),
	B(IPPROTO_IPV6, IPV6_DSTOPTS, F_INT, NULL, 0), I(IPPROTO_IPV6, IPV6_RECVPATHMTU, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_PATHMTU, F_INT, 1), I(IPPROTO_IPV6, IPV6_DONTFRAG, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_USE_MIN_MTU, F_INT, 1), I(IPPROTO_IPV6, IPV6_RECVTCLASS, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_TCLASS, F_INT, 0x29), I(IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_ADDR_PREFERENCES, F_INT, IPV6_PREFER_SRC_TMP), I(IPPROTO_IPV6, IPV6_MINHOPCOUNT, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_ORIGDSTADDR, F_INT, 1), I(IPPROTO_IPV6, IPV6_TRANSPARENT, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_UNICAST_IF, F_INT, 1), I(IPPROTO_IPV6, IPV6_RECVFRAGSIZE, F_INT, 1),
	I(IPPROTO_IPV6, IPV6_FREEBIND, F_INT, 1), N(IPPROTO_IPV6, 99, "99 (unassigned)", F_INT, 1),

	I(IPPROTO_TCP, TCP_NODELAY, F_INT, 1), I(IPPROTO_TCP, TCP_MAXSEG, F_INT, 1000), I(IPPROTO_TCP, TCP_CORK, F_INT, 1),
	I(IPPROTO_TCP, TCP_KEEPIDLE, F_INT, 30), I(IPPROTO_TCP, TCP_KEEPINTVL, F_INT, 5), I(IPPROTO_TCP, TCP_KEEPCNT, F_INT, 4),
	I(IPPROTO_TCP, TCP_SYNCNT, F_INT, 3), I(IPPROTO_TCP, TCP_LINGER2, F_INT, 30), I(IPPROTO_TCP, TCP_DEFER_ACCEPT, F_INT, 5),
	I(IPPROTO_TCP, TCP_WINDOW_CLAMP, F_INT, 20000), I(IPPROTO_TCP, TCP_INFO, F_STATE, 1),
	I(IPPROTO_TCP, TCP_QUICKACK, F_INT, 0), B(IPPROTO_TCP, TCP_CONGESTION, F_STR, "reno", 4),
	B(IPPROTO_TCP, TCP_MD5SIG, F_INT, &md5, sizeof(md5)), N(IPPROTO_TCP, 15, "15 (unassigned)", F_INT, 1),
	I(IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS, F_INT, 1), I(IPPROTO_TCP, TCP_THIN_DUPACK, F_INT, 1),
	I(IPPROTO_TCP, TCP_USER_TIMEOUT, F_INT, 5000), I(IPPROTO_TCP, TCP_REPAIR, F_INT, 1),
	I(IPPROTO_TCP, TCP_REPAIR_QUEUE, F_INT, 1), I(IPPROTO_TCP, TCP_QUEUE_SEQ, F_INT, 1),
	B(IPPROTO_TCP, TCP_REPAIR_OPTIONS, F_INT, &ropt, sizeof(ropt)), I(IPPROTO_TCP, TCP_FASTOPEN, F_INT, 5),
	I(IPPROTO_TCP, TCP_TIMESTAMP, F_LEN, 1), I(IPPROTO_TCP, TCP_NOTSENT_LOWAT, F_INT, 16384),
	I(IPPROTO_TCP, TCP_CC_INFO, F_ZERO, 1), I(IPPROTO_TCP, TCP_SAVE_SYN, F_INT, 1), I(IPPROTO_TCP, TCP_SAVED_SYN, F_INT, 1),
	B(IPPROTO_TCP, TCP_REPAIR_WINDOW, F_INT, &rwin, sizeof(rwin)), I(IPPROTO_TCP, TCP_FASTOPEN_CONNECT, F_INT, 1),
	B(IPPROTO_TCP, TCP_ULP, F_STR, "tls", 3), B(IPPROTO_TCP, TCP_MD5SIG_EXT, F_INT, &md5, sizeof(md5)),
	B(IPPROTO_TCP, TCP_FASTOPEN_KEY, F_INT, fokey, sizeof(fokey)), I(IPPROTO_TCP, TCP_FASTOPEN_NO_COOKIE, F_INT, 1),
	I(IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE, F_INT, 1), I(IPPROTO_TCP, TCP_INQ, F_INT, 1), I(IPPROTO_TCP, TCP_TX_DELAY, F_INT, 10),
	I(IPPROTO_TCP, TCP_AO_ADD_KEY, F_INT, 1), I(IPPROTO_TCP, TCP_AO_DEL_KEY, F_INT, 1), I(IPPROTO_TCP, TCP_AO_INFO, F_INT, 1),
	I(IPPROTO_TCP, TCP_AO_GET_KEYS, F_INT, 1), I(IPPROTO_TCP, TCP_AO_REPAIR, F_INT, 1), I(IPPROTO_TCP, TCP_IS_MPTCP, F_INT, 1),
	I(IPPROTO_TCP, TCP_RTO_MAX_MS, F_INT, 10000), I(IPPROTO_TCP, TCP_RTO_MIN_US, F_INT, 50000),
	I(IPPROTO_TCP, TCP_DELACK_MAX_US, F_INT, 10000), N(IPPROTO_TCP, 99, "99 (unassigned)", F_INT, 1),

	B(SOL_TLS, TLS_TX, F_INT, &tls_info, sizeof(tls_info)), B(SOL_TLS, TLS_RX, F_INT, &tls_info, sizeof(tls_info)),
	I(SOL_TLS, TLS_TX_ZEROCOPY_RO, F_INT, 1), I(SOL_TLS, TLS_RX_EXPECT_NO_PAD, F_INT, 1),
	I(IPPROTO_UDP, UDP_CORK, F_INT, 1), N(9999, 1, "1 (level 9999: no such level)", F_INT, 1),
};

/* One answer, the same way for every run: "-1 ENAME", or "0 len N" and the
 * value as the row prints it. */
static void answer(char *buf, size_t bl, int fd, const struct row *r, int ret, int err, const unsigned char *v,
		   socklen_t len)
{
	int n = snprintf(buf, bl, "%d", ret);
	if (ret < 0) {
		snprintf(buf + n, bl - (size_t)n, " %s", errname(err));
		return;
	}
	n += snprintf(buf + n, bl - (size_t)n, " len %u", len);
	int iv = 0;
	memcpy(&iv, v, len < sizeof(iv) ? len : sizeof(iv));
	switch (r->fmt) {
	case F_INT:
		if (len == sizeof(int))
			snprintf(buf + n, bl - (size_t)n, " = %d", iv);
		else
			for (socklen_t i = 0; i < len && i < 64 && (size_t)n + 3 < bl; i++)
				n += snprintf(buf + n, bl - (size_t)n, "%s%02x", i ? "" : " = ", v[i]);
		break;
	case F_STR:
		snprintf(buf + n, bl - (size_t)n, " = '%.*s'", (int)strnlen((const char *)v, len), v);
		break;
	case F_POS:
		snprintf(buf + n, bl - (size_t)n, " positive %d", iv > 0);
		break;
	case F_PORT:
		snprintf(buf + n, bl - (size_t)n, " local port %d", iv == port_of(fd, 0));
		break;
	case F_PEER: {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		CHECK(getpeername(fd, (void *)&ss, &sl) == 0);
		snprintf(buf + n, bl - (size_t)n, " peer address %d", sl == len && !memcmp(&ss, v, len));
		break;
	}
	case F_ZERO: {
		int zero = 1;
		for (socklen_t i = 0; i < len; i++)
			zero &= !v[i];
		snprintf(buf + n, bl - (size_t)n, " all zero %d", zero);
		break;
	}
	case F_STATE:
		snprintf(buf + n, bl - (size_t)n, " state %d", len ? v[0] : -1);
		break;
	case F_LEN:
		break;
	}
}

static void get(const char *who, const char *what, int fd, const struct row *r)
{
	unsigned char v[256];
	socklen_t len = r->glen ? r->glen : sizeof(v);
	char buf[320];
	if (r->fmt == F_PEER)
		len = fam == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memset(v, 0, sizeof(v));
	errno = 4242;
	int ret = getsockopt(fd, r->level, r->opt, v, &len), e = errno;
	answer(buf, sizeof(buf), fd, r, ret, e, v, len);
	out("%s %s %s %s: %s%s", who, r->lname, r->name, what, buf, ret == 0 && e != 4242 ? " (errno changed)" : "");
	if (ret == 0 && (r->opt == SO_PEERPIDFD && r->level == SOL_SOCKET))
		close(*(int *)v);
}

static void set(const char *who, int fd, const struct row *r)
{
	errno = 4242;
	int ret = r->raw ? setsockopt(fd, r->level, r->opt, r->val, r->len)
			 : setsockopt(fd, r->level, r->opt, &r->ival, sizeof(r->ival));
	int e = errno;
	if (ret == 0)
		out("%s %s %s set: 0%s", who, r->lname, r->name, e != 4242 ? " (errno changed)" : "");
	else
		out("%s %s %s set: %d %s", who, r->lname, r->name, ret, errname(e));
}

/* Every option: on both ends of a fresh connection, the default, a set and
 * the value read back. */
void sc_sockopt_table(void)
{
	struct sockaddr_storage ss;
	socklen_t sl = loopback(&ss, 0);
	memcpy(&md5.tcpm_addr, &ss, sl);
	md5.tcpm_keylen = 6;
	memcpy(md5.tcpm_key, "secret", 6);
	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int c, s;
		pair(&c, &s);
		if (i == 0) {
			path("client", c);
			path("server", s);
		}
		for (int k = 0; k < 2; k++) {
			const char *who = k ? "server" : "client";
			int fd = k ? s : c;
			get(who, "get", fd, &rows[i]);
			set(who, fd, &rows[i]);
			get(who, "get after set", fd, &rows[i]);
		}
		close(c);
		close(s);
	}
}

static const char *state_name(int s)
{
	static const char *names[] = { "?", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2",
				       "TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING" };
	return s > 0 && s < (int)(sizeof(names) / sizeof(names[0])) ? names[s] : "?";
}

/* struct tcp_info as Linux has it (glibc's stops before the byte counts). */
struct ktcp_info {
	uint8_t tcpi_state, tcpi_ca_state, tcpi_retransmits, tcpi_probes, tcpi_backoff, tcpi_options;
	uint8_t tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4;
	uint8_t tcpi_flags;
	uint32_t tcpi_rto, tcpi_ato, tcpi_snd_mss, tcpi_rcv_mss;
	uint32_t tcpi_unacked, tcpi_sacked, tcpi_lost, tcpi_retrans, tcpi_fackets;
	uint32_t tcpi_last_data_sent, tcpi_last_ack_sent, tcpi_last_data_recv, tcpi_last_ack_recv;
	uint32_t tcpi_pmtu, tcpi_rcv_ssthresh, tcpi_rtt, tcpi_rttvar, tcpi_snd_ssthresh, tcpi_snd_cwnd;
	uint32_t tcpi_advmss, tcpi_reordering, tcpi_rcv_rtt, tcpi_rcv_space, tcpi_total_retrans;
	uint64_t tcpi_pacing_rate, tcpi_max_pacing_rate, tcpi_bytes_acked, tcpi_bytes_received;
};

static struct ktcp_info info_of(int fd)
{
	struct ktcp_info t;
	socklen_t l = sizeof(t);
	memset(&t, 0, sizeof(t));
	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &t, &l) == 0);
	return t;
}

/* The state once TCP is done with a step it takes on its own right after
 * (the peer's ACK of a FIN); a deadline, not a timing. */
static void state(const char *who, const char *when, int fd, int passing)
{
	int s = info_of(fd).tcpi_state;
	for (int i = 0; i < 5000 && s == passing; i++) {
		usleep(1000);
		s = info_of(fd).tcpi_state;
	}
	out("%s %s: %s", who, when, state_name(s));
}

static void wait_eof(int fd)
{
	char b;
	CHECK(poll(&(struct pollfd){ fd, POLLIN, 0 }, 1, 5000) == 1);
	CHECK(read(fd, &b, 1) == 0);
}

/* TCP_INFO through a connection's life: the state follows the connection,
 * the path's properties are loopback TCP's; the counters of this
 * connection are printed apart (the fast path does not see them). */
void sc_tcp_info(void)
{
	int c, s;
	char buf[8];
	pair(&c, &s);
	path("client", c);
	path("server", s);
	for (int k = 0; k < 2; k++) {
		struct ktcp_info t = info_of(k ? s : c);
		out("%s: %s ca_state %d retransmits %d probes %d backoff %d options %d wscale %d/%d pmtu %u advmss %u "
		    "rto>0 %d unacked %u lost %u retrans %u total_retrans %u",
		    k ? "server" : "client", state_name(t.tcpi_state), t.tcpi_ca_state, t.tcpi_retransmits,
		    t.tcpi_probes, t.tcpi_backoff, t.tcpi_options, t.tcpi_snd_wscale, t.tcpi_rcv_wscale, t.tcpi_pmtu,
		    t.tcpi_advmss, t.tcpi_rto > 0, t.tcpi_unacked, t.tcpi_lost, t.tcpi_retrans, t.tcpi_total_retrans);
	}
	socklen_t l = 8;
	struct ktcp_info t;
	CHECK(getsockopt(c, IPPROTO_TCP, TCP_INFO, &t, &l) == 0);
	out("a short buffer: len %u state %s", l, state_name(t.tcpi_state));
	write_all(c, "hello", 5);
	CHECK(read_full(s, buf, 5) == 5);
	write_all(s, "abc", 3);
	CHECK(read_full(c, buf, 3) == 3);
	for (int k = 0; k < 2; k++) {
		struct ktcp_info u = info_of(k ? s : c);
		out("%s counters after 5 bytes up, 3 down: bytes_acked %llu bytes_received %llu", k ? "server" : "client",
		    (unsigned long long)u.tcpi_bytes_acked, (unsigned long long)u.tcpi_bytes_received);
	}
	shutdown(c, SHUT_WR);
	wait_eof(s);
	state("client", "after its SHUT_WR", c, TCP_FIN_WAIT1);
	state("server", "after the peer's SHUT_WR", s, 0);
	shutdown(s, SHUT_WR);
	wait_eof(c);
	state("client", "after both SHUT_WR", c, 0);
	state("server", "after both SHUT_WR", s, TCP_LAST_ACK);
	close(c);
	close(s);

	pair(&c, &s);
	close(s);
	wait_eof(c);
	state("client", "after the peer's close", c, 0);
	shutdown(c, SHUT_WR);
	state("client", "then its own SHUT_WR", c, TCP_LAST_ACK);
	close(c);

	pair(&c, &s);
	write_all(c, "x", 1);
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	close(s); /* unread data: TCP resets */
	CHECK(poll(&(struct pollfd){ c, POLLIN, 0 }, 1, 5000) == 1);
	state("client", "after the peer's close with unread data", c, 0);
	int err = 0;
	l = sizeof(err);
	CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &l) == 0);
	out("SO_ERROR %s", errname(err));
	state("client", "after reading SO_ERROR", c, 0);
	close(c);

	pair(&c, &s);
	shutdown(s, SHUT_RD);
	state("server", "after its SHUT_RD", s, 0);
	state("client", "after the peer's SHUT_RD", c, 0);
}

static int md5_listener(int *port, const struct sockaddr_storage *peer)
{
	struct sockaddr_storage ss;
	struct tcp_md5sig m = { .tcpm_keylen = 6 };
	int one = 1, l = socket(fam, SOCK_STREAM, 0);
	memcpy(&m.tcpm_addr, peer, sizeof(*peer));
	memcpy(m.tcpm_key, "secret", 6);
	CHECK(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	CHECK(setsockopt(l, IPPROTO_TCP, TCP_MD5SIG, &m, sizeof(m)) == 0);
	CHECK(bind(l, (void *)&ss, loopback(&ss, 0)) == 0);
	CHECK(listen(l, 8) == 0);
	*port = port_of(l, 0);
	return l;
}

/* Options set before connect or listen that put something on the wire
 * the fast path cannot: the connection stays TCP and keeps it. */
void sc_sockopt_pin(void)
{
	struct sockaddr_storage ss, peer;
	struct tcp_md5sig m = { .tcpm_keylen = 6 };
	int port, one = 1;
	loopback(&peer, 0);
	int l = md5_listener(&port, &peer);
	int c = socket(fam, SOCK_STREAM, 0);
	memcpy(&m.tcpm_addr, &peer, sizeof(peer));
	memcpy(m.tcpm_key, "secret", 6);
	out("TCP_MD5SIG before connect: %d", setsockopt(c, IPPROTO_TCP, TCP_MD5SIG, &m, sizeof(m)));
	CHECK(connect(c, (void *)&ss, loopback(&ss, port)) == 0);
	int s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("md5-client", c);
	path("md5-server", s);
	expect_echo_pair(c, s);
	close(c);
	close(s);
	close(l);

	/* Receive timestamps: every read carries one. */
	l = listener(&port);
	c = socket(fam, SOCK_STREAM, 0);
	out("SO_TIMESTAMP before connect: %d", setsockopt(c, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof(one)));
	CHECK(connect(c, (void *)&ss, loopback(&ss, port)) == 0);
	s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("ts-client", c);
	path("ts-server", s);
	/* The kernel starts stamping a moment after the first SO_TIMESTAMP in
	 * the system (a deferred switch): the first reads may carry none. */
	int stamped = 0;
	for (int i = 0; i < 1000 && !stamped; i++) {
		char b, cbuf[256];
		struct iovec iov = { &b, 1 };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
		write_all(s, "t", 1);
		CHECK(recvmsg(c, &mh, 0) == 1);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		stamped = cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMP;
		if (!stamped)
			usleep(1000);
	}
	out("reads carry SCM_TIMESTAMP: %d", stamped);
	close(c);
	close(s);

	/* TCP Fast Open's deferred connect: connect returns at once and the
	 * SYN leaves with the first write, so there is no handshake to ring
	 * the doorbell with: the connection stays TCP. */
	c = socket(fam, SOCK_STREAM, 0);
	out("TCP_FASTOPEN_CONNECT before connect: %d",
	    setsockopt(c, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof(one)));
	out("connect: %d", connect(c, (void *)&ss, loopback(&ss, port)));
	write_all(c, "f", 1);
	s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("tfo-client", c);
	path("tfo-server", s);
	char fb;
	CHECK(read(s, &fb, 1) == 1 && fb == 'f');
	expect_echo_pair(c, s);
	close(c);
	close(s);

	/* An option the fast path keeps: no pin, the value carried over. */
	c = socket(fam, SOCK_STREAM, 0);
	out("TCP_KEEPIDLE before connect: %d", setsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &(int){ 77 }, sizeof(int)));
	CHECK(connect(c, (void *)&ss, loopback(&ss, port)) == 0);
	s = accept(l, NULL, NULL);
	path("keepidle-client", c);
	int v;
	socklen_t vl = sizeof(v);
	CHECK(getsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &v, &vl) == 0);
	out("TCP_KEEPIDLE after connect %d", v);
	expect_echo_pair(c, s);
}

static int keepidle(int fd)
{
	int v = -1;
	socklen_t l = sizeof(v);
	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &l) == 0);
	return v;
}

/* An option belongs to the socket, not to one descriptor: a dup and a
 * forked child share it with TCP. */
void sc_sockopt_shared(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
	CHECK(setsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &(int){ 33 }, sizeof(int)) == 0);
	int d = dup(c);
	out("a dup reads what was set before it: %d", keepidle(d));
	CHECK(setsockopt(d, IPPROTO_TCP, TCP_KEEPIDLE, &(int){ 44 }, sizeof(int)) == 0);
	out("a set through the dup, read through the first fd: %d", keepidle(c));
	close(d);
	int sync[2];
	CHECK(pipe(sync) == 0);
	pid_t p = fork_child();
	if (p == 0) {
		out("a child reads what was set before fork: %d", keepidle(c));
		CHECK(setsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &(int){ 55 }, sizeof(int)) == 0);
		_exit(0);
	}
	out("child %d", wait_child(p));
	out("a set in the child, read by the parent: %d", keepidle(c));
}

/* A listener whose SO_LINGER {1, 0} was set where loopfast cannot see it
 * (a raw system call, as on a listener inherited from a program without
 * loopfast): its accepted sockets inherit it. Over TCP it only matters at
 * their close; on the fast path the claim must still end the doorbell with
 * a FIN, not a reset that would take the claim's mark with it (the client
 * would then take its connection for dead). Two exchanges: the client
 * hears its bell during the first. */
void sc_listener_linger(void)
{
	struct linger lg = { 1, 0 };
	int port, c, s, l = listen_socket(0, 0);
	CHECK(syscall(SYS_setsockopt, l, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
	CHECK(listen(l, 8) == 0);
	port = port_of(l, 0);
	c = connect_to(port);
	s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("client", c);
	path("server", s);
	expect_echo_pair(c, s);
	expect_echo_pair(c, s);
	close(c);
	close(s);
	close(l);
}
