/* loopfast run's seccomp supervisor, the client's side
 * (docs/supervisor.md): a connect to a loopback address is made here, on
 * a copy of the program's socket, by libloopfast's own connect (the same
 * negotiation as the preload's: hello, doorbell, switch); the resulting
 * Unix socket is put in the program under the same fd number
 * (SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SETFD) and the
 * connect answered as libloopfast's connect answered it. Anything else
 * (another address, a socket that is not TCP, one the program did not
 * opt in, any failure before the connect is made) is left to the kernel
 * (SECCOMP_USER_NOTIF_FLAG_CONTINUE): the program's own connect, plain
 * TCP.
 *
 * The bell (bell.c: the client's TCP socket, kept until the server's
 * claim) stays in this process's fd table with the copy of the Unix
 * socket: this process watches it, and when it rings lets the library
 * give its verdict (a peek on the copy: claimed, or the fast-path socket
 * shut down, so that the program reads EOF as over TCP), then lets go of
 * both. Until then the copy keeps the program's Unix socket open: a
 * program that closes its end before the server has accepted ends its
 * connection when the claim arrives, not before.
 *
 * getsockname and getpeername on a fast-path socket are answered with
 * TCP's addresses (the library's own answers, from the socket's names);
 * socket options are supervise_sockopt.c's. */
#include "supervise.h"
#include "internal.h"
#include "loopfast.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A process of the tree that has the preload too (a nested loopfast run)
 * negotiates its connections itself: its doorbell, whose SYN carries the
 * hello's MSS, is its own to connect (never negotiated twice). */
static bool hello_sent(int fd)
{
	int mss = 0;
	socklen_t l = sizeof(mss);
	return syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &l) == 0 && mss == LF_HELLO_MSS;
}

/* The kernel's fdinfo line "key:\tvalue" in buf (value in base), or -1. */
static long long info_field(const char *buf, const char *key, int base)
{
	const char *at = strstr(buf, key);
	return at ? strtoll(at + strlen(key), NULL, base) : -1;
}

/* /proc/TID/fdinfo/FD (or self's), read into buf; false if unreadable. */
static bool read_fdinfo(pid_t tid, int fd, char *buf, size_t size)
{
	char p[64];
	if (tid)
		snprintf(p, sizeof(p), "/proc/%d/fdinfo/%d", tid, fd);
	else
		snprintf(p, sizeof(p), "/proc/self/fdinfo/%d", fd);
	int f = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = f >= 0 ? read(f, buf, size - 1) : -1;
	if (f >= 0)
		close(f);
	buf[n > 0 ? n : 0] = 0;
	return n > 0;
}

/* Just before the program's fd number is replaced: whether it still
 * holds the socket the connect was made on (tcp: our dup of it, inode
 * tino), and whether it is close-on-exec. Both from one read of the
 * program's fdinfo: its flags, and the file's inode and mount, compared
 * with tcp's (every socket is on the kernel's one sockfs mount, whose id
 * is read once from this process's own fdinfo of tcp). A kernel whose
 * fdinfo has no inode (before 5.14): the program's fd is taken again
 * (sv_grab) and compared by fstat. A close and a new open between this
 * look and the ADDFD remain possible (the kernel offers no
 * compare-and-replace of an fd). */
