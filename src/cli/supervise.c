/* loopfast run's seccomp supervisor: the fast path for programs the
 * preload cannot reach (static binaries, Go binaries, which make their
 * socket calls themselves). A first cut; docs/supervisor.md says what it
 * does and what it does not.
 *
 * The child installs a seccomp filter before exec (with no_new_privs)
 * that sends connect, getsockname, getpeername and getsockopt(SO_DOMAIN,
 * SO_PROTOCOL) to this process
 * (SECCOMP_RET_USER_NOTIF) and allows everything else; the filter holds
 * for every descendant. For a connect to a loopback address this process
 * takes a copy of the program's socket (pidfd_getfd), opts it in and
 * connects it through libloopfast's own connect (the same negotiation as
 * the preload's: hello, doorbell, switch), then puts the resulting Unix
 * socket in the program under the same fd number
 * (SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SETFD) and answers
 * the connect as libloopfast's connect answered it. Anything else
 * (another address, a socket that is not TCP, any failure before the
 * connect is made) is left to the kernel (SECCOMP_USER_NOTIF_FLAG_CONTINUE):
 * the program's own connect, plain TCP.
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
 * TCP's addresses, getsockopt SO_DOMAIN and SO_PROTOCOL with TCP's values
 * (the library's own answers, from the socket's names).
 *
 * Caveats: one thread serves every trapped call, so a connect that waits
 * (a full accept queue) holds up the others; socket options and
 * epoll registrations made before the connect are not carried over; the
 * server side (listen, accept) is not trapped: a supervised server is
 * plain TCP. */
#include "cli.h"
#include "internal.h"
#include "loopfast.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "loopfast run's supervisor knows x86_64 and aarch64 only"
#endif

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS /* 6.6; older headers */
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif
#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

static bool debug;
#define DEBUG(...) do { if (debug) { fprintf(stderr, "loopfast: supervisor: " __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* ---- which programs */

/* Why path needs the supervisor ("a static binary", "a Go binary"), or
 * NULL: an ELF file with no PT_INTERP (static, static-pie), or one with
 * Go's build-info section (Go makes its socket calls itself, libc or
 * not). Whatever cannot be read is left to the preload. */
const char *lf_cli_supervise_why(const char *path)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	Elf64_Shdr sh, strs;
	const char *why = "a static binary";
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)) {
		close(fd);
		return NULL;
	}
	for (int i = 0; i < eh.e_phnum && why; i++)
		if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (Elf64_Off)i * eh.e_phentsize)) != sizeof(ph) ||
		    ph.p_type == PT_INTERP)
			why = NULL;
	if (!why && eh.e_shstrndx != SHN_UNDEF && eh.e_shstrndx < eh.e_shnum &&
	    pread(fd, &strs, sizeof(strs), (off_t)(eh.e_shoff + (Elf64_Off)eh.e_shstrndx * eh.e_shentsize)) ==
		    sizeof(strs)) {
		for (int i = 0; i < eh.e_shnum && !why; i++) {
			char name[32] = "";
			if (pread(fd, &sh, sizeof(sh), (off_t)(eh.e_shoff + (Elf64_Off)i * eh.e_shentsize)) != sizeof(sh) ||
			    pread(fd, name, sizeof(name) - 1, (off_t)(strs.sh_offset + sh.sh_name)) <= 0)
				continue;
			if (!strcmp(name, ".go.buildinfo") || !strcmp(name, ".note.go.buildid"))
				why = "a Go binary";
		}
	}
	close(fd);
	return why;
}

/* ---- the child: filter, then exec */

static int install_filter(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_connect, 9, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getsockname, 8, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getpeername, 7, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getsockopt, 0, 5),
		/* getsockopt: only SOL_SOCKET's SO_DOMAIN and SO_PROTOCOL (the
		 * low halves of the arguments: little-endian), the two a Unix
		 * socket answers otherwise than TCP; every other option is the
		 * kernel's, untrapped. */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOL_SOCKET, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SO_DOMAIN, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SO_PROTOCOL, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	/* Go preempts its threads with SIGURG all the time: once we have the
	 * call, only a fatal signal ends the wait (5.19 and later). */
	int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
			      SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &prog);
	if (fd < 0 && errno == EINVAL)
		fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	return fd;
}

static void send_fd(int sock, int fd)
{
	char c = 0, cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &c, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	(void)syscall(SYS_sendmsg, sock, &m, 0);
}

