/* test/kernel.h: a socket as the kernel sees it, through fstat, raw
 * getsockopt and sock_diag (unix_diag by inode, inet_diag dumps). */
#include "kernel.h"
#include "runner.h"
#include "loopfast.h"
#include <arpa/inet.h>

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int sys_sockopt(int fd, int opt)
{
	int v = 0;
	socklen_t l = sizeof(v);

	ASSERT_EQ(syscall(SYS_getsockopt, fd, SOL_SOCKET, opt, &v, &l), 0);
	return v;
}

/* Sends one sock_diag request and hands each reply message to fn, until
 * NLMSG_DONE (a dump) or the first reply (a lookup). A lookup that finds
 * nothing (an error reply) calls fn for nothing. */
static void diag(const void *req, size_t len, bool dump,
		 void (*fn)(const struct nlmsghdr *, void *), void *arg)
{
	static char buf[65536] __attribute__((aligned(8)));
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int nl = (int)syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

	ASSERT_GE(nl, 0);
	ASSERT_EQ(syscall(SYS_sendto, nl, req, len, 0, &kernel, sizeof(kernel)), (long)len);
	for (bool done = false; !done;) {
		long n = syscall(SYS_recvfrom, nl, buf, sizeof(buf), 0, NULL, NULL);
		int left = (int)n;
		ASSERT_GT(n, 0);
		for (const struct nlmsghdr *h = (void *)buf; !done && NLMSG_OK(h, (size_t)left); h = NLMSG_NEXT(h, left)) {
			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
				ASSERT(!dump || h->nlmsg_type == NLMSG_DONE);
				done = true;
				break;
			}
			fn(h, arg);
			done = !dump;
		}
	}
	syscall(SYS_close, nl);
}

static void unix_reply(const struct nlmsghdr *h, void *arg)
{
	const struct unix_diag_msg *m = NLMSG_DATA(h);
	int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));

	for (const struct rtattr *a = (const void *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == UNIX_DIAG_PEER)
			*(uint64_t *)arg = *(const uint32_t *)RTA_DATA(a);
}

/* The peer's inode of the Unix socket `ino`, or 0. */
static uint64_t unix_peer(uint64_t ino)
{
	struct {
		struct nlmsghdr h;
		struct unix_diag_req r;
	} req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST },
		.r = { .sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_ino = (uint32_t)ino,
		       .udiag_show = UDIAG_SHOW_PEER,
		       .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } },
	};
	uint64_t peer = 0;

	diag(&req, sizeof(req), false, unix_reply, &peer);
	return peer;
}

static void ep(struct k_ep *e, int family, const __be32 *addr, __be16 port)
{
	e->family = family;
	memcpy(e->addr, addr, family == AF_INET ? 4 : 16);
	e->port = ntohs(port);
}

static void tcp_reply(const struct nlmsghdr *h, void *arg)
{
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	struct k_sock *k = arg;

	if (m->idiag_inode != k->ino)
		return;
	k->tcp_state = m->idiag_state;
	ep(&k->local, m->idiag_family, m->id.idiag_src, m->id.idiag_sport);
	ep(&k->remote, m->idiag_family, m->id.idiag_dst, m->id.idiag_dport);
}

/* Finds the TCP socket k->ino among all of the kernel's (a dump). */
static void tcp_find(struct k_sock *k)
{
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.r = { .sdiag_family = (uint8_t)k->domain, .sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0u },
	};

	diag(&req, sizeof(req), true, tcp_reply, k);
}

void k_sock(int fd, struct k_sock *k)
{
	struct stat st;

	memset(k, 0, sizeof(*k));
	ASSERT_EQ(fstat(fd, &st), 0);
	ASSERT(S_ISSOCK(st.st_mode));
	k->ino = st.st_ino;
	k->domain = sys_sockopt(fd, SO_DOMAIN);
	k->type = sys_sockopt(fd, SO_TYPE);
	if (k->domain == AF_UNIX)
		k->peer = unix_peer(k->ino);
	else if ((k->domain == AF_INET || k->domain == AF_INET6) && k->type == SOCK_STREAM)
		tcp_find(k);
}

static bool same_ep(const struct k_ep *a, const struct k_ep *b)
{
	return a->family == b->family && a->port == b->port &&
	       !memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16);
}

int k_path(int c, int s)
{
	struct k_sock kc, ks;

	k_sock(c, &kc);
	k_sock(s, &ks);
	if (kc.domain == AF_UNIX && ks.domain == AF_UNIX && kc.type == SOCK_STREAM &&
	    ks.type == SOCK_STREAM && kc.peer == ks.ino && ks.peer == kc.ino)
		return K_FAST;
	if (kc.tcp_state == TCP_ESTABLISHED && ks.tcp_state == TCP_ESTABLISHED &&
	    same_ep(&kc.local, &ks.remote) && same_ep(&kc.remote, &ks.local))
		return K_TCP;
	return K_NEITHER;
}

int k_listener(int optin, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ASSERT_GE(fd, 0);
	ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ASSERT_EQ(listen(fd, 16), 0);
	if (optin)
		ASSERT_EQ(lf_enable_fast_path(fd), 0);
	ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

int k_client(int optin, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ASSERT_GE(fd, 0);
	if (optin)
		ASSERT_EQ(lf_enable_fast_path(fd), 0);
	ASSERT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}
