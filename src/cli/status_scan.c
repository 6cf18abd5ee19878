/* What `loopfast status` reads, from kernel state alone: the Unix sockets
 * whose abstract names are loopfast's (sock_diag, with their owners' uid),
 * the TCP listeners their names point to, which processes hold each socket
 * (/proc/PID/fd), and each process's counts (its "loopfast-stats" memfd,
 * read through /proc/PID/fd: same uid or root). status.c decides what to
 * show. */
#include "status.h"
#include "protocol.h" /* LF_NAME_PREFIX: names of this version */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct st_state st;

static void *grow(void *p, int n, int *cap, size_t size)
{
	if (n < *cap)
		return p;
	*cap = *cap ? *cap * 2 : 256;
	void *q = realloc(p, (size_t)*cap * size);
	if (!q) {
		fprintf(stderr, "loopfast: status: out of memory\n");
		exit(2);
	}
	return q;
}

static bool ours(const struct st_sock *u)
{
	return u->namelen > (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1) && !u->name.sun_path[0] &&
	       !strncmp(u->name.sun_path + 1, LF_NAME_PREFIX, strlen(LF_NAME_PREFIX));
}

static int cmp_ino(const void *a, const void *b)
{
	uint32_t x = ((const struct st_sock *)a)->ino, y = ((const struct st_sock *)b)->ino;
	return x < y ? -1 : x > y;
}

/* Unix sockets: loopfast's own, and any connected one (its peer may be
 * ours: the server end of a fast-path connection carries the
 * rendezvous's name, but is matched through its client's peer). */
int st_dump_unix(void)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.req = { .sdiag_family = AF_UNIX, .udiag_states = ~0u,
			 .udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER | UDIAG_SHOW_UID },
	};
	long buf[4096];
	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG), r = 0;

	if (nl < 0)
		return -errno;
	if (send(nl, &msg, sizeof(msg), 0) < 0) {
		r = -errno;
		close(nl);
		return r;
	}
	for (;;) {
		ssize_t len = recv(nl, buf, sizeof(buf), 0);
		if (len < 0) {
			r = -errno;
			break;
		}
		for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
				r = h->nlmsg_type == NLMSG_DONE ? 0 : -EPROTO;
				goto out;
			}
			struct unix_diag_msg *m = NLMSG_DATA(h);
			struct st_sock u = { .ino = m->udiag_ino, .state = m->udiag_state, .pid = -1, .fd = -1 };
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
				} else if (a->nla_type == UNIX_DIAG_UID && dl >= 4) {
					memcpy(&u.uid, d, 4);
					u.has_uid = true;
				}
				int step = NLA_ALIGN(a->nla_len);
				alen -= step;
				a = (void *)((char *)a + step);
			}
			if (!ours(&u) && !u.peer)
				continue;
			st.socks = grow(st.socks, st.nsocks, &st.capsocks, sizeof(*st.socks));
			st.socks[st.nsocks++] = u;
		}
	}
out:
	close(nl);
	qsort(st.socks, (size_t)st.nsocks, sizeof(*st.socks), cmp_ino);
	return r;
}

struct st_sock *st_by_ino(uint32_t ino)
{
	struct st_sock key = { .ino = ino };
	return ino ? bsearch(&key, st.socks, (size_t)st.nsocks, sizeof(*st.socks), cmp_ino) : NULL;
}

/* TCP listeners (inode -> address): a rendezvous is named after its
 * listener's inode. */
void st_dump_tcp_listeners(int family)
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

	if (nl < 0)
		return;
	if (send(nl, &msg, sizeof(msg), 0) < 0) {
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
			if (m->idiag_family == AF_INET)
				memcpy(&((struct sockaddr_in *)&ss)->sin_addr, m->id.idiag_src, 4);
			else
				memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, m->id.idiag_src, 16);
			st.tls = grow(st.tls, st.ntls, &st.captls, sizeof(*st.tls));
			lf__ep_from_sockaddr(&st.tls[st.ntls].ep, (struct sockaddr *)&ss, sizeof(ss));
			st.tls[st.ntls].ep.port = ntohs(m->id.idiag_sport);
			st.tls[st.ntls++].ino = m->idiag_inode;
		}
	}
	close(nl);
}

static int cmp_pid(const void *a, const void *b)
{
	int x = ((const struct st_proc *)a)->pid, y = ((const struct st_proc *)b)->pid;
	return x < y ? -1 : x > y;
}