static int recv_fd(int sock)
{
	char c, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &c, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	int fd = -1;

	if (syscall(SYS_recvmsg, sock, &m, MSG_CMSG_CLOEXEC) <= 0)
		return -1;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	if (cm && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

static _Noreturn void child(int sock, const char *path, char **argv, const sigset_t *mask)
{
	sigprocmask(SIG_SETMASK, mask, NULL);
	int fd = install_filter();
	if (fd < 0)
		fprintf(stderr, "loopfast: cannot install the seccomp filter for %s: %s\n", path, strerror(errno));
	send_fd(sock, fd);
	if (fd < 0)
		_exit(126);
	syscall(SYS_close, fd);
	syscall(SYS_close, sock);
	execv(path, argv);
	int e = errno;
	fprintf(stderr, "loopfast: cannot run '%s': %s\n", path, strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

/* ---- talking to the kernel about a notification */

static void reply(int lfd, uint64_t id, int err, bool cont)
{
	struct seccomp_notif_resp r = { .id = id, .error = err,
					.flags = cont ? SECCOMP_USER_NOTIF_FLAG_CONTINUE : 0 };
	ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, &r); /* ENOENT: the caller is gone */
}

static bool still_valid(int lfd, uint64_t id)
{
	return ioctl(lfd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

static bool read_mem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec l = { buf, len }, r = { (void *)(uintptr_t)addr, len };
	return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)len;
}

static bool write_mem(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec l = { (void *)buf, len }, r = { (void *)(uintptr_t)addr, len };
	return len == 0 || process_vm_writev(pid, &l, 1, &r, 1, 0) == (ssize_t)len;
}

/* A copy of fd of thread tid (in this process, close-on-exec), or -1. */
static int grab(pid_t tid, int fd)
{
	int pfd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD);
	if (pfd < 0)
		return -1;
	int copy = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
	syscall(SYS_close, pfd);
	return copy;
}

/* The kernel's answer (libloopfast's getsockopt answers TCP's for a
 * fast-path socket). */
static int domain_of(int fd)
{
	int v = -1;
	socklen_t l = sizeof(v);
	return syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &v, &l) ? -1 : v;
}

/* A process of the tree that has the preload too (a nested loopfast run)
 * negotiates its connections itself: its doorbell, whose SYN carries the
 * hello's MSS, is its own to connect (never negotiated twice). */
static bool hello_sent(int fd)
{
	int mss = 0;
	socklen_t l = sizeof(mss);
	return syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &l) == 0 && mss == LF_HELLO_MSS;
}

/* Whether fd of thread tid is close-on-exec (fdinfo's flags). */
static bool cloexec_of(pid_t tid, int fd)
{
	char p[64], buf[256];
	snprintf(p, sizeof(p), "/proc/%d/fdinfo/%d", tid, fd);
	int f = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = f >= 0 ? read(f, buf, sizeof(buf) - 1) : -1;
	if (f >= 0)
		close(f);
	if (n <= 0)
		return false;
	buf[n] = 0;
	char *fl = strstr(buf, "flags:");
	return fl && (strtoul(fl + 6, NULL, 8) & O_CLOEXEC);
}

/* ---- connections waiting for their claim */

struct watch {
	int copy; /* our copy of the program's Unix socket (the library knows its bell) */
	int tcp;  /* a dup of the TCP socket, the bell's file, for our epoll */
};
static struct watch *watches;
static int nwatches;
#define TAG_WATCH 0x10000u

static void watch_end(int ep, int i)
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
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = TAG_WATCH | (uint32_t)i };
	watches[i] = (struct watch){ copy, tcp };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, tcp, &ev) == 0)
		return;
	watches[i].copy = watches[i].tcp = -1;
no: /* cannot watch: the verdict is left to the library's next look */
	close(copy);
	syscall(SYS_close, tcp);
}

/* ---- the trapped calls */

