/* loopfast run's seccomp supervisor: the fast path for programs the
 * preload cannot reach (static binaries, Go binaries, which make their
 * socket calls themselves); docs/supervisor.md says what it does and
 * what it does not.
 *
 * The child installs a seccomp filter before exec (with no_new_privs
 * unless it may do without: root)
 * that sends the calls that decide a connection's path and what TCP's
 * answers need (connect, listen, accept, accept4, bind, getsockname,
 * getpeername, epoll_create and epoll_create1 (counted only:
 * supervise_epoll.c), getsockopt and setsockopt at the levels and options
 * libloopfast answers for a fast-path socket (supervise_sockopt.c), and
 * the SOL_LOOPFAST level) to this process
 * (SECCOMP_RET_USER_NOTIF) and allows everything else; the filter holds
 * for every descendant. No data call is trapped. This file: the filter,
 * the process model, the notification loop, and which sockets the
 * program opted in (SOL_LOOPFAST); the client's calls are
 * supervise_client.c's, the server's supervise_server.c's. Neither holds
 * any of the protocol: they call libloopfast's connect, listen and
 * accept4 on this process's copies of the program's sockets.
 *
 * Caveats: one thread serves every trapped call, and never waits in one
 * (a blocking accept is parked, a connect's handshake finished when its
 * socket is writable); fcntl's descriptor flags made before the switch
 * are not carried over, and a socket already in an epoll set is not
 * switched. */
#include "cli.h"
#include "internal.h"
#include "loopfast.h"
#include "supervise.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/sockios.h>
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
#include <sys/stat.h>
#include <dirent.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
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

bool sv_debug;
#define DEBUG SV_DEBUG
static bool per_socket; /* --per-socket: only sockets opted in with SOL_LOOPFAST */

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

/* Whether the filter traps SOL_SOCKET option o: unless the library
 * leaves it to the Unix socket (a get of SO_DOMAIN and SO_PROTOCOL, whose
 * answers it fixes up, is trapped). */
#define SV_SOLMAX 256
static bool sv_opt_trapped(int o)
{
	const struct lf_sopt_row *r = lf__sopt_row(SOL_SOCKET, o);
	return !r || r->how != LF_SO_UNIX;
}

/* The filter, assembled with two labels: ALLOW and NOTIF. */
enum { ALLOW = -1, NOTIF = -2, NEXT = 0 };
struct insn {
	uint16_t code;
	uint32_t k;
	int jt, jf; /* NEXT, ALLOW, NOTIF */
};
#define LD(off) { BPF_LD | BPF_W | BPF_ABS, (uint32_t)(off), NEXT, NEXT }
#define IS(val, t, f) { BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(val), t, f }
#define ARG(i) (offsetof(struct seccomp_data, args) + 8 * (i)) /* the low half (little-endian) */

#ifdef __NR_epoll_create /* not on aarch64 */
#define EPOLL_CREATE IS(__NR_epoll_create, NOTIF, NEXT)
#else
#define EPOLL_CREATE IS(__NR_epoll_create1, NOTIF, NEXT)
#endif

/* The filter; with nnp (no_new_privs set) execve and execveat are
 * trapped too, so that a set-uid exec, which runs without its privilege
 * then, is said (on_exec). getsockopt and setsockopt are trapped at the
 * levels libloopfast answers for a fast-path socket and at SOL_LOOPFAST,
 * and at SOL_SOCKET only for the options the library does not leave to
 * the Unix socket (its own table, sockopt_rows.c: unknown numbers too);
 * every other option is the kernel's, compared here so that it costs
 * nothing (SO_RCVTIMEO, SO_ERROR, SO_SNDBUF...: supervise_sockopt.c). */
