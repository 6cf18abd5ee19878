/* loopfast status: the fast-path listeners and connections of this network
 * namespace, found from kernel state alone: Unix sockets whose abstract
 * names are loopfast's (sock_diag), and the processes holding them
 * (/proc/PID/fd). Processes of other users show without pid unless we are
 * root. */
#include "cli.h"
#include "internal.h"

#include <ctype.h>
#include <stddef.h>
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct usock {
	uint32_t ino, peer;
	uint8_t state;
	int pid, fd;
	struct sockaddr_un name;
	socklen_t namelen;
};

static struct usock *socks;
static int nsocks, capsocks;

static int dump_unix(void)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.req = { .sdiag_family = AF_UNIX, .udiag_states = ~0u,
			 .udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER },
	};
	long buf[4096];
	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

	if (nl < 0 || send(nl, &msg, sizeof(msg), 0) < 0)
		return -errno;
	for (;;) {
		ssize_t len = recv(nl, buf, sizeof(buf), 0);
		if (len < 0) {
			close(nl);
			return -errno;
		}
		for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
				close(nl);
				return h->nlmsg_type == NLMSG_DONE ? 0 : -EPROTO;
			}
			struct unix_diag_msg *m = NLMSG_DATA(h);
			struct usock u = { .ino = m->udiag_ino, .state = m->udiag_state, .pid = -1, .fd = -1 };
			struct nlattr *a = (void *)(m + 1);
			int alen = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
			while (alen >= (int)sizeof(*a) && a->nla_len >= sizeof(*a) && a->nla_len <= alen) {
				void *d = (char *)a + NLA_HDRLEN;
				int dl = a->nla_len - NLA_HDRLEN;
				if (a->nla_type == UNIX_DIAG_NAME && dl > 0 && dl < (int)sizeof(u.name.sun_path)) {
					u.name.sun_family = AF_UNIX;
					memcpy(u.name.sun_path, d, dl);
					u.namelen = offsetof(struct sockaddr_un, sun_path) + dl;
				} else if (a->nla_type == UNIX_DIAG_PEER && dl >= 4) {
					memcpy(&u.peer, d, 4);
				}
				int step = NLA_ALIGN(a->nla_len);
				alen -= step;
				a = (void *)((char *)a + step);
			}
			if (!u.namelen || u.name.sun_path[0] ||
			    strncmp(u.name.sun_path + 1, LF_NAME_PREFIX, strlen(LF_NAME_PREFIX)))
				if (!u.peer)
					continue;
			if (nsocks == capsocks) {
				capsocks = capsocks ? capsocks * 2 : 256;
				socks = realloc(socks, capsocks * sizeof(*socks));
				if (!socks)
					return -ENOMEM;
			}
			socks[nsocks++] = u;
		}
	}
}

/* TCP listeners (inode -> address): a rendezvous is named after its
 * listener's inode. */
struct tcplisten {
	uint32_t ino;
	struct lf_ep ep;
};
static struct tcplisten tls[1024];
static int ntls;

static void dump_tcp_listeners(int family)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.req = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP, .idiag_states = 1u << 10 },
	};
	long buf[4096];
	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

	if (nl < 0 || send(nl, &msg, sizeof(msg), 0) < 0) {
		if (nl >= 0)
			close(nl);
		return;
	}
	for (;;) {
		ssize_t len = recv(nl, buf, sizeof(buf), 0);
		if (len <= 0)
			break;
		for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
				close(nl);
				return;
			}
			struct inet_diag_msg *m = NLMSG_DATA(h);
			struct sockaddr_storage ss = { .ss_family = m->idiag_family };
			if (ntls == (int)(sizeof(tls) / sizeof(tls[0])))
				continue;
			if (m->idiag_family == AF_INET)
				memcpy(&((struct sockaddr_in *)&ss)->sin_addr, m->id.idiag_src, 4);
			else
				memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, m->id.idiag_src, 16);
			lf__ep_from_sockaddr(&tls[ntls].ep, (struct sockaddr *)&ss, sizeof(ss));
			tls[ntls].ep.port = ntohs(m->id.idiag_sport);
			tls[ntls++].ino = m->idiag_inode;
		}
	}
	close(nl);
}

static struct usock *by_ino(uint32_t ino)
{
	for (int i = 0; i < nsocks; i++)
		if (socks[i].ino == ino)
			return &socks[i];
	return NULL;
}

