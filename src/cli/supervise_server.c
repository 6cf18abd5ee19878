/* loopfast run's seccomp supervisor, the server's side
 * (docs/supervisor.md). Nothing of the protocol is here: the listener's
 * rendezvous, the claim of a hello and every check the claim makes are
 * libloopfast's (listener.c, claim.c), called through its listen and
 * accept4 on this process's copy of the program's listener.
 *
 * listen(fd): this process takes a copy of the program's socket
 * (pidfd_getfd: the same open file), opts it in and calls libloopfast's
 * listen on it: the rendezvous is made as the preload makes it, before
 * the kernel's listen, and the listen is the program's (one socket).
 * The copy is kept (the library knows the listener by it) for as long as
 * the supervised tree holds the listener: a sweep of the tree's
 * descriptors (at most once a second, and before every bind) lets go of
 * the listeners the program has closed, so that their port is free again
 * and clients are refused as over TCP.
 *
 * accept(fd), accept4(fd): on a listener kept here, the accept is made
 * here by libloopfast's accept4 on the copy (the claim: a connection
 * whose client queued a hello becomes its Unix socket), and the result,
 * fast path or plain TCP, is put in the program as the call's return
 * value (SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SEND), with
 * the peer's TCP address written where accept writes it. A blocking
 * listener with nothing to accept parks the call: a dup of the copy is
 * watched and the accept made when a connection arrives. A parked call that a signal
 * handler of the program should interrupt (looked at every 100 ms) is
 * answered -ERESTARTSYS, the kernel's own answer there: the handler runs,
 * and the accept is restarted (SA_RESTART) or fails with EINTR, as over
 * TCP; one whose listener has SO_RCVTIMEO is answered EAGAIN once it has
 * passed. The options the program set on a listener before it was served
 * are noted so that the claim carries them to each accepted Unix socket
 * (sv_note_options). Any other listener (not opted in, another uid's, one
 * a process with the preload, or with libloopfast linked in, made a
 * rendezvous for already) is left to the kernel. */
#include "supervise.h"
#include "loopfast.h"
#include "protocol.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_PARKS 1024

/* The listeners served here: the socket's inode, its port and this
 * process's copy. */
struct held {
	unsigned long ino;
	int copy;
	unsigned port;
};
static struct held *held;
static int nheld;

/* Blocking accepts waiting for a connection. */
struct park {
	uint64_t id;
	pid_t pid;
	int copy;  /* the held listener's copy */
	int dup;   /* a dup of it in the loop's epoll (one per park) */
	int flags; /* accept4's */
	uint64_t addr, lenp;
	socklen_t room;
	uint64_t deadline; /* SO_RCVTIMEO's end (ms, CLOCK_MONOTONIC); 0: none */
};
static struct park *parks;
static int nparks, parked;

/* Grows a table by 16 free entries (marked by free_entry); false when
 * out of memory. */
static bool grow(void **tab, int *n, size_t size, void (*free_entry)(void *))
{
	char *t = realloc(*tab, (size_t)(*n + 16) * size);
	if (!t)
		return false;
	for (int k = *n; k < *n + 16; k++)
		free_entry(t + (size_t)k * size);
	*tab = t;
	*n += 16;
	return true;
}

static void held_free(void *e)
{
	((struct held *)e)->copy = -1;
}

static void park_free(void *e)
{
	((struct park *)e)->dup = -1;
}

/* The held listener (its index) that the program's fd is, or -1. First
 * one kcmp (KCMP_FILE) against the listener the last accept found: the
 * same open file as our copy (pidfd_getfd gave us the program's file) is
 * that listener, since a socket has one open file (it cannot be opened
 * again, only shared). Otherwise by the fd's inode (pidfd_getfd, fstat,
 * close), as for the first accept. kcmp names the caller by thread id:
 * the caller checks the call is still waiting (NOTIF_ID_VALID) before it
 * acts, so that the id was not reused meanwhile. */
static int last_held = -1;