static void on_connect(int lfd, int ep, const struct seccomp_notif *n)
{
	struct sockaddr_storage ss;
	socklen_t len = (socklen_t)n->data.args[2];
	int fd = (int)n->data.args[0];
	struct lf_ep dst;

	/* The address is read once, here, and only this copy is used (the
	 * program cannot change it under us); then the call is checked to be
	 * still waiting, so that the memory read was the caller's. */
	if (len < sizeof(sa_family_t) || len > sizeof(ss) || !read_mem(n->pid, n->data.args[1], &ss, len) ||
	    !still_valid(lfd, n->id) || !lf__ep_from_sockaddr(&dst, (void *)&ss, len) || !lf__ep_is_loopback(&dst))
		return reply(lfd, n->id, 0, true);
	int copy = grab(n->pid, fd), tcp = -1;
	if (copy >= 0 && hello_sent(copy)) {
		close(copy);
		return reply(lfd, n->id, 0, true);
	}
	if (copy < 0 || (tcp = (int)syscall(SYS_fcntl, copy, F_DUPFD_CLOEXEC, 0)) < 0 || lf_enable_fast_path(copy)) {
		if (copy >= 0)
			close(copy);
		if (tcp >= 0)
			syscall(SYS_close, tcp);
		return reply(lfd, n->id, 0, true);
	}
	int r = connect(copy, (void *)&ss, len), e = r ? errno : 0;
	if (r && e == EINPROGRESS && domain_of(copy) != AF_UNIX) {
		/* The handshake is still in progress, the hello queued: the
		 * switch must happen while we hold the call (only then can we
		 * replace the program's fd). Bounded: past it the program keeps
		 * the TCP socket in progress, and the server drops the hello. */
		struct pollfd p = { copy, POLLOUT, 0 };
		poll(&p, 1, 2000);
	}
	if (domain_of(copy) == AF_UNIX) {
		struct seccomp_notif_addfd add = { .id = n->id, .flags = SECCOMP_ADDFD_FLAG_SETFD, .srcfd = (uint32_t)copy,
						   .newfd = (uint32_t)fd,
						   .newfd_flags = cloexec_of(n->pid, fd) ? O_CLOEXEC : 0 };
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_ADDFD, &add) < 0) {
			/* The caller is gone (ENOENT), or its fd table is full:
			 * either way the connection is unusable. */
			DEBUG("fd %d of %d: cannot put the fast-path socket in place: %s", fd, n->pid, strerror(errno));
			reply(lfd, n->id, -ECONNRESET, false);
			close(copy);
			syscall(SYS_close, tcp);
			return;
		}
		DEBUG("connect fd %d of %d to port %u: fast path (%s)", fd, n->pid, dst.port, r ? strerror(e) : "0");
		reply(lfd, n->id, r ? -e : 0, false);
		watch_add(ep, copy, tcp);
		return;
	}
	/* Plain TCP, made here on the program's socket: its answer. */
	DEBUG("connect fd %d of %d to port %u: plain TCP (%s)", fd, n->pid, dst.port, r ? strerror(e) : "0");
	reply(lfd, n->id, r ? -e : 0, false);
	close(copy);
	syscall(SYS_close, tcp);
}

/* getsockname, getpeername: a fast-path socket answers TCP's addresses
 * (the library's interposed calls translate its names); anything else is
 * the kernel's. */
static void on_name(int lfd, const struct seccomp_notif *n, bool peer)
{
	struct sockaddr_storage ss;
	socklen_t room, l = sizeof(ss);
	int copy;

	if (!read_mem(n->pid, n->data.args[2], &room, sizeof(room)) || (copy = grab(n->pid, (int)n->data.args[0])) < 0)
		return reply(lfd, n->id, 0, true);
	int dom = domain_of(copy);
	int r = dom == AF_UNIX ? (peer ? getpeername : getsockname)(copy, (void *)&ss, &l) : -1;
	syscall(SYS_close, copy);
	if (r || ss.ss_family == AF_UNIX || !still_valid(lfd, n->id))
		return reply(lfd, n->id, 0, true);
	if ((int)room < 0 || !write_mem(n->pid, n->data.args[1], &ss, room < l ? room : l) ||
	    !write_mem(n->pid, n->data.args[2], &l, sizeof(l)))
		return reply(lfd, n->id, -EFAULT, false);
	reply(lfd, n->id, 0, false);
}

/* getsockopt SO_DOMAIN, SO_PROTOCOL (the only ones the filter traps): a
 * fast-path socket answers TCP's (the library's getsockopt, from the
 * socket's names); anything else is the kernel's. */
static void on_opt(int lfd, const struct seccomp_notif *n)
{
	socklen_t room, l = sizeof(int);
	int v, copy;

	if (!read_mem(n->pid, n->data.args[4], &room, sizeof(room)) || (copy = grab(n->pid, (int)n->data.args[0])) < 0)
		return reply(lfd, n->id, 0, true);
	int r = domain_of(copy) == AF_UNIX ? getsockopt(copy, SOL_SOCKET, (int)n->data.args[2], &v, &l) : -1;
	close(copy);
	if (r || l != sizeof(int) || (n->data.args[2] == SO_DOMAIN && v == AF_UNIX) || (int)room < (int)sizeof(int) ||
	    !still_valid(lfd, n->id))
		return reply(lfd, n->id, 0, true);
	if (!write_mem(n->pid, n->data.args[3], &v, sizeof(v)) || !write_mem(n->pid, n->data.args[4], &l, sizeof(l)))
		return reply(lfd, n->id, -EFAULT, false);
	reply(lfd, n->id, 0, false);
}