static int load_filter(bool nnp)
{
	int ex = nnp ? NOTIF : NEXT, levels[8], nl = lf__sopt_levels(levels, 8), N = 0;
	const struct insn head[] = {
		LD(offsetof(struct seccomp_data, arch)), IS(ARCH, NEXT, ALLOW),
		LD(offsetof(struct seccomp_data, nr)),
		IS(__NR_execve, ex, NEXT), IS(__NR_execveat, ex, NEXT),
		IS(__NR_connect, NOTIF, NEXT), IS(__NR_listen, NOTIF, NEXT), IS(__NR_accept, NOTIF, NEXT),
		IS(__NR_accept4, NOTIF, NEXT), IS(__NR_bind, NOTIF, NEXT), IS(__NR_getsockname, NOTIF, NEXT),
		IS(__NR_getpeername, NOTIF, NEXT), IS(__NR_epoll_create1, NOTIF, NEXT), EPOLL_CREATE,
		IS(__NR_setsockopt, 1, NEXT), IS(__NR_getsockopt, NEXT, ALLOW),
		LD(ARG(1)), IS(SOL_SOCKET, nl + 1, NEXT), IS(SOL_LOOPFAST, NOTIF, NEXT),
	};
	struct insn code[256];
	for (unsigned i = 0; i < sizeof(head) / sizeof(head[0]); i++)
		code[N++] = head[i];
	for (int i = 0; i < nl; i++)
		code[N++] = (struct insn)IS(levels[i], NOTIF, i == nl - 1 ? ALLOW : NEXT);
	if (nl == 0)
		code[N++] = (struct insn)IS(SOL_LOOPFAST, NOTIF, ALLOW);
	/* SOL_SOCKET: the runs of options to trap, in order (below a run:
	 * allowed; within it: trapped); past SV_SOLMAX, no option has a row:
	 * trapped, as the library claims them. */
	code[N++] = (struct insn)LD(ARG(2));
	for (int o = 0; o < SV_SOLMAX; o++) {
		if (!sv_opt_trapped(o))
			continue;
		int last = o;
		while (last + 1 < SV_SOLMAX && sv_opt_trapped(last + 1))
			last++;
		if (N + 3 > (int)(sizeof(code) / sizeof(code[0])))
			return errno = E2BIG, -1; /* the option table outgrew the filter: said, never cut short */
		code[N++] = (struct insn){ BPF_JMP | BPF_JGE | BPF_K, (uint32_t)o, NEXT, ALLOW };
		code[N++] = (struct insn){ BPF_JMP | BPF_JGT | BPF_K, (uint32_t)last, NEXT, NOTIF };
		o = last;
	}
	code[N++] = (struct insn){ BPF_JMP | BPF_JGE | BPF_K, SV_SOLMAX, NOTIF, ALLOW };
	struct sock_filter f[N + 2];
	for (int i = 0; i < N; i++) {
		int t[2] = { code[i].jt, code[i].jf };
		for (int j = 0; j < 2; j++) /* a label: the offset to it; else as written */
			t[j] = t[j] == ALLOW ? N - i - 1 : t[j] == NOTIF ? N - i : t[j];
		if (t[0] > UINT8_MAX || t[1] > UINT8_MAX)
			return errno = E2BIG, -1; /* a jump BPF cannot make */
		f[i] = (struct sock_filter){ code[i].code, (uint8_t)t[0], (uint8_t)t[1], code[i].k };
	}
	f[N] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[N + 1] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
	struct sock_fprog prog = { (unsigned short)(N + 2), f };

	/* Go preempts its threads with SIGURG all the time: once we have the
	 * call, only a fatal signal ends the wait (5.19 and later). */
	int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
			      SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &prog);
	if (fd < 0 && errno == EINVAL)
		fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	return fd;
}

/* Without no_new_privs when the kernel allows it (CAP_SYS_ADMIN: root),
 * so that set-uid and set-gid execs in the tree keep their privilege;
 * otherwise with it (seccomp's rule for everyone else), and set-uid execs
 * are trapped to be said. */