static int held_of(int lfd, const struct seccomp_notif *n, int fd)
{
	struct stat st;

	if (last_held >= 0 && last_held < nheld && held[last_held].copy >= 0 &&
	    syscall(SYS_kcmp, n->pid, getpid(), KCMP_FILE, fd, held[last_held].copy) == 0)
		return last_held;
	int copy = sv_grab(lfd, n, fd);
	bool ok = copy >= 0 && fstat(copy, &st) == 0;
	if (copy >= 0)
		syscall(SYS_close, copy);
	for (int i = 0; ok && i < nheld; i++)
		if (held[i].copy >= 0 && held[i].ino == (unsigned long)st.st_ino)
			return last_held = i;
	return -1;
}

static unsigned long held_ino(int copy)
{
	for (int i = 0; i < nheld; i++)
		if (held[i].copy == copy)
			return held[i].ino;
	return 0;
}

int svs_listener(unsigned long ino)
{
	for (int i = 0; i < nheld; i++)
		if (held[i].copy >= 0 && held[i].ino == ino)
			return held[i].copy;
	return -1;
}

bool svs_listening(void)
{
	for (int i = 0; i < nheld; i++)
		if (held[i].copy >= 0)
			return true;
	return false;
}

bool svs_parked(void)
{
	return parked > 0;
}

void svs_keep(int copy)
{
	struct stat st;
	int i = 0;

	if (fstat(copy, &st)) {
		close(copy);
		return;
	}
	sv_note_options(copy);
	while (i < nheld && held[i].copy >= 0)
		i++;
	if (i == nheld && !grow((void **)&held, &nheld, sizeof(*held), held_free)) {
		close(copy); /* the library's close: the rendezvous goes, the listener is plain TCP */
		return;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	unsigned port = 0;
	if (syscall(SYS_getsockname, copy, &ss, &sl) == 0)
		port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						      : ((struct sockaddr_in *)&ss)->sin_port);
	held[i] = (struct held){ (unsigned long)st.st_ino, copy, port };
}

/* The listeners the tree no longer holds (closed, or passed out of it):
 * let go, so that the port is free and clients are refused as over TCP.
 * Not one with a parked accept: that accept keeps it, as the kernel's
 * would. */
/* Whether listener i has a parked accept (which keeps it, as the
 * kernel's would). */
static bool busy(int i)
{
	for (int k = 0; k < nparks; k++)
		if (parks[k].dup >= 0 && parks[k].copy == held[i].copy)
			return true;
	return false;
}

static bool gone(int i, const unsigned long *inos, size_t n)
{
	return held[i].copy >= 0 && !busy(i) && !sv_has_inode(inos, n, held[i].ino);
}

bool svs_missing(const unsigned long *inos, size_t n)
{
	for (int i = 0; i < nheld; i++)
		if (gone(i, inos, n))
			return true;
	return false;
}

static void let_go(int i)
{
	SV_DEBUG("listener inode %lu: closed by the program, its rendezvous goes", held[i].ino);
	close(held[i].copy);
	held[i].copy = -1;
}

void svs_sweep(const unsigned long *inos, size_t n)
{
	for (int i = 0; i < nheld; i++)
		if (gone(i, inos, n))
			let_go(i);
}

/* Before a connect to port: a listener on it that the program has closed
 * since the last sweep is let go now, so that the connect is refused as
 * over TCP rather than taken by our copy (and reset at the sweep). Looks
 * only for that listener's inode, stopping where it is found. */
void svs_check_port(unsigned port)
{
	for (int i = 0; i < nheld; i++)
		if (held[i].copy >= 0 && held[i].port == port && !busy(i) && !sv_tree_holds(held[i].ino))
			let_go(i);
}

static bool tcp_socket(int fd)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) || v != IPPROTO_TCP)
		return false;
	return sv_domain(fd) == AF_INET || sv_domain(fd) == AF_INET6;
}

/* Whether the listener's rendezvous exists already: the program's own
 * libloopfast made it (a program linked with it opts its listener in
 * before listen): that process negotiates, not this one. */
static bool rendezvous_made(int family, unsigned long ino)
{
	struct sockaddr_un sun;
	socklen_t len = lf__name_listener(&sun, family, ino);
	int s = (int)syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool made = s >= 0 && syscall(SYS_bind, s, &sun, len) < 0 && errno == EADDRINUSE;

	if (s >= 0)
		syscall(SYS_close, s);
	return made;
}