static void serve(int lfd, int ep, struct seccomp_notif *n, size_t size)
{
	memset(n, 0, size);
	if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, n) < 0)
		return; /* EINTR, or ENOENT: the caller went away */
	if (n->data.nr == __NR_connect)
		on_connect(lfd, ep, n);
	else if (n->data.nr == __NR_getsockname || n->data.nr == __NR_getpeername)
		on_name(lfd, n, n->data.nr == __NR_getpeername);
	else if (n->data.nr == __NR_getsockopt)
		on_opt(lfd, n);
	else
		reply(lfd, n->id, 0, true);
}

/* ---- the supervisor */

static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT };

/* Runs path under the filter and serves its calls until the whole tree
 * under it has ended (a subreaper: orphans come to us); returns as the
 * program ended: its exit code, or dies of its signal. */
int lf_cli_supervise(const char *path, char **argv, const char *why)
{
	sigset_t block, old;
	int sv[2], lfd, ep, sfd, status = 0;
	pid_t pid;

	debug = getenv("LOOPFAST_DEBUG") && *getenv("LOOPFAST_DEBUG") && strcmp(getenv("LOOPFAST_DEBUG"), "0");
	DEBUG("%s is %s: supervised (seccomp user notification)", path, why);
	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	for (unsigned i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&block, forwarded[i]);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return lf_cli_error("run: socketpair: %s", strerror(errno));
	sigprocmask(SIG_BLOCK, &block, &old);
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	if ((pid = fork()) < 0)
		return lf_cli_error("run: fork: %s", strerror(errno));
	if (pid == 0)
		child(sv[1], path, argv, &old);
	signal(SIGPIPE, SIG_IGN);
	close(sv[1]);
	lfd = recv_fd(sv[0]);
	close(sv[0]);
	sfd = signalfd(-1, &block, SFD_CLOEXEC | SFD_NONBLOCK);
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event e1 = { .events = EPOLLIN, .data.u64 = 1 }, e2 = { .events = EPOLLIN, .data.u64 = 2 };
	if (sfd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &e2))
		return lf_cli_error("run: cannot watch signals: %s", strerror(errno));
	if (lfd >= 0)
		epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &e1);
	/* 6.6 and later: the program's thread and ours hand over on one CPU
	 * (the kernel's selftest: about 3 us a round trip instead of 9). */
	if (lfd >= 0)
		ioctl(lfd, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);

	struct seccomp_notif_sizes sz = { 0 };
	syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz);
	size_t nsize = sz.seccomp_notif > sizeof(struct seccomp_notif) ? sz.seccomp_notif : sizeof(struct seccomp_notif);
	struct seccomp_notif *n = calloc(1, nsize);
	bool main_done = false;

	for (;;) {
		struct epoll_event ev[16];
		int k = epoll_wait(ep, ev, 16, -1);
		for (int i = 0; i < k; i++) {
			uint64_t t = ev[i].data.u64;
			if (t == 1 && (ev[i].events & EPOLLIN)) {
				serve(lfd, ep, n, nsize);
			} else if (t == 1) { /* no process is left under the filter */
				epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL);
			} else if (t & TAG_WATCH) {
				watch_end(ep, (int)(t & 0xffff));
			} else if (t == 2) {
				struct signalfd_siginfo si;
				while (read(sfd, &si, sizeof(si)) == sizeof(si))
					if (si.ssi_signo != SIGCHLD && !main_done)
						kill(pid, (int)si.ssi_signo);
			}
		}
		/* Reap: the program, and the orphans of its tree. */
		for (;;) {
			int st;
			pid_t w = waitpid(-1, &st, WNOHANG);
			if (w == pid) {
				status = st;
				main_done = true;
			}
			if (w > 0)
				continue;
			if (w < 0 && errno == ECHILD && main_done)
				goto out;
			break;
		}
	}
out:
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		signal(sig, SIG_DFL);
		sigset_t one;
		sigemptyset(&one);
		sigaddset(&one, sig);
		sigprocmask(SIG_UNBLOCK, &one, NULL);
		raise(sig);
		return 128 + sig;
	}
	return WEXITSTATUS(status);
}