static bool still_there(int lfd, const struct seccomp_notif *n, int fd, int tcp, unsigned long tino, bool *cloexec)
{
	static long long sockfs = -2;
	char buf[256];
	struct stat a, b;

	if (sockfs == -2)
		sockfs = read_fdinfo(0, tcp, buf, sizeof(buf)) ? info_field(buf, "mnt_id:", 10) : -1;
	bool got = read_fdinfo(n->pid, fd, buf, sizeof(buf));
	long long fl = got ? info_field(buf, "flags:", 8) : -1, ino = got ? info_field(buf, "ino:", 10) : -1;
	*cloexec = fl >= 0 && (fl & O_CLOEXEC);
	if (ino >= 0 && sockfs >= 0)
		return (unsigned long long)ino == tino && info_field(buf, "mnt_id:", 10) == sockfs;
	int now = sv_grab(lfd, n, fd);
	bool same = now >= 0 && fstat(now, &a) == 0 && fstat(tcp, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
	if (now >= 0)
		syscall(SYS_close, now);
	return same;
}

/* ---- connections waiting for their claim */

struct watch {
	int copy; /* our copy of the program's Unix socket (the library knows its bell) */
	int tcp;  /* a dup of the TCP socket, the bell's file, for our epoll */
};
static struct watch *watches;
static int nwatches;

void svc_watch_end(int ep, int i)
{
	char c;
	/* The library's verdict: recv looks at the bell of a fast-path
	 * socket first (io.c); the bell has rung, so it is given now. */
	recv(watches[i].copy, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	epoll_ctl(ep, EPOLL_CTL_DEL, watches[i].tcp, NULL);
	close(watches[i].copy);
	syscall(SYS_close, watches[i].tcp);
	watches[i].copy = watches[i].tcp = -1;
}

static void watch_add(int ep, int copy, int tcp)
{
	int i = 0;
	while (i < nwatches && watches[i].copy >= 0)
		i++;
	if (i == nwatches) {
		struct watch *w = realloc(watches, (size_t)(nwatches + 16) * sizeof(*w));
		if (!w)
			goto no;
		watches = w;
		for (int k = nwatches; k < nwatches + 16; k++)
			watches[k].copy = watches[k].tcp = -1;
		nwatches += 16;
	}
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = SV_TAG_WATCH | (uint32_t)i };
	watches[i] = (struct watch){ copy, tcp };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, tcp, &ev) == 0)
		return;
	watches[i].copy = watches[i].tcp = -1;
no: /* cannot watch: the verdict is left to the library's next look */
	close(copy);
	syscall(SYS_close, tcp);
}

/* ---- the end of a connect: the result put in the program */

/* Fast-path sockets whose connect was answered EINPROGRESS, by inode: TCP
 * answers the next connect on such a socket 0, once, then EISCONN. The
 * oldest is forgotten past 256 (it then gets EISCONN at once). */
static unsigned long told_inprogress[256];
static unsigned told_next;

static unsigned long inode_of(int fd)
{
	struct stat st;
	return fstat(fd, &st) ? 0 : (unsigned long)st.st_ino;
}

/* connect again on a switched socket: 0 once after EINPROGRESS, then
 * EISCONN, as TCP (the kernel's connect of a Unix socket to an IP
 * address would say EINVAL). */
static int connect_again(int copy)
{
	unsigned long ino = inode_of(copy);
	for (unsigned i = 0; ino && i < sizeof(told_inprogress) / sizeof(told_inprogress[0]); i++)
		if (told_inprogress[i] == ino) {
			told_inprogress[i] = 0;
			return 0;
		}
	return -EISCONN;
}

/* The connect on copy is done (ret: its answer, 0 or -errno; fast:
 * copy is the Unix socket now): a copy switched to the fast path
 * replaces the program's socket under the same number, and the bell is
 * watched; anything else is plain TCP, made here on the program's
 * socket, and answered as it is. tino: the TCP socket's inode (the
 * connect's fstat of it). */
static void finish(int lfd, int ep, const struct seccomp_notif *n, int copy, int tcp, unsigned long tino, bool fast,
		   int ret, unsigned port)
{
	int fd = (int)n->data.args[0];
	unsigned long cino = fast ? inode_of(copy) : 0;
	bool cloexec = false;

	if (fast && !still_there(lfd, n, fd, tcp, tino, &cloexec)) {
		/* The program closed the socket while we connected (another
		 * thread), and its number may hold a new file now: left alone.
		 * Over TCP the connect ends on the closed socket's file as
		 * here; the fast-path connection goes with our copy. */
		SV_DEBUG("connect fd %d of %d: the socket was closed meanwhile: the number is left alone", fd, n->pid);
		sv_reply(lfd, n->id, ret, false);
		close(copy);
		syscall(SYS_close, tcp);
		return;
	}
	if (fast) {
		struct seccomp_notif_addfd add = { .id = n->id, .flags = SECCOMP_ADDFD_FLAG_SETFD, .srcfd = (uint32_t)copy,
						   .newfd = (uint32_t)fd, .newfd_flags = cloexec ? O_CLOEXEC : 0 };
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_ADDFD, &add) < 0) {
			/* The caller is gone (ENOENT), or its fd table is full:
			 * either way the connection is unusable. */
			SV_DEBUG("fd %d of %d: cannot put the fast-path socket in place: %s", fd, n->pid, strerror(errno));
			sv_reply(lfd, n->id, -ECONNRESET, false);
			close(copy);
			syscall(SYS_close, tcp);
			return;
		}
		svo_move(tino, cino); /* the options set on it */
		svo_switched(cino);
		if (ret == -EINPROGRESS)
			told_inprogress[told_next++ % (sizeof(told_inprogress) / sizeof(told_inprogress[0]))] = cino;
		SV_DEBUG("connect fd %d of %d to port %u: fast path (%s)", fd, n->pid, port, ret ? strerror(-ret) : "0");
		sv_reply(lfd, n->id, ret, false);
		watch_add(ep, copy, tcp);
		return;
	}
	SV_DEBUG("connect fd %d of %d to port %u: plain TCP (%s)", fd, n->pid, port, ret ? strerror(-ret) : "0");
	sv_reply(lfd, n->id, ret, false);
	close(copy);
	syscall(SYS_close, tcp);
}

