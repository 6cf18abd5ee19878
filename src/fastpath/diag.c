/* sock_diag queries: which TCP sockets listen on a port, and who owns them.
 * Unprivileged; one netlink round trip per address family. Every call here
 * is a raw system call: the plain libc names would bind to loopfast's own
 * interposed wrappers. */
#include "internal.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int diag_family(int nl, int family, uint16_t port, struct lf_diag_listener *out, int n, int max)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.req = { .sdiag_family = family, .sdiag_protocol = IPPROTO_TCP,
			 .idiag_states = 1u << TCP_LISTEN },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	long buf[2048];

	msg.req.id.idiag_sport = htons(port);
	if (lf__sys_sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -errno;
	for (;;) {
		ssize_t len = lf__sys_recvfrom(nl, buf, sizeof(buf), 0, NULL, NULL);
		if (len < 0)
			return errno == EINTR ? diag_family(nl, family, port, out, n, max) : -errno;
		for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_type == NLMSG_DONE)
				return n;
			if (h->nlmsg_type == NLMSG_ERROR)
				return -EPROTO;
			struct inet_diag_msg *m = NLMSG_DATA(h);
			if (ntohs(m->id.idiag_sport) != port || m->idiag_state != TCP_LISTEN || n >= max)
				continue;
			struct lf_diag_listener *l = &out[n++];
			memset(l, 0, sizeof(*l));
			struct sockaddr_storage ss = { .ss_family = m->idiag_family };
			if (m->idiag_family == AF_INET)
				memcpy(&((struct sockaddr_in *)&ss)->sin_addr, m->id.idiag_src, 4);
			else
				memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, m->id.idiag_src, 16);
			lf__ep_from_sockaddr(&l->ep, (void *)&ss, sizeof(ss));
			l->ep.port = port;
			l->family = m->idiag_family;
			l->uid = m->idiag_uid;
			l->inode = m->idiag_inode;
			struct rtattr *a = (void *)(m + 1);
			int alen = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
			for (; RTA_OK(a, alen); a = RTA_NEXT(a, alen))
				if (a->rta_type == INET_DIAG_SKV6ONLY)
					l->v6only = *(uint8_t *)RTA_DATA(a);
		}
	}
}

int lf__diag_listeners(int family, uint16_t port, struct lf_diag_listener *out, int max)
{
	int nl = lf__sys_socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	int n;

	if (nl < 0)
		return -errno;
	n = diag_family(nl, family, port, out, 0, max);
	lf__sys_close(nl);
	return n;
}
