/* kpath.h: what the kernel says about one end of a connection, through raw
 * system calls only (the library interposes getsockopt and answers as TCP
 * would for a fast-path socket). Each end is checked by the process that
 * holds it, so that a benchmark's two processes together prove the pair:
 * each end is a connected Unix stream whose peer belongs to the other. */
#include "kpath.h"

#include <dirent.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int sys_getsockopt(int fd, int opt, void *v, socklen_t len)
{
	return syscall(SYS_getsockopt, fd, SOL_SOCKET, opt, v, &len) ? -errno : 0;
}

/* The inode of the peer of Unix stream socket `ino`; 0 while the peer is
 * not accepted yet (a connection in a listener's queue has no inode),
 * -ENOTCONN if it has no peer or is no Unix stream (the kernel knows no
 * Unix socket of that inode: a TCP socket), or -errno. One netlink socket
 * per process, opened at the first call. */
static int64_t unix_peer(uint32_t ino)
{
	static int nl = -1;
	struct {
		struct nlmsghdr h;
		struct unix_diag_req r;
	} req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST },
		.r = { .sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_ino = ino, .udiag_show = UDIAG_SHOW_PEER,
		       .udiag_cookie = { ~0u, ~0u } },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	char buf[1024] __attribute__((aligned(8)));

	if (nl < 0 && (nl = (int)syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) < 0)
		return -errno;
	if (syscall(SYS_sendto, nl, &req, sizeof(req), 0, &kernel, sizeof(kernel)) != (long)sizeof(req))
		return -EIO;
	long n = syscall(SYS_recvfrom, nl, buf, sizeof(buf), 0, NULL, NULL);
	const struct nlmsghdr *h = (const void *)buf;
	if (n <= 0 || !NLMSG_OK(h, (size_t)n) || h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
		return -ENOTCONN; /* an error reply: the kernel knows no such Unix socket */
	const struct unix_diag_msg *m = NLMSG_DATA(h);
	if (m->udiag_type != SOCK_STREAM)
		return -ENOTCONN;
	int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
	for (const struct rtattr *a = (const void *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == UNIX_DIAG_PEER)
			return *(const uint32_t *)RTA_DATA(a);
	return -ENOTCONN;
}

/* Whether process pid, or one of its children (a supervised program:
 * the seccomp row), holds the socket of inode ino (/proc/PID/fd). */
static bool holds(pid_t pid, uint32_t ino, bool children)
{
	char path[64], link[320], target[64], want[32];
	DIR *d;
	struct dirent *e;
	bool found = false;

	snprintf(want, sizeof(want), "socket:[%u]", ino);
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	for (d = opendir(path); d && !found && (e = readdir(d));) {
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		found = n > 0 && (target[n] = 0, !strcmp(target, want));
	}
	if (d)
		closedir(d);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	FILE *f = children && !found ? fopen(path, "re") : NULL;
	int c;
	while (f && !found && fscanf(f, "%d", &c) == 1)
		found = holds(c, ino, false);
	if (f)
		fclose(f);
	return found;
}

int kpath_fast_end(int fd, pid_t peer)
{
	struct stat st;
	struct ucred cr;
	int err;

	/* The family from sock_diag, not SO_DOMAIN: under `loopfast run`'s
	 * supervisor SO_DOMAIN is answered as TCP would (the seccomp row). */
	if (fstat(fd, &st))
		return -errno;
	if (!S_ISSOCK(st.st_mode))
		return 0;
	/* A client may ask before the server accepted: wait for it (2 s). */
	int64_t p;
	for (int i = 0; (p = unix_peer((uint32_t)st.st_ino)) == 0 && i < 2000; i++)
		nanosleep(&(struct timespec){ 0, 1000 * 1000 }, NULL);
	if (p == -ENOTCONN || p == 0)
		return 0; /* a Unix socket with no peer, or one never accepted: not a connection */
	if (p < 0)
		return (int)p;
	if ((err = sys_getsockopt(fd, SO_PEERCRED, &cr, sizeof(cr))))
		return err;
	/* SO_PEERCRED names the process that made the peer's socket: under
	 * the supervisor that is the supervisor, so then look for the peer
	 * among the descriptors of peer and its children, which get it when
	 * the supervisor has put it in place (wait for that: 2 s). */
	if (cr.pid == peer)
		return 1;
	for (int i = 0; i < 2000; i++, nanosleep(&(struct timespec){ 0, 1000 * 1000 }, NULL))
		if (holds(peer, (uint32_t)p, true))
			return 1;
	return 0;
}

bool kpath_maps_tier(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, "memfd:loopfast-shm") != NULL;
	if (f)
		fclose(f);
	return found;
}