/* Connects whose handshake is in progress, the program's call held: the
 * switch must happen while we hold it (only then can we replace the
 * program's fd). Watched in the loop's epoll (the TCP file, writable when
 * the handshake ends, with an error too), never waited for. A blocking
 * socket's call is answered when the handshake ends (TCP's own timeout),
 * when SO_SNDTIMEO has passed (EINPROGRESS, as TCP's) or when a signal
 * for a handler of the program is pending (-ERESTARTSYS: EINTR, or the
 * restart); a non-blocking one's within 2 s (EINPROGRESS). Answered
 * before the handshake has ended, the program keeps its TCP socket and
 * the hello is withdrawn (give_up). */
#define MAX_PENDS 1024
struct pend {
	struct seccomp_notif n;
	int copy, tcp; /* tcp < 0: a free entry */
	unsigned long tino;
	bool blocking;
	unsigned port;
	uint64_t deadline; /* ms, CLOCK_MONOTONIC; 0: none */
};
static struct pend *pends;
static int npends, pending;

static uint64_t now_ms(void)
{
	return lf__sys_now_ns() / 1000000;
}

/* Holds the call; false when it cannot (then the caller answers now). */
static bool pend(int ep, const struct seccomp_notif *n, int copy, int tcp, unsigned long tino, bool blocking,
		 unsigned port)
{
	struct timeval tv = { 0 };
	socklen_t tl = sizeof(tv);
	int i = 0;

	while (i < npends && pends[i].tcp >= 0)
		i++;
	if (pending >= MAX_PENDS)
		return false;
	if (i == npends) {
		struct pend *t = realloc(pends, (size_t)(npends + 16) * sizeof(*t));
		if (!t)
			return false;
		pends = t;
		for (int k = npends; k < npends + 16; k++)
			pends[k].tcp = -1;
		npends += 16;
	}
	struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = SV_TAG_CONN | (uint32_t)i };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, tcp, &ev))
		return false;
	if (blocking)
		syscall(SYS_getsockopt, tcp, SOL_SOCKET, SO_SNDTIMEO, &tv, &tl);
	uint64_t wait = blocking ? (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000 : 2000;
	pends[i] = (struct pend){ *n, copy, tcp, tino, blocking, port, wait ? now_ms() + wait : 0 };
	pending++;
	return true;
}

/* Lets go of entry i; its call is answered by the caller (or gone). */
static struct pend unpend(int ep, int i)
{
	struct pend p = pends[i];
	epoll_ctl(ep, EPOLL_CTL_DEL, p.tcp, NULL);
	pends[i].tcp = -1;
	pending--;
	return p;
}

/* The handshake of a connect made here has ended (the TCP file is
 * writable): the switch, or TCP's answer. */
static void handshake_ended(int lfd, int ep, const struct seccomp_notif *n, int copy, int tcp, unsigned long tino,
			    bool blocking, unsigned port)
{
	struct pollfd pf = { copy, POLLOUT, 0 };
	int err = 0;
	socklen_t el = sizeof(err);

	poll(&pf, 1, 0); /* the library's poll: the switch, when claimed or ready */
	/* The library's SO_ERROR: its poll has read the kernel's (a refused
	 * handshake) and keeps it for the socket's next look. */
	bool fast = sv_domain(copy) == AF_UNIX;
	if (!fast && blocking)
		getsockopt(copy, SOL_SOCKET, SO_ERROR, &err, &el);
	finish(lfd, ep, n, copy, tcp, tino, fast, blocking ? -err : -EINPROGRESS, port);
}