/* Finds which process and fd hold each socket. A socket held by several
 * (fork) shows the lowest pid. */
static void scan_procs(void)
{
	DIR *proc = opendir("/proc");
	struct dirent *p;

	if (!proc)
		return;
	while ((p = readdir(proc))) {
		if (!isdigit((unsigned char)p->d_name[0]))
			continue;
		char dir[300], link[600], target[64];
		snprintf(dir, sizeof(dir), "/proc/%s/fd", p->d_name);
		DIR *fds = opendir(dir);
		struct dirent *f;
		if (!fds)
			continue;
		int pid = atoi(p->d_name);
		while ((f = readdir(fds))) {
			unsigned ino;
			snprintf(link, sizeof(link), "%s/%s", dir, f->d_name);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (sscanf(target, "socket:[%u]", &ino) != 1)
				continue;
			struct usock *u = by_ino(ino);
			if (u && (u->pid < 0 || pid < u->pid)) {
				u->pid = pid;
				u->fd = atoi(f->d_name);
			}
		}
		closedir(fds);
	}
	closedir(proc);
}

static void print_ep(const char *key, const struct lf_ep *ep, bool last)
{
	char buf[80];

	lf__ep_format(ep, buf, sizeof(buf));
	printf(lf_cli_json ? "\"%s\": \"%s\"%s" : "%s %-24s%s", key, buf, last ? "" : lf_cli_json ? ", " : " ");
}

int cmd_status(int argc, char **argv)
{
	int r, family, nl = 0, nc = 0;
	unsigned long lino;
	struct lf_ep a, b, c, s;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			lf_cli_json = true;
		else
			return lf_cli_error("status: unknown argument '%s' (usage: loopfast [--json] status)", argv[i]);
	}
	if ((r = dump_unix()) < 0)
		return lf_cli_error("status: cannot list Unix sockets (sock_diag): %s", strerror(-r));
	scan_procs();
	dump_tcp_listeners(AF_INET);
	dump_tcp_listeners(AF_INET6);

	printf(lf_cli_json ? "{\"listeners\": [" : "LISTENERS\n");
	for (int i = 0; i < nsocks; i++) {
		struct usock *u = &socks[i];
		if (u->state != 10 /* TCP_LISTEN */ ||
		    lf__name_parse(&u->name, u->namelen, &lino, &family, &a, &b) != LF_NAME_LISTENER)
			continue;
		int k;
		for (k = 0; k < ntls && tls[k].ino != lino; k++)
			;
		if (k == ntls)
			continue; /* its TCP listener is gone (or it is not one of ours) */
		a = tls[k].ep;
		if (lf_cli_json)
			printf("%s{\"pid\": %d, \"fd\": %d, ", nl++ ? ", " : "", u->pid, u->fd);
		else
			printf("  pid %-7d fd %-5d ", u->pid, u->fd);
		print_ep("address", &a, true);
		printf(lf_cli_json ? "}" : "\n");
	}
	printf(lf_cli_json ? "], \"connections\": [" : "CONNECTIONS\n");
	for (int i = 0; i < nsocks; i++) {
		struct usock *u = &socks[i], *peer;
		struct lf_ep local, remote;
		const char *role;
		if (u->state != 1 /* established */)
			continue;
		if (lf__name_parse(&u->name, u->namelen, &lino, &family, &a, &b) == LF_NAME_CLIENT) {
			role = "client";
			local = a;
			remote = b;
		} else if ((peer = by_ino(u->peer)) &&
			   lf__name_parse(&peer->name, peer->namelen, &lino, &family, &c, &s) == LF_NAME_CLIENT &&
			   lf__name_parse(&u->name, u->namelen, &lino, &family, &a, &b) == LF_NAME_LISTENER) {
			role = "server";
			local = s;
			remote = c;
		} else {
			continue;
		}
		if (lf_cli_json)
			printf("%s{\"pid\": %d, \"fd\": %d, \"role\": \"%s\", ", nc++ ? ", " : "", u->pid, u->fd, role);
		else
			printf("  pid %-7d fd %-5d %-7s ", u->pid, u->fd, role);
		print_ep("local", &local, false);
		print_ep("peer", &remote, true);
		printf(lf_cli_json ? "}" : "\n");
	}
	printf(lf_cli_json ? "]}\n" : "");
	free(socks);
	return 0;
}