static int install_filter(void)
{
	bool nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1; /* set already, by whoever ran us */
	int fd = load_filter(nnp);

	if (fd >= 0 || nnp || errno != EACCES)
		return fd;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return load_filter(true);
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

/* The supervised child: the filter, then the program (exec), or fn.
 * It waits for the supervisor's byte after handing over the filter's
 * listener, so that whatever the supervisor says first (systemd's
 * MAINPID=) is said before the program can say anything. */
static _Noreturn void child(int sock, const char *path, char **argv, void (*fn)(void *), void *arg,
			    const sigset_t *mask)
{
	char go;

	sigprocmask(SIG_SETMASK, mask, NULL);
	int fd = install_filter();
	if (fd < 0)
		fprintf(stderr, "loopfast: cannot install the seccomp filter for %s: %s\n", path, strerror(errno));
	send_fd(sock, fd);
	if (fd < 0)
		_exit(126);
	syscall(SYS_close, fd);
	while (syscall(SYS_read, sock, &go, 1) < 0 && errno == EINTR) /* 0 if the supervisor is gone */
		;
	syscall(SYS_close, sock);
	if (fn) {
		fn(arg);
		_exit(0);
	}
	execv(path, argv);
	int e = errno;
	fprintf(stderr, "loopfast: cannot run '%s': %s\n", path, strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

/* ---- talking to the kernel about a notification */

void sv_reply(int lfd, uint64_t id, int err, bool cont)
{
	struct seccomp_notif_resp r = { .id = id, .error = err,
					.flags = cont ? SECCOMP_USER_NOTIF_FLAG_CONTINUE : 0 };
	ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, &r); /* ENOENT: the caller is gone */
}

bool sv_valid(int lfd, uint64_t id)
{
	return ioctl(lfd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

bool sv_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec l = { buf, len }, r = { (void *)(uintptr_t)addr, len };
	return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)len;
}

bool sv_write(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec l = { (void *)buf, len }, r = { (void *)(uintptr_t)addr, len };
	return len == 0 || process_vm_writev(pid, &l, 1, &r, 1, 0) == (ssize_t)len;
}

/* The pidfds of the threads that made trapped calls, kept (a bounded
 * table, by thread id) so that each call costs one pidfd_getfd instead of
 * pidfd_open, NOTIF_ID_VALID, pidfd_getfd and close. A pidfd names the
 * thread itself, not its number: once it was checked to be the caller's
 * (opened while the caller's notification was still waiting, so the
 * number was not yet reused), it stays that thread's. When that thread
 * has ended and its number is reused, pidfd_getfd through the kept pidfd
 * fails with ESRCH (the thread is gone) and a new pidfd is opened and
 * checked as the first was; so a live kept pidfd for the number of the
 * notification's thread is the caller's, and needs no NOTIF_ID_VALID
 * (the callers that read the program's memory still check it after
 * their reads: process_vm_readv goes by number). */
#define PIDFDS 64
static struct { uint32_t tid; int pfd; } pidfds[PIDFDS]; /* tid 0: an empty slot */

int sv_grab(int lfd, const struct seccomp_notif *n, int fd)
{
	unsigned k = (unsigned)n->pid % PIDFDS;
	int copy;

	if (pidfds[k].tid == n->pid) {
		copy = (int)syscall(SYS_pidfd_getfd, pidfds[k].pfd, fd, 0);
		if (copy >= 0 || errno != ESRCH)
			return copy;
	}
	if (pidfds[k].tid)
		syscall(SYS_close, pidfds[k].pfd);
	pidfds[k].tid = 0;
	int pfd = (int)syscall(SYS_pidfd_open, n->pid, PIDFD_THREAD);
	if (pfd < 0)
		return -1;
	/* The thread id may have been reused between the notification and
	 * pidfd_open: still waiting, the call is its, and the pidfd too. */
	if (!sv_valid(lfd, n->id)) {
		syscall(SYS_close, pfd);
		return -1;
	}
	pidfds[k].tid = n->pid, pidfds[k].pfd = pfd;
	return (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
}

int sv_domain(int fd)
{
	int v = -1;
	socklen_t l = sizeof(v);
	return syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &v, &l) ? -1 : v;
}

/* Whether socket copy lives in this process's network namespace: the
 * kernel's own answer (SIOCGSKNS, which needs CAP_NET_ADMIN over the
 * socket's namespace), else the namespace the calling thread tid is in
 * now. Loopback addresses, the listeners sock_diag reports and the
 * rendezvous' abstract names are all per namespace. */
static bool same_netns(int copy, pid_t tid)
{
	static struct stat self;
	static uint64_t cookie; /* this process's namespace's SO_NETNS_COOKIE (5.14), 0: none */
	static bool asked;
	struct stat it;
	char path[64];
	uint64_t c;
	socklen_t cl = sizeof(c);
	int ns;
	bool ok;

	/* First the socket's namespace cookie (one call, never reused), then
	 * the older ways (three calls). */
	if (!asked) {
		int s = (int)syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		socklen_t l = sizeof(cookie);
		if (s >= 0 && syscall(SYS_getsockopt, s, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &l))
			cookie = 0;
		if (s >= 0)
			syscall(SYS_close, s);
		asked = true;
	}
	if (cookie && syscall(SYS_getsockopt, copy, SOL_SOCKET, SO_NETNS_COOKIE, &c, &cl) == 0)
		return c == cookie;
	ns = (int)syscall(SYS_ioctl, copy, SIOCGSKNS);
	if (!self.st_ino && stat("/proc/self/ns/net", &self))
		return false;
	if (ns >= 0) {
		ok = fstat(ns, &it) == 0;
		syscall(SYS_close, ns);
	} else {
		snprintf(path, sizeof(path), "/proc/%d/ns/net", tid);
		ok = stat(path, &it) == 0;
	}
	return ok && it.st_ino == self.st_ino && it.st_dev == self.st_dev;
}

bool sv_may_switch(int copy, pid_t pid, const struct stat *known)
{
	static uid_t said = (uid_t)-1;
	struct stat st;
	int pin;

	if (!same_netns(copy, pid)) {
		DEBUG("process %d: a socket in another network namespace: plain TCP", pid);
		return false;
	}
	if ((pin = lf__sopt_pinned_on(copy))) {
		DEBUG("process %d: option %d/%d is on, the fast path cannot keep it: plain TCP", pid, pin >> 16,
		      pin & 0xffff);
		return false;
	}
	if (svo_pinned(copy)) {
		DEBUG("process %d: a key (TCP_MD5SIG, TCP-AO) was set, the fast path cannot keep it: plain TCP", pid);
		return false;
	}
	if (known)
		st = *known;
	else if (fstat(copy, &st))
		return false;
	if (st.st_uid == geteuid())
		return true;
	if (said != st.st_uid) /* once per uid: a server makes many */
		fprintf(stderr,
			"loopfast: process %d uses sockets of uid %u, loopfast run runs as uid %u: they stay on plain "
			"TCP (the supervisor would make their fast path with its own credentials); run loopfast run "
			"as uid %u\n", pid, st.st_uid, geteuid(), st.st_uid);
	said = st.st_uid;
	return false;
}

/* One task's status line "Key: %llx" (or "%llu"), 0 where unreadable. */
static bool status_of(const char *path, unsigned long long *pnd, unsigned long long *shd, unsigned long long *blk,
		      unsigned long long *cgt, unsigned long long *threads, int *tgid)
{
	char buf[4096];
	int f = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t k = f >= 0 ? read(f, buf, sizeof(buf) - 1) : -1;

	if (f >= 0)
		close(f);
	if (k <= 0)
		return false;
	buf[k] = 0;
	for (char *sv = NULL, *l = strtok_r(buf, "\n", &sv); l; l = strtok_r(NULL, "\n", &sv)) {
		sscanf(l, "SigPnd: %llx", pnd);
		sscanf(l, "ShdPnd: %llx", shd);
		sscanf(l, "SigBlk: %llx", blk);
		sscanf(l, "SigCgt: %llx", cgt);
		sscanf(l, "Threads: %llu", threads);
		sscanf(l, "Tgid: %d", tgid);
	}
	return true;
}

/* Whether a signal is pending for thread tid that a handler of its
 * process catches and that it does not block (/proc's status). A signal
 * for the whole process counts where tid is the one thread that can take
 * it: every other thread blocks it (a watchdog thread, a program that
 * keeps its signals for one thread). Otherwise the kernel may give it to
 * another thread, and an -ERESTARTSYS with no signal for this thread
 * would reach the program as errno 512. */
bool sv_handler_due(pid_t tid)
{
	char path[64];
	unsigned long long pnd = 0, shd = 0, blk = 0, cgt = 0, threads = 0, x = 0, oblk;
	int tgid = 0, y;

	snprintf(path, sizeof(path), "/proc/%d/status", tid);
	if (!status_of(path, &pnd, &shd, &blk, &cgt, &threads, &tgid))
		return false;
	shd &= ~blk & cgt;
	if (shd && threads > 1) { /* keep what every other thread blocks */
		snprintf(path, sizeof(path), "/proc/%d/task", tgid);
		DIR *d = opendir(path);
		struct dirent *e;
		while (d && shd && (e = readdir(d))) {
			int t = atoi(e->d_name);
			oblk = 0;
			if (t <= 0 || t == tid)
				continue;
			snprintf(path, sizeof(path), "/proc/%d/task/%d/status", tgid, t);
			if (status_of(path, &x, &x, &oblk, &x, &x, &y))
				shd &= oblk;
		}
		if (d)
			closedir(d);
		else
			shd = 0;
		/* Still pending for the process, read after the other threads'
		 * masks: a thread that took the signal in between blocks it in
		 * its handler, and would otherwise count as blocking it (an
		 * -ERESTARTSYS with no signal left for tid: errno 512). */
		unsigned long long shd2 = 0;
		snprintf(path, sizeof(path), "/proc/%d/status", tid);
		if (shd && status_of(path, &x, &shd2, &x, &x, &x, &y))
			shd &= shd2;
		else
			shd = 0;
	}
	return ((pnd & ~blk & cgt) | shd) != 0;
}

/* The socket options the program set on a socket before the supervisor
 * switches it (its connect, its listen) are set again on our copy, with
 * the same value (nothing changes in the kernel), through the library's
 * setsockopt, which notes them as set: the switch then carries them over
 * to the Unix socket, the client's at its connect, the claim to each
 * connection accepted from a listener (which inherits the listener's
 * options over TCP) — what the preload does with the options it saw set
 * (connect.c's carry_options). These SOL_SOCKET options are not
 * trapped (the Unix socket holds them): one counts as set when its value
 * differs from a new TCP socket's (read once per family). The options:
 * those the library carries (fdtab.c's lf__carried, internal to the
 * library). The trapped ones set before the switch: svo_carry. */
void sv_note_options(int copy)
{
	static const int opts[] = { SO_RCVTIMEO, SO_SNDTIMEO, SO_LINGER, SO_KEEPALIVE, SO_REUSEADDR,
				    SO_PRIORITY, SO_RCVLOWAT, SO_RCVBUF, SO_SNDBUF };
	enum { N = sizeof(opts) / sizeof(opts[0]) };
	static struct { bool read; char v[N][32]; socklen_t l[N]; } fresh[2]; /* AF_INET, AF_INET6 */
	int fam = sv_domain(copy), k = fam == AF_INET6;

	if (fam != AF_INET && fam != AF_INET6)
		return;
	if (!fresh[k].read) {
		int s = (int)syscall(SYS_socket, fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			return;
		for (int i = 0; i < N; i++) {
			fresh[k].l[i] = sizeof(fresh[k].v[i]);
			if (syscall(SYS_getsockopt, s, SOL_SOCKET, opts[i], fresh[k].v[i], &fresh[k].l[i]))
				fresh[k].l[i] = 0;
		}
		syscall(SYS_close, s);
		fresh[k].read = true;
	}
	for (int i = 0; i < N; i++) {
		char a[32];
		socklen_t al = sizeof(a);
		if (syscall(SYS_getsockopt, copy, SOL_SOCKET, opts[i], a, &al) ||
		    (al == fresh[k].l[i] && !memcmp(a, fresh[k].v[i], al)))
			continue;
		if (opts[i] == SO_RCVBUF || opts[i] == SO_SNDBUF) { /* read back doubled */
			int v;
			memcpy(&v, a, sizeof(v));
			v /= 2;
			memcpy(a, &v, sizeof(v));
		}
		setsockopt(copy, SOL_SOCKET, opts[i], a, al);
	}
	svo_carry(copy);
}

/* A process with the preload (a nested loopfast run) negotiates itself. */
bool sv_has_preload(pid_t pid)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	bool has = false;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *f = fopen(path, "re");

	while (f && !has && getline(&line, &cap, f) > 0)
		has = strstr(line, "/libloopfast-preload.so") != NULL;
	free(line);
	if (f)
		fclose(f);
	return has;
}

/* ---- which sockets the program opted in or out (SOL_LOOPFAST) */

/* By the socket's inode: this process never holds the program's socket
 * (its copies are closed after each call). Bounded; the sweep forgets
 * the sockets the tree no longer holds. */
#define MAX_CHOICES 4096
static struct choice {
	unsigned long ino;
	bool on;
} choices[MAX_CHOICES];
static int nchoices;

static struct choice *choice_of(int copy)
{
	struct stat st;
	if (!nchoices || fstat(copy, &st))
		return NULL;
	for (int i = 0; i < nchoices; i++)
		if (choices[i].ino == (unsigned long)st.st_ino)
			return &choices[i];
	return NULL;
}

bool sv_wanted(int copy)
{
	struct choice *c = choice_of(copy);
	return c ? c->on : !per_socket;
}

static int choose(int copy, bool on)
{
	struct choice *c = choice_of(copy);
	struct stat st;

	if (!c && nchoices == MAX_CHOICES)
		sv_sweep();
	if (!c && (nchoices == MAX_CHOICES || fstat(copy, &st)))
		return -ENOBUFS;
	if (!c) {
		c = &choices[nchoices++];
		c->ino = (unsigned long)st.st_ino;
	}
	c->on = on;
	return 0;
}

/* setsockopt(SOL_LOOPFAST): the library's rules and errors, asked of a
 * copy of the socket (lf_enable_fast_path, its opt-out), remembered here
 * for the socket's connect or listen; a listener opted in after listen()
 * gets its rendezvous now, and is kept. LOOPFAST_SPIN cannot work here
 * (the spin tier needs the library in the program): EOPNOTSUPP. */
static void on_setopt(int lfd, const struct seccomp_notif *n)
{
	int opt = (int)n->data.args[2], v, copy, r, lst = 0;
	socklen_t len = (socklen_t)n->data.args[4], ll = sizeof(lst);
	struct stat st;

	if ((int)len < (int)sizeof(int))
		return sv_reply(lfd, n->id, -EINVAL, false);
	if (!sv_read(n->pid, n->data.args[3], &v, sizeof(v)))
		return sv_reply(lfd, n->id, -EFAULT, false);
	if ((copy = sv_grab(lfd, n, (int)n->data.args[0])) < 0)
		return sv_reply(lfd, n->id, 0, true); /* not a descriptor: the kernel's EBADF */
	if (!sv_valid(lfd, n->id) || fstat(copy, &st)) {
		syscall(SYS_close, copy);
		return;
	}
	syscall(SYS_getsockopt, copy, SOL_SOCKET, SO_ACCEPTCONN, &lst, &ll);
	if (opt == LOOPFAST_SPIN)
		r = -EOPNOTSUPP;
	else if (opt != LOOPFAST_FAST_PATH)
		r = -ENOPROTOOPT;
	else if (svs_listener((unsigned long)st.st_ino) >= 0)
		r = v ? 0 : -EISCONN; /* served already */
	else if (v && (!sv_may_switch(copy, n->pid, &st) || sv_has_preload(n->pid)))
		r = -EOPNOTSUPP;
	else
		r = setsockopt(copy, SOL_LOOPFAST, opt, &v, sizeof(v)) ? -errno : 0;
	if (r == 0 && svs_listener((unsigned long)st.st_ino) < 0)
		r = choose(copy, v != 0);
	if (r == 0 && lst && v && svs_listener((unsigned long)st.st_ino) < 0) {
		int has = 0;
		socklen_t hl = sizeof(has);
		if (getsockopt(copy, SOL_LOOPFAST, LOOPFAST_FAST_PATH, &has, &hl) == 0 && has) {
			svs_keep(copy);
			copy = -1;
		}
	}
	DEBUG("setsockopt SOL_LOOPFAST %d = %d on fd %d of %d: %s", opt, v, (int)n->data.args[0], n->pid,
	      r ? strerror(-r) : "done");
	if (copy >= 0)
		close(copy);
	sv_reply(lfd, n->id, r, false);
}

/* getsockopt(SOL_LOOPFAST): 1 or 0 as under the preload. Connected: the
 * kernel's answer (the library's, from the socket's names); listening:
 * whether it is served here; otherwise whether it is opted in. */
static void on_getopt(int lfd, const struct seccomp_notif *n)
{
	int opt = (int)n->data.args[2], v = 0, copy, r, lst = 0;
	socklen_t room, l = sizeof(v), ll = sizeof(lst);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct stat st;

	if (!sv_read(n->pid, n->data.args[4], &room, sizeof(room)))
		return sv_reply(lfd, n->id, -EFAULT, false);
	if ((copy = sv_grab(lfd, n, (int)n->data.args[0])) < 0)
		return sv_reply(lfd, n->id, 0, true);
	if (!sv_valid(lfd, n->id) || fstat(copy, &st)) {
		syscall(SYS_close, copy);
		return;
	}
	r = getsockopt(copy, SOL_LOOPFAST, LOOPFAST_FAST_PATH, &v, &l) ? -errno : 0;
	if (r == 0 && (int)room < (int)sizeof(int))
		r = -EINVAL;
	if (r == 0 && opt != LOOPFAST_FAST_PATH && opt != LOOPFAST_SPIN)
		r = -ENOPROTOOPT;
	if (r == 0 && opt == LOOPFAST_SPIN)
		v = 0;
	else if (r == 0 && syscall(SYS_getpeername, copy, &ss, &sl) != 0) {
		syscall(SYS_getsockopt, copy, SOL_SOCKET, SO_ACCEPTCONN, &lst, &ll);
		v = lst ? svs_listener((unsigned long)st.st_ino) >= 0 : sv_wanted(copy);
	}
	syscall(SYS_close, copy);
	l = sizeof(v);
	if (r == 0 && (!sv_write(n->pid, n->data.args[3], &v, sizeof(v)) || !sv_write(n->pid, n->data.args[4], &l, sizeof(l))))
		r = -EFAULT;
	sv_reply(lfd, n->id, r, false);
}

/* ---- what the tree holds */

static int cmp_ino(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
	return x < y ? -1 : x > y;
}

bool sv_has_inode(const unsigned long *tab, size_t n, unsigned long ino)
{
	return bsearch(&ino, tab, n, sizeof(*tab), cmp_ino) != NULL;
}

/* Appends the numbers in a children file (/proc/P/task/T/children). */
static void children_of(pid_t pid, pid_t **pids, size_t *n, size_t *cap)
{
	char path[64], tpath[384];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(tpath, sizeof(tpath), "%s/%s/children", path, e->d_name);
		FILE *f = fopen(tpath, "re");
		int c;
		while (f && fscanf(f, "%d", &c) == 1) {
			if (*n == *cap) {
				pid_t *p = realloc(*pids, (*cap = *cap * 2 + 16) * sizeof(**pids));
				if (!p)
					break;
				*pids = p;
			}
			(*pids)[(*n)++] = c;
		}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
}

/* The socket inodes the processes of the tree hold (sorted, in *out),
 * or, with want, whether one holds want (1 or 0, stopping there). */
static size_t tree_scan(unsigned long **out, unsigned long want)
{
	pid_t *pids = NULL;
	size_t np = 0, cap = 0, n = 0, icap = 0;
	unsigned long *inos = NULL;
	char path[64], link[320], target[64];
	bool found = false;

	children_of(getpid(), &pids, &np, &cap);
	for (size_t i = 0; i < np; i++)
		children_of(pids[i], &pids, &np, &cap);
	for (size_t i = 0; i < np && !found; i++) {
		snprintf(path, sizeof(path), "/proc/%d/fd", pids[i]);
		DIR *d = opendir(path);
		struct dirent *e;
		while (d && !found && (e = readdir(d))) {
			unsigned long ino;
			snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
			ssize_t k = readlink(link, target, sizeof(target) - 1);
			if (k <= 0)
				continue;
			target[k] = 0;
			if (sscanf(target, "socket:[%lu]", &ino) != 1)
				continue;
			if (want) {
				found = ino == want;
				continue;
			}
			if (n == icap) {
				unsigned long *t = realloc(inos, (icap = icap * 2 + 64) * sizeof(*inos));
				if (!t)
					break;
				inos = t;
			}
			inos[n++] = ino;
		}
		if (d)
			closedir(d);
	}
	free(pids);
	if (want)
		return found;
	qsort(inos, n, sizeof(*inos), cmp_ino);
	*out = inos;
	return n;
}

size_t sv_tree_inodes(unsigned long **out)
{
	return tree_scan(out, 0);
}

/* A second look when the first finds nothing: a process forked during
 * the first (see sv_sweep) is listed by the second. */
bool sv_tree_holds(unsigned long ino)
{
	return tree_scan(NULL, ino) || tree_scan(NULL, ino);
}

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static uint64_t swept_ms;

/* Lets go of what the tree no longer holds: listeners (their port is
 * free again), and the choices made for closed sockets. */
void sv_sweep(void)
{
	unsigned long *inos;
	size_t n = sv_tree_inodes(&inos);
	int k = 0;

	/* A listener missing from the scan may be held by a process forked
	 * while it ran (not yet listed when the tree was, its parent's
	 * descriptors read after the parent closed its own): a second scan,
	 * which lists the tree after the first read them, finds it. Made only
	 * then. */
	if (svs_missing(inos, n)) {
		free(inos);
		n = sv_tree_inodes(&inos);
	}
	svs_sweep(inos, n);
	svo_sweep(inos, n);
	for (int i = 0; i < nchoices; i++)
		if (sv_has_inode(inos, n, choices[i].ino))
			choices[k++] = choices[i];
	nchoices = k;
	free(inos);
	swept_ms = now_ms();
}

/* A string of the program's (at most size - 1 bytes), read a page at a
 * time (it may end just before an unmapped one). */
static bool read_str(pid_t pid, uint64_t addr, char *buf, size_t size)
{
	size_t got = 0;

	while (got < size - 1) {
		size_t room = 4096 - (size_t)((addr + got) % 4096);
		if (room > size - 1 - got)
			room = size - 1 - got;
		if (!sv_read(pid, addr + got, buf + got, room))
			return false;
		buf[got + room] = 0;
		if (memchr(buf + got, 0, room))
			return true;
		got += room;
	}
	return false;
}

/* execve, execveat (trapped only under no_new_privs): a set-uid or
 * set-gid file runs without its privilege; said on stderr, then the
 * kernel's exec, unchanged. The path is read for the message only (the
 * program may change it before the kernel reads it: then the message is
 * wrong, nothing else). */
static void on_exec(int lfd, const struct seccomp_notif *n)
{
	bool at = n->data.nr == __NR_execveat;
	char path[4096], full[4200];
	struct stat st;

	if (read_str(n->pid, n->data.args[at ? 1 : 0], path, sizeof(path))) {
		if (path[0] == '/')
			snprintf(full, sizeof(full), "%s", path);
		else if (at && (int)n->data.args[0] != AT_FDCWD)
			snprintf(full, sizeof(full), "/proc/%d/fd/%d/%s", n->pid, (int)n->data.args[0], path);
		else
			snprintf(full, sizeof(full), "/proc/%d/cwd/%s", n->pid, path);
		if (stat(full, &st) == 0 && S_ISREG(st.st_mode) &&
		    ((st.st_mode & S_ISUID) || (st.st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP)))
			fprintf(stderr,
				"loopfast: process %d runs %s, a set-%s program: under loopfast run's seccomp filter "
				"(no_new_privs, which seccomp needs without root) it runs WITHOUT its privilege; run "
				"loopfast run as root, or without loopfast\n",
				n->pid, path, (st.st_mode & S_ISUID) ? "uid" : "gid");
	}
	sv_reply(lfd, n->id, 0, true);
}

static void serve(int lfd, int ep, struct seccomp_notif *n, size_t size)
{
	memset(n, 0, size);
	if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, n) < 0)
		return; /* EINTR, or ENOENT: the caller went away */
	switch (n->data.nr) {
	case __NR_connect:
		return svc_connect(lfd, ep, n);
	case __NR_getsockname:
	case __NR_getpeername:
		return svc_name(lfd, n, n->data.nr == __NR_getpeername);
	case __NR_getsockopt:
		return (int)n->data.args[1] == SOL_LOOPFAST ? on_getopt(lfd, n) : svo_opt(lfd, n);
	case __NR_setsockopt:
		return (int)n->data.args[1] == SOL_LOOPFAST ? on_setopt(lfd, n) : svo_opt(lfd, n);
	case __NR_listen:
		return svs_listen(lfd, n);
	case __NR_accept:
	case __NR_accept4:
		return svs_accept(lfd, ep, n);
	case __NR_bind:
		return svs_bind(lfd, n);
	case __NR_execve:
	case __NR_execveat:
		return on_exec(lfd, n);
	case __NR_epoll_create1:
#ifdef __NR_epoll_create
	case __NR_epoll_create:
#endif
		sve_epoll_created();
		return sv_reply(lfd, n->id, 0, true);
	default:
		return sv_reply(lfd, n->id, 0, true);
	}
}