struct st_proc *st_proc(int pid)
{
	struct st_proc key = { .pid = pid };
	return pid > 0 ? bsearch(&key, st.procs, (size_t)st.nprocs, sizeof(*st.procs), cmp_pid) : NULL;
}

static struct st_proc *add_proc(int pid)
{
	char path[64], line[256];
	FILE *f;

	if (st.nprocs && st.procs[st.nprocs - 1].pid == pid)
		return &st.procs[st.nprocs - 1];
	st.procs = grow(st.procs, st.nprocs, &st.capprocs, sizeof(*st.procs));
	struct st_proc *p = &st.procs[st.nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->uid = (uint32_t)-1;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((f = fopen(path, "re"))) {
		unsigned r, e;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "Uid: %u %u", &r, &e) == 2) {
				p->uid = e;
				break;
			}
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	if ((f = fopen(path, "re"))) {
		if (fgets(p->comm, sizeof(p->comm), f))
			p->comm[strcspn(p->comm, "\n")] = '\0';
		fclose(f);
	}
	return p;
}

/* A stats page seen through /proc/PID/fd/N. Each page is counted once, for
 * the first (lowest) pid that holds it: the library closes a forked
 * child's copy of its parent's page, so normally one process holds it. */
static void read_page(struct st_proc *p, const char *link)
{
	struct lf_stats page;
	struct stat sb;
	int fd = open(link, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		p->stats_error = errno;
		return;
	}
	if (fstat(fd, &sb) == 0) {
		for (int i = 0; i < st.npages; i++)
			if (st.pages[i] == sb.st_ino) {
				close(fd);
				return;
			}
		st.pages = grow(st.pages, st.npages, &st.cappages, sizeof(*st.pages));
		st.pages[st.npages++] = sb.st_ino;
	}
	ssize_t n = pread(fd, &page, sizeof(page), 0);
	close(fd);
	if (n < (ssize_t)offsetof(struct lf_stats, count) || page.magic != LF_STATS_MAGIC ||
	    page.version != LF_STATS_VERSION)
		return;
	int k = (int)((n - (ssize_t)offsetof(struct lf_stats, count)) / (ssize_t)sizeof(page.count[0]));
	p->have_stats = true;
	for (int i = 0; i < k && i < LF_NEVENTS; i++)
		p->count[i] += atomic_load(&page.count[i]);
}

static void add_holder(struct st_sock *u, int pid, int fd)
{
	if (u->pid < 0 || pid < u->pid) {
		u->pid = pid;
		u->fd = fd;
	}
	if (u->npids < ST_PIDS_MAX && (u->npids == 0 || u->pids[u->npids - 1] != pid))
		u->pids[u->npids++] = pid;
	u->nholders++;
}

/* Which processes hold each socket, and their stats pages. /proc lists
 * pids in ascending order, so the first holder is the lowest pid. */
void st_scan_procs(void)
{
	DIR *proc = opendir("/proc");
	struct dirent *p;
	char want[64];

	snprintf(want, sizeof(want), "/memfd:%s (deleted)", LF_STATS_NAME);
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
		struct st_proc *me = NULL;
		while ((f = readdir(fds))) {
			unsigned ino;
			if (f->d_name[0] == '.')
				continue;
			snprintf(link, sizeof(link), "%s/%s", dir, f->d_name);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (sscanf(target, "socket:[%u]", &ino) == 1) {
				struct st_sock *u = st_by_ino(ino);
				if (u) {
					add_holder(u, pid, atoi(f->d_name));
					if (!me)
						me = add_proc(pid);
				}
			} else if (!strcmp(target, want)) {
				me = me ? me : add_proc(pid);
				read_page(me, link);
			}
		}
		closedir(fds);
	}
	closedir(proc);
	qsort(st.procs, (size_t)st.nprocs, sizeof(*st.procs), cmp_pid);
}

bool st_tcp_listener(unsigned long ino, struct lf_ep *ep)
{
	for (int k = 0; k < st.ntls; k++)
		if (st.tls[k].ino == ino) {
			*ep = st.tls[k].ep;
			return true;
		}
	return false;
}

/* The rendezvous (a listening socket) whose name a server end carries. */
struct st_sock *st_rendezvous_of(const struct st_sock *u)
{
	for (int i = 0; i < st.nsocks; i++) {
		struct st_sock *r = &st.socks[i];
		if (r->state == 10 && r->namelen == u->namelen && !memcmp(&r->name, &u->name, u->namelen))
			return r;
	}
	return NULL;
}