void svs_listen(int lfd, const struct seccomp_notif *n)
{
	int copy = sv_grab(lfd, n, (int)n->data.args[0]), v = 0;
	socklen_t vl = sizeof(v);
	struct stat st;

	if (copy < 0)
		return sv_reply(lfd, n->id, 0, true);
	/* A listener served already (listen again: a new backlog), another
	 * kind of socket, one the program did not opt in, one of another
	 * uid, or a process that negotiates itself: the kernel's listen. */
	if (fstat(copy, &st) || svs_listener((unsigned long)st.st_ino) >= 0 || !tcp_socket(copy) || !sv_wanted(copy) ||
	    !sv_may_switch(copy, n->pid, &st) || sv_has_preload(n->pid) ||
	    rendezvous_made(sv_domain(copy), (unsigned long)st.st_ino) || !sv_valid(lfd, n->id) ||
	    lf_enable_fast_path(copy)) {
		syscall(SYS_close, copy);
		return sv_reply(lfd, n->id, 0, true);
	}
	int r = listen(copy, (int)n->data.args[1]), e = errno;
	if (r == 0 && getsockopt(copy, SOL_LOOPFAST, LOOPFAST_FAST_PATH, &v, &vl) == 0 && v) {
		SV_DEBUG("listen fd %d of %d (inode %lu): rendezvous made", (int)n->data.args[0], n->pid,
			 (unsigned long)st.st_ino);
		svs_keep(copy);
	} else {
		SV_DEBUG("listen fd %d of %d: %s", (int)n->data.args[0], n->pid, r ? strerror(e) : "plain TCP only");
		close(copy);
	}
	sv_reply(lfd, n->id, r ? -e : 0, false);
}

/* The accept itself, on the held copy (libloopfast's accept4: the claim),
 * its result put in the program. It never waits: a blocking listener is
 * made non-blocking for the call (the program's accepts all wait here,
 * so none of them sees it; only an F_GETFL at that moment would), and
 * when nothing is queued (another accept took it, one this process does
 * not see: io_uring) a blocking call is not answered: false, park it. */
static bool accept_now(int lfd, uint64_t id, pid_t pid, int copy, int flags, uint64_t addr, uint64_t lenp,
		       socklen_t room)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	long fl = syscall(SYS_fcntl, copy, F_GETFL);
	bool blocking = fl >= 0 && !(fl & O_NONBLOCK);

	if (blocking)
		syscall(SYS_fcntl, copy, F_SETFL, fl | O_NONBLOCK);
	int nfd = accept4(copy, (void *)&ss, &sl, flags | SOCK_CLOEXEC), e = errno;
	if (blocking)
		syscall(SYS_fcntl, copy, F_SETFL, fl);
	if (nfd < 0 && blocking && (e == EAGAIN || e == EWOULDBLOCK))
		return false;
	if (nfd < 0) {
		sv_reply(lfd, id, -e, false);
		return true;
	}
	if (addr && (!sv_write(pid, addr, &ss, room < sl ? room : sl) || !sv_write(pid, lenp, &sl, sizeof(sl)))) {
		close(nfd); /* as the kernel: the connection is lost with the fault */
		sv_reply(lfd, id, -EFAULT, false);
		return true;
	}
	bool fast = sv_domain(nfd) == AF_UNIX;
	struct stat nst;
	unsigned long lino = fast ? held_ino(copy) : 0;
	bool known = lino && fstat(nfd, &nst) == 0;
	if (known) /* what the claim carried from the listener */
		svo_inherit(lino, (unsigned long)nst.st_ino);
	struct seccomp_notif_addfd add = { .id = id, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = (uint32_t)nfd,
					   .newfd_flags = (flags & SOCK_CLOEXEC) ? O_CLOEXEC : 0 };
	int r = ioctl(lfd, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
	e = errno;
	close(nfd);
	if (r < 0) {
		/* The caller is gone (ENOENT: the connection goes with it), or
		 * its table is full: it gets the kernel's EMFILE, and this one
		 * connection is lost (the kernel's accept would have left it
		 * queued). */
		SV_DEBUG("accept of %d: cannot put the connection in place: %s", pid, strerror(e));
		sv_reply(lfd, id, e == ENOENT ? -EINTR : -e, false);
		return true;
	}
	if (known)
		svo_switched((unsigned long)nst.st_ino);
	SV_DEBUG("accept of %d: fd %d, %s", pid, r, fast ? "fast path" : "plain TCP");
	return true;
}