/* Whether the handshake of TCP file tcp has ended already (the kernel's
 * poll, no wait): on loopback it usually has by the time connect says
 * EINPROGRESS (a plain server's accept queue took it at once). */
static bool ended_now(int tcp)
{
	struct pollfd pf = { tcp, POLLOUT, 0 };
	return lf__sys_ppoll(&pf, 1, &(struct timespec){ 0, 0 }, NULL) == 1 && (pf.revents & (POLLOUT | POLLERR | POLLHUP));
}

void svc_conn_ready(int lfd, int ep, int i)
{
	if (i >= npends || pends[i].tcp < 0)
		return;
	struct pend p = unpend(ep, i);

	if (!sv_valid(lfd, p.n.id)) { /* the caller is gone (killed) */
		close(p.copy);
		syscall(SYS_close, p.tcp);
		return;
	}
	handshake_ended(lfd, ep, &p.n, p.copy, p.tcp, p.tino, p.blocking, p.port);
}

/* A held call that must be answered before its handshake has ended:
 * SO_SNDTIMEO's deadline (err -EINPROGRESS), or a signal for a handler
 * of the program during a blocking connect (err -ERESTARTSYS, the
 * kernel's own answer there: the handler runs, then the connect fails
 * with EINTR, or is restarted under SA_RESTART). Switched if the
 * handshake has just ended (the library's poll); otherwise the hello is
 * withdrawn (closing the copy closes it: the server treats a hello whose
 * client has gone as none) and the connection goes on in the kernel as
 * plain TCP, as TCP's own does after such an answer: a connect again
 * (the restart) sees the hello's mark and is the kernel's (EALREADY,
 * then 0 or EISCONN). The server can accept the connection only once its
 * handshake has ended, so it cannot have claimed the hello before the
 * close, except in the instant between the poll and the close. */
static void give_up(int lfd, int ep, int i, int err)
{
	struct pend p = unpend(ep, i);
	struct pollfd pf = { p.copy, POLLOUT, 0 };

	poll(&pf, 1, 0);
	bool fast = sv_domain(p.copy) == AF_UNIX;
	if (fast)
		err = p.blocking ? 0 : -EINPROGRESS;
	finish(lfd, ep, &p.n, p.copy, p.tcp, p.tino, fast, err, p.port);
}

bool svc_pending(void)
{
	return pending > 0;
}

void svc_tick(int lfd, int ep)
{
	uint64_t now = now_ms();

	for (int i = 0; i < npends; i++) {
		if (pends[i].tcp < 0)
			continue;
		if (!sv_valid(lfd, pends[i].n.id)) {
			struct pend p = unpend(ep, i);
			close(p.copy);
			syscall(SYS_close, p.tcp);
		} else if (pends[i].deadline && now >= pends[i].deadline) {
			give_up(lfd, ep, i, -EINPROGRESS);
		} else if (pends[i].blocking && sv_handler_due(pends[i].n.pid)) {
			SV_DEBUG("connect of %d: a signal for a handler: interrupted, plain TCP", pends[i].n.pid);
			give_up(lfd, ep, i, -SV_ERESTARTSYS);
		}
	}
}

/* ---- the trapped calls */