/* ---- the supervisor */

/* systemd's notification protocol (sd_notify(3)): one datagram to the
 * Unix socket NOTIFY_SOCKET names (abstract when it starts with '@'),
 * here "MAINPID=<the program's pid>", so that the unit's main process is
 * the program: the PID a Type=notify unit with NotifyAccess=main accepts
 * READY=1 from, and the one systemctl shows and signals. The cost: the
 * program is not systemd's child, which then does not learn its exit
 * status (docs/supervisor.md, "Under systemd"). Other kinds of address
 * (vsock:) are not handled: said on stderr. */
static void notify_mainpid(pid_t pid)
{
	const char *to = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	size_t len = to ? strlen(to) : 0;
	char msg[32];
	int n = snprintf(msg, sizeof(msg), "MAINPID=%d", (int)pid), s = -1;

	if (!to || !*to)
		return;
	if ((to[0] != '/' && to[0] != '@') || len < 2 || len > sizeof(sun.sun_path)) {
		fprintf(stderr, "loopfast: NOTIFY_SOCKET=%s is not a Unix socket's path or abstract name: %s not sent\n",
			to, msg);
		return;
	}
	memcpy(sun.sun_path, to, len);
	if (to[0] == '@')
		sun.sun_path[0] = 0;
	errno = 0;
	if ((s = (int)syscall(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0 ||
	    syscall(SYS_sendto, s, msg, (size_t)n, MSG_NOSIGNAL, &sun, offsetof(struct sockaddr_un, sun_path) + len) != n)
		fprintf(stderr, "loopfast: cannot send %s to NOTIFY_SOCKET=%s: %s\n", msg, to, strerror(errno));
	else
		DEBUG("sent %s to NOTIFY_SOCKET=%s", msg, to);
	if (s >= 0)
		syscall(SYS_close, s);
}

static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT };

/* Runs path (or fn(arg), in a child: `loopfast bench connect`'s seccomp
 * row) under the filter and serves its calls until the whole tree under
 * it has ended (a subreaper: orphans come to us); returns as the program
 * ended: its exit code, or dies of its signal. */
static int supervise(const char *path, char **argv, void (*fn)(void *), void *arg, const char *why, bool only_opted,
		     bool mainpid)
{
	sigset_t block, old;
	int sv[2], lfd, ep, sfd, status = 0;
	pid_t pid;

	per_socket = only_opted;
	sv_debug = getenv("LOOPFAST_DEBUG") && *getenv("LOOPFAST_DEBUG") && strcmp(getenv("LOOPFAST_DEBUG"), "0");
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
	if (pid == 0) {
		close(sv[0]); /* else the child's read below never sees a killed supervisor's end: it waited for ever */
		child(sv[1], path, argv, fn, arg, &old);
	}
	signal(SIGPIPE, SIG_IGN);
	close(sv[1]);
	lfd = recv_fd(sv[0]);
	if (mainpid)
		notify_mainpid(pid);
	(void)syscall(SYS_sendto, sv[0], "", 1, MSG_NOSIGNAL, NULL, 0); /* the child may exec */
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
		/* Parked accepts are looked at for signals every 100 ms;
		 * listeners and choices are swept at most once a second. */
		bool sweeps = svs_listening() || nchoices || svo_count();
		int k = epoll_wait(ep, ev, 16, svs_parked() || svc_pending() ? 100 : sweeps ? 1000 : -1);
		/* Reaped after a signal (SIGCHLD comes through the signalfd),
		 * the filter's end, or a timeout: not after every trapped call
		 * (a wait4 each). */
		bool reap = k <= 0;
		for (int i = 0; i < k; i++) {
			uint64_t t = ev[i].data.u64;
			if (t == 1 && (ev[i].events & EPOLLIN)) {
				serve(lfd, ep, n, nsize);
			} else if (t == 1) { /* no process is left under the filter */
				epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL);
				reap = true;
			} else if ((t & SV_TAG_MASK) == SV_TAG_WATCH) {
				svc_watch_end(ep, (int)(t & 0xffff));
			} else if ((t & SV_TAG_MASK) == SV_TAG_CONN) {
				svc_conn_ready(lfd, ep, (int)(t & 0xffff));
			} else if ((t & SV_TAG_MASK) == SV_TAG_PARK) {
				svs_park_ready(lfd, ep, (int)(t & 0xffff));
			} else if (t == 2) {
				struct signalfd_siginfo si;
				reap = true;
				while (read(sfd, &si, sizeof(si)) == sizeof(si))
					if (si.ssi_signo != SIGCHLD && !main_done)
						kill(pid, (int)si.ssi_signo);
			}
		}
		if (svs_parked())
			svs_tick(lfd, ep);
		if (svc_pending())
			svc_tick(lfd, ep);
		if (sweeps && now_ms() - swept_ms >= 1000)
			sv_sweep();
		/* Reap: the program, and the orphans of its tree. */
		while (reap) {
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

int lf_cli_supervise(const char *path, char **argv, const char *why, bool only_opted, bool notify_mainpid)
{
	return supervise(path, argv, NULL, NULL, why, only_opted, notify_mainpid);
}

int lf_cli_supervise_fn(void (*fn)(void *), void *arg)
{
	return supervise("(a function)", NULL, fn, arg, "a benchmark's process", false, false);
}