static void unpark(int ep, int i)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, parks[i].dup, NULL);
	syscall(SYS_close, parks[i].dup);
	parks[i].dup = -1;
	parked--;
}

void svs_accept(int lfd, int ep, const struct seccomp_notif *n)
{
	int i = held_of(lfd, n, (int)n->data.args[0]), h = i >= 0 ? held[i].copy : -1;
	int flags = n->data.nr == __NR_accept4 ? (int)n->data.args[3] : 0;
	uint64_t addr = n->data.args[1], lenp = n->data.args[2];
	socklen_t room = 0;

	if (h < 0)
		return sv_reply(lfd, n->id, 0, true);
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return sv_reply(lfd, n->id, -EINVAL, false);
	if (addr && (!lenp || !sv_read(n->pid, lenp, &room, sizeof(room))))
		return sv_reply(lfd, n->id, -EFAULT, false);
	if ((int)room < 0)
		return sv_reply(lfd, n->id, -EINVAL, false);
	if (!sv_valid(lfd, n->id))
		return;
	if (accept_now(lfd, n->id, n->pid, h, flags, addr, lenp, room))
		return;
	/* Blocking, nothing queued: park the call until a connection comes
	 * (past MAX_PARKS, or without the means to wait here: the kernel's
	 * accept, plain TCP). */
	int d = (int)syscall(SYS_fcntl, h, F_DUPFD_CLOEXEC, 0);
	i = 0;
	while (i < nparks && parks[i].dup >= 0)
		i++;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = SV_TAG_PARK | (uint32_t)i };
	if (parked >= MAX_PARKS || d < 0 || (i == nparks && !grow((void **)&parks, &nparks, sizeof(*parks), park_free)) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, d, &ev)) {
		if (d >= 0)
			syscall(SYS_close, d);
		return sv_reply(lfd, n->id, 0, true);
	}
	/* The listener's SO_RCVTIMEO bounds the wait, as the kernel's accept
	 * (EAGAIN, svs_tick). */
	struct timeval tv = { 0 };
	socklen_t tl = sizeof(tv);
	syscall(SYS_getsockopt, h, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl);
	uint64_t wait = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
	parks[i] = (struct park){ n->id, n->pid, h, d, flags, addr, lenp, room,
				  wait ? lf__sys_now_ns() / 1000000 + wait : 0 };
	parked++;
}

void svs_park_ready(int lfd, int ep, int i)
{
	if (i >= nparks || parks[i].dup < 0)
		return;
	struct park *p = &parks[i];

	if (!sv_valid(lfd, p->id))
		return unpark(ep, i); /* the caller is gone (killed) */
	if (accept_now(lfd, p->id, p->pid, p->copy, p->flags, p->addr, p->lenp, p->room))
		unpark(ep, i); /* else another accept took the connection: still parked */
}

void svs_tick(int lfd, int ep)
{
	for (int i = 0; i < nparks; i++) {
		if (parks[i].dup < 0)
			continue;
		if (!sv_valid(lfd, parks[i].id)) {
			unpark(ep, i);
		} else if (sv_handler_due(parks[i].pid)) {
			SV_DEBUG("accept of %d: a signal for a handler: interrupted", parks[i].pid);
			sv_reply(lfd, parks[i].id, -SV_ERESTARTSYS, false);
			unpark(ep, i);
		} else if (parks[i].deadline && lf__sys_now_ns() / 1000000 >= parks[i].deadline) {
			sv_reply(lfd, parks[i].id, -EAGAIN, false); /* SO_RCVTIMEO's end */
			unpark(ep, i);
		}
	}
}

/* A bind may be for the port of a listener the program closed since the
 * last sweep: sweep first, then the kernel's bind. */
void svs_bind(int lfd, const struct seccomp_notif *n)
{
	if (svs_listening())
		sv_sweep();
	sv_reply(lfd, n->id, 0, true);
}