void svc_connect(int lfd, int ep, const struct seccomp_notif *n)
{
	struct sockaddr_storage ss;
	socklen_t len = (socklen_t)n->data.args[2];
	int fd = (int)n->data.args[0];
	struct lf_ep dst;

	/* The address is read once, here, and only this copy is used (the
	 * program cannot change it under us); then the call is checked to be
	 * still waiting, so that the memory read was the caller's. */
	if (len < sizeof(sa_family_t) || len > sizeof(ss) || !sv_read(n->pid, n->data.args[1], &ss, len) ||
	    !sv_valid(lfd, n->id) || !lf__ep_from_sockaddr(&dst, (void *)&ss, len) || !lf__ep_is_loopback(&dst))
		return sv_reply(lfd, n->id, 0, true);
	svs_check_port(dst.port);
	int copy = sv_grab(lfd, n, fd), tcp = -1;
	struct stat st;
	if (copy >= 0 && sv_domain(copy) == AF_UNIX && lf_fast_path_active(copy) == 1) {
		int r = connect_again(copy);
		close(copy);
		return sv_reply(lfd, n->id, r, false);
	}
	if (copy >= 0 && (hello_sent(copy) || !sv_wanted(copy))) {
		close(copy);
		return sv_reply(lfd, n->id, 0, true);
	}
	/* In an epoll set already: the registration is the TCP file's, which
	 * the switch would take away (supervise_epoll.c): plain TCP. */
	if (copy >= 0 && sve_registered(n->pid, fd, copy)) {
		SV_DEBUG("connect fd %d of %d: registered in an epoll before connect: plain TCP", fd, n->pid);
		close(copy);
		return sv_reply(lfd, n->id, 0, true);
	}
	/* One fstat of the socket, for the owner check and the switch's
	 * inode (tcp's: the same file). */
	if (copy < 0 || fstat(copy, &st) || (tcp = (int)syscall(SYS_fcntl, copy, F_DUPFD_CLOEXEC, 0)) < 0 ||
	    lf_enable_fast_path(copy) || !sv_may_switch(copy, n->pid, &st)) {
		if (copy >= 0)
			close(copy);
		if (tcp >= 0)
			syscall(SYS_close, tcp);
		return sv_reply(lfd, n->id, 0, true);
	}
	/* Never waits here: a blocking socket is made non-blocking for the
	 * library's connect (the program is held in this very call; only
	 * another thread's F_GETFL at that moment would see it), and a
	 * handshake in progress is finished later (conn_ready). */
	sv_note_options(copy);
	long fl = syscall(SYS_fcntl, copy, F_GETFL);
	bool blocking = fl >= 0 && !(fl & O_NONBLOCK);
	if (blocking)
		syscall(SYS_fcntl, copy, F_SETFL, fl | O_NONBLOCK);
	int r = connect(copy, (void *)&ss, len), e = r ? errno : 0;
	if (blocking)
		syscall(SYS_fcntl, copy, F_SETFL, fl);
	bool fast = sv_domain(copy) == AF_UNIX;
	if (r && e == EINPROGRESS && !fast && ended_now(tcp))
		return handshake_ended(lfd, ep, n, copy, tcp, st.st_ino, blocking, dst.port); /* as the loop would at once */
	if (r && e == EINPROGRESS && !fast && pend(ep, n, copy, tcp, st.st_ino, blocking, dst.port))
		return;
	if (blocking && r && e == EINPROGRESS && fast)
		r = e = 0; /* switched: its handshake is done, and a blocking connect says so */
	/* Not held (out of room): EINPROGRESS, TCP's answer to a connect
	 * whose wait ended (SO_SNDTIMEO); the handshake goes on. */
	finish(lfd, ep, n, copy, tcp, st.st_ino, fast, r ? -e : 0, dst.port);
}

/* getsockname, getpeername: a fast-path socket answers TCP's addresses
 * (the library's interposed calls translate its names); anything else is
 * the kernel's. */
void svc_name(int lfd, const struct seccomp_notif *n, bool peer)
{
	struct sockaddr_storage ss;
	socklen_t room, l = sizeof(ss);
	int copy;

	if (!sv_read(n->pid, n->data.args[2], &room, sizeof(room)) || (copy = sv_grab(lfd, n, (int)n->data.args[0])) < 0)
		return sv_reply(lfd, n->id, 0, true);
	int dom = sv_domain(copy);
	int r = dom == AF_UNIX ? (peer ? getpeername : getsockname)(copy, (void *)&ss, &l) : -1;
	syscall(SYS_close, copy);
	if (r || ss.ss_family == AF_UNIX || !sv_valid(lfd, n->id))
		return sv_reply(lfd, n->id, 0, true);
	if ((int)room < 0 || !sv_write(n->pid, n->data.args[1], &ss, room < l ? room : l) ||
	    !sv_write(n->pid, n->data.args[2], &l, sizeof(l)))
		return sv_reply(lfd, n->id, -EFAULT, false);
	sv_reply(lfd, n->id, 0, false);
}
