/* lfprobe: an unmodified TCP program for the end-to-end tests.
 *
 * usage: [LFPROBE_LISTEN=lo|any|dual|v6only|lo2] lfprobe SCENARIO [4|6]
 *
 * Each scenario exercises one socket behaviour between a client and a
 * server on loopback and prints a transcript of what a program can observe.
 * The tests run it over plain TCP and under `loopfast run` and require the
 * same transcript. Lines starting with "#" are notes, never compared:
 * "#path WHO PATH INODE peer INODE" lines say which kernel object carried
 * each connection, proven from the kernel (sock_diag; path_ino below), and
 * are checked separately; others carry what depends on timing (counts,
 * ports). LFPROBE_LISTEN says where listeners listen (listen_socket).
 * Nothing here knows about loopfast. */
#include "probe.h"

int fam = AF_INET;
const char *self;

void out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

const char *ename(int e)
{
	switch (e) {
	case 0: return "0";
	case EAGAIN: return "EAGAIN";
	case EINPROGRESS: return "EINPROGRESS";
	case EALREADY: return "EALREADY";
	case EINTR: return "EINTR";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EPIPE: return "EPIPE";
	case ECONNRESET: return "ECONNRESET";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EISCONN: return "EISCONN";
	case ENOTCONN: return "ENOTCONN";
	default: return strerror(e);
	}
}

/* ---- which kernel object carries a connection, from the kernel alone
 *
 * The calls on sockets are raw system calls: the answer must not depend on
 * a library that might stand between this program and the kernel (sock_diag
 * and the kernel's own names of the socket, never getsockopt's SO_DOMAIN,
 * which such a library answers as TCP would). */

/* One sock_diag request (NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, not a
 * dump): copies the first answer's payload to ans and returns its length,
 * or -1 (no such socket, or the query failed). */
static ssize_t sock_diag(const void *req, size_t len, void *ans, size_t alen)
{
	struct { struct nlmsghdr h; char req[128]; } m = { 0 };
	union { struct nlmsghdr h; char buf[8192]; } r;
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK };
	ssize_t n = -1;
	int fd = (int)syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

	if (fd < 0 || len > sizeof(m.req))
		goto out;
	m.h.nlmsg_len = (uint32_t)NLMSG_LENGTH(len);
	m.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	m.h.nlmsg_flags = NLM_F_REQUEST;
	memcpy(m.req, req, len);
	if (syscall(SYS_sendto, fd, &m, m.h.nlmsg_len, 0, &nl, sizeof(nl)) < 0)
		goto out;
	n = syscall(SYS_recvfrom, fd, &r, sizeof(r), 0, NULL, NULL);
	if (n < (ssize_t)sizeof(r.h) || !NLMSG_OK(&r.h, (size_t)n) || r.h.nlmsg_type != SOCK_DIAG_BY_FAMILY) {
		n = -1;
		goto out;
	}
	n = (ssize_t)NLMSG_PAYLOAD(&r.h, 0);
	memcpy(ans, NLMSG_DATA(&r.h), (size_t)n < alen ? (size_t)n : alen);
out:
	if (fd >= 0)
		syscall(SYS_close, fd);
	return n;
}

/* Whether a process of this process group (the probe, its children and
 * what they exec; the tests start each run in a group of its own) holds
 * socket inode ino. The sockets the group held at the last look are kept
 * (inode numbers are not reused within a run), and the group is looked at
 * again only for an inode not among them: a scenario with a thousand
 * connections asks a thousand times. One descriptor at a time: a server
 * at its descriptor limit asks too. */
static bool held_by_group(unsigned long ino)
{
	static unsigned long *held;
	static size_t n, cap;
	pid_t pids[256];
	size_t np = 0;
	char p[64], t[64];
	struct dirent *e;
	unsigned long x;

	for (size_t i = 0; i < n; i++)
		if (held[i] == ino)
			return true;
	DIR *d = opendir("/proc");
	while (d && np < sizeof(pids) / sizeof(pids[0]) && (e = readdir(d))) {
		pid_t pid = (pid_t)atoi(e->d_name);
		if (pid > 0 && getpgid(pid) == getpgrp())
			pids[np++] = pid;
	}
	if (d)
		closedir(d);
	n = 0;
	for (size_t i = 0; i < np; i++) {
		snprintf(p, sizeof(p), "/proc/%d/fd", (int)pids[i]);
		DIR *fd = opendir(p);
		while (fd && (e = readdir(fd))) {
			ssize_t k = readlinkat(dirfd(fd), e->d_name, t, sizeof(t) - 1);
			if (k <= 0 || (t[k] = 0, sscanf(t, "socket:[%lu]", &x) != 1))
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 1024;
				held = realloc(held, cap * sizeof(*held));
				CHECK(held);
			}
			held[n++] = x;
		}
		if (fd)
			closedir(fd);
	}
	for (size_t i = 0; i < n; i++)
		if (held[i] == ino)
			return true;
	return false;
}

/* Whether the kernel knows a Unix socket of inode ino. */
static bool unix_known(unsigned long ino)
{
	struct unix_diag_req q = { .sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_ino = (uint32_t)ino,
				   .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } };
	struct unix_diag_msg m;
	return sock_diag(&q, sizeof(q), &m, sizeof(m)) >= (ssize_t)sizeof(m) && m.udiag_ino == ino;
}

/* A connected Unix stream socket whose peer a process of this group
 * holds: "unix". Until the server accepts it, the peer waits in a
 * listener's queue, unheld and without an inode (sock_diag says 0): then
 * *later is set, and the caller asks again. */
static const char *unix_path(unsigned long ino, unsigned long *peer, bool *later)
{
	struct unix_diag_req q = { .sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_ino = (uint32_t)ino,
				   .udiag_show = UDIAG_SHOW_PEER,
				   .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } };
	char a[512];
	struct unix_diag_msg *m = (void *)a;
	ssize_t n = sock_diag(&q, sizeof(q), a, sizeof(a));

	if (n < (ssize_t)sizeof(*m) || m->udiag_ino != ino)
		return "unix-unknown";
	if (m->udiag_type != SOCK_STREAM || m->udiag_state != TCP_ESTABLISHED)
		return "unix-not-connected-stream";
	size_t left = (size_t)n - NLMSG_ALIGN(sizeof(*m));
	for (struct rtattr *at = (void *)(a + NLMSG_ALIGN(sizeof(*m))); RTA_OK(at, left); at = RTA_NEXT(at, left))
		if (at->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(at) >= 4) {
			uint32_t v;
			memcpy(&v, RTA_DATA(at), sizeof(v));
			*peer = v;
		}
	*later = true;
	if (!*peer)
		return "unix-no-peer";
	if (!held_by_group(*peer))
		return "unix-peer-not-ours";
	*later = false;
	return "unix";
}

/* The TCP socket with this local and remote address, as inet_diag finds
 * it (an exact lookup: an established or closing socket, or failing that
 * the listener the kernel would give a new connection to). */
static bool tcp_lookup(const struct sockaddr_storage *local, const struct sockaddr_storage *remote,
		       struct inet_diag_msg *m)
{
	struct inet_diag_req_v2 q = { .sdiag_family = local->ss_family, .sdiag_protocol = IPPROTO_TCP,
				      .idiag_states = ~0u,
				      .id.idiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } };
	if (local->ss_family == AF_INET6) {
		const struct sockaddr_in6 *l = (const void *)local, *r = (const void *)remote;
		q.id.idiag_sport = l->sin6_port;
		q.id.idiag_dport = r->sin6_port;
		memcpy(q.id.idiag_src, &l->sin6_addr, 16);
		memcpy(q.id.idiag_dst, &r->sin6_addr, 16);
	} else {
		const struct sockaddr_in *l = (const void *)local, *r = (const void *)remote;
		q.id.idiag_sport = l->sin_port;
		q.id.idiag_dport = r->sin_port;
		memcpy(q.id.idiag_src, &l->sin_addr, 4);
		memcpy(q.id.idiag_dst, &r->sin_addr, 4);
	}
	return sock_diag(&q, sizeof(q), m, sizeof(*m)) >= (ssize_t)sizeof(*m);
}

/* A connection's state; its peer may also be still in the handshake's
 * last step, or gone to TIME_WAIT. */
static bool connected_state(int st, bool peer)
{
	return st == TCP_ESTABLISHED || st == TCP_FIN_WAIT1 || st == TCP_FIN_WAIT2 || st == TCP_CLOSE_WAIT ||
	       st == TCP_LAST_ACK || st == TCP_CLOSING || (peer && (st == TCP_SYN_RECV || st == TCP_TIME_WAIT));
}

/* A TCP socket in a connected state whose 4-tuple, reversed, is a TCP
 * socket too (its peer; inode 0 while it waits in the accept queue): "tcp". */
static const char *tcp_path(int fd, unsigned long ino, unsigned long *peer)
{
	struct sockaddr_storage a, b;
	socklen_t al = sizeof(a), bl = sizeof(b);
	struct inet_diag_msg m;

	if (syscall(SYS_getsockname, fd, &a, &al) || syscall(SYS_getpeername, fd, &b, &bl))
		return "tcp-not-connected";
	if (!tcp_lookup(&a, &b, &m) || m.idiag_inode != ino || !connected_state(m.idiag_state, false))
		return "tcp-unknown";
	if (!tcp_lookup(&b, &a, &m) || !connected_state(m.idiag_state, true))
		return "tcp-no-peer";
	*peer = m.idiag_inode;
	return "tcp";
}

/* Which kernel object is behind fd: "unix" or "tcp" when proven as above,
 * else a word that says what failed. *ino and *peer: the socket's inode
 * and its peer's (0 where unknown). */
static const char *path_ino(int fd, unsigned long *ino, unsigned long *peer)
{
	static uint64_t waited_us;
	char link[64], target[64];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	*ino = *peer = 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return "none";
	target[n] = 0;
	if (sscanf(target, "socket:[%lu]", ino) != 1)
		return "not-a-socket";
	/* The family from sock_diag first: even a raw getsockname may be
	 * answered by someone else than the kernel (a seccomp supervisor
	 * gives a Unix socket TCP's names, as a library would). */
	if (!unix_known(*ino)) {
		if (syscall(SYS_getsockname, fd, &ss, &sl))
			return "no-name";
		if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)
			return tcp_path(fd, *ino, peer);
		return "other";
	}
	/* A peer not accepted yet (no inode) is waited for up to 5 s in
	 * all; one accepted but held by no process of the group (in flight
	 * between two processes) up to 1 s. */
	for (;;) {
		bool later = false;
		const char *r = unix_path(*ino, peer, &later);
		if (!later || waited_us >= (*peer ? 1000000u : 5000000u))
			return r;
		*peer = 0;
		usleep(2000);
		waited_us += 2000;
	}
}

uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* "yes" when at least ms milliseconds have passed since t0 (a now_us()),
 * less one jiffy; else "no, after N us". The kernel counts a socket's
 * timeouts in jiffies from the middle of the current one, so its own
 * end up to a jiffy early: TCP's SO_RCVTIMEO of 200 ms returned after
 * 198,784 us in a CI run (HZ 250 here; 10 ms covers HZ 100). How late a
 * timeout ends is not asked. */
const char *at_least(uint64_t t0, int ms)
{
	static char no[64];
	uint64_t d = now_us() - t0;
	if (d + 10000 >= (uint64_t)ms * 1000)
		return "yes";
	snprintf(no, sizeof(no), "no, after %llu us", (unsigned long long)d);
	return no;
}

/* The watchdog: a thread that ends the probe (exit status 3) when the call
 * between watch() and unwatch() has not returned within secs, after
 * printing "WHAT: still blocked after N s" where TCP's transcript shows
 * the call's result. A thread and no signal, because what it must catch
 * may be a call no signal can end (signals blocked around it); it blocks
 * every signal itself, so a scenario's signals still reach the thread
 * that waits. For the main thread of a process that has not forked since
 * its first watch(). Both keep errno. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const char *what; /* armed while not NULL */
	int secs;
	struct timespec end; /* CLOCK_MONOTONIC */
	bool started;
} wd = { .lock = PTHREAD_MUTEX_INITIALIZER };

static bool wd_due(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec > wd.end.tv_sec || (t.tv_sec == wd.end.tv_sec && t.tv_nsec >= wd.end.tv_nsec);
}

static void *wd_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wd.lock);
	for (;;) {
		if (!wd.what)
			pthread_cond_wait(&wd.cond, &wd.lock);
		else if (wd_due()) {
			out("%s: still blocked after %d s", wd.what, wd.secs);
			_exit(3);
		} else
			pthread_cond_timedwait(&wd.cond, &wd.lock, &wd.end);
	}
	return NULL;
}

void watch(const char *what, int secs)
{
	int e = errno;
	if (!wd.started) {
		pthread_condattr_t ca;
		sigset_t all, old;
		pthread_t t;
		CHECK(pthread_condattr_init(&ca) == 0 && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0);
		CHECK(pthread_cond_init(&wd.cond, &ca) == 0);
		sigfillset(&all);
		CHECK(pthread_sigmask(SIG_BLOCK, &all, &old) == 0);
		CHECK(pthread_create(&t, NULL, wd_thread, NULL) == 0);
		CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
		wd.started = true;
	}
	pthread_mutex_lock(&wd.lock);
	clock_gettime(CLOCK_MONOTONIC, &wd.end);
	wd.end.tv_sec += secs;
	wd.what = what;
	wd.secs = secs;
	pthread_cond_signal(&wd.cond);
	pthread_mutex_unlock(&wd.lock);
	errno = e;
}

void unwatch(void)
{
	int e = errno;
	pthread_mutex_lock(&wd.lock);
	wd.what = NULL;
	pthread_cond_signal(&wd.cond);
	pthread_mutex_unlock(&wd.lock);
	errno = e;
}

/* Both leave errno as it was: a scenario may print it afterwards. */
const char *path_of(int fd)
{
	unsigned long ino, peer;
	int e = errno;
	const char *p = path_ino(fd, &ino, &peer);
	errno = e;
	return p;
}

/* "#path WHO unix|tcp INODE peer INODE" on f: the test pairs the two ends. */
void fpath(FILE *f, const char *who, int fd)
{
	unsigned long ino, peer;
	int e = errno;
	const char *p = path_ino(fd, &ino, &peer);
	fprintf(f, "#path %s %s %lu peer %lu\n", who, p, ino, peer);
	fflush(f);
	errno = e;
}

void path(const char *who, int fd) { fpath(stdout, who, fd); }

/* ---- addresses: where listeners listen (LFPROBE_LISTEN) and clients go
 *
 *   lo      127.0.0.1 or ::1 (the default)
 *   any     0.0.0.0, or [::] dual-stack (IPV6_V6ONLY 0)
 *   dual    [::] dual-stack, IPv4 clients (family 4 only)
 *   v6only  [::] with IPV6_V6ONLY 1 (family 6 only)
 *   lo2     127.0.0.2 (family 4 only)
 * Clients connect to the loopback address that reaches the listener. */
static const char *kind(void)
{
	const char *k = getenv("LFPROBE_LISTEN");
	return k && *k ? k : "lo";
}

/* Exits with status 2 if LFPROBE_LISTEN is none of the above, or not one
 * for this family. */
static void check_kind(void)
{
	static const struct { const char *name; int v4, v6; } kinds[] = {
		{ "lo", 1, 1 }, { "any", 1, 1 }, { "dual", 1, 0 }, { "v6only", 0, 1 }, { "lo2", 1, 0 },
	};
	for (unsigned i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (!strcmp(kind(), kinds[i].name) && (fam == AF_INET ? kinds[i].v4 : kinds[i].v6))
			return;
	fprintf(stderr, "lfprobe: LFPROBE_LISTEN=%s: want lo or any, dual or lo2 (IPv4), v6only (IPv6)\n", kind());
	exit(2);
}

socklen_t loopback(struct sockaddr_storage *ss, int port)
{
	memset(ss, 0, sizeof(*ss));
	if (fam == AF_INET6) {
		struct sockaddr_in6 *a = (void *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		a->sin6_port = htons(port);
		return sizeof(*a);
	}
	struct sockaddr_in *a = (void *)ss;
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(strcmp(kind(), "lo2") ? INADDR_LOOPBACK : INADDR_LOOPBACK + 1);
	a->sin_port = htons(port);
	return sizeof(*a);
}

/* A TCP socket bound where this run's listeners go, not yet listening. */
int listen_socket(int port, int reuseport)
{
	struct sockaddr_storage ss;
	const char *k = kind();
	int one = 1, v6only = !strcmp(k, "v6only"), lfam = !strcmp(k, "dual") ? AF_INET6 : fam;
	bool wildcard = !strcmp(k, "any") || !strcmp(k, "dual") || v6only;
	socklen_t sl = loopback(&ss, port);

	if (wildcard) { /* 0.0.0.0 or [::]: all zeros but family and port */
		memset(&ss, 0, sizeof(ss));
		ss.ss_family = (sa_family_t)lfam;
		((struct sockaddr_in *)&ss)->sin_port = htons(port); /* where sockaddr_in6 has it too */
		sl = lfam == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	}
	int fd = socket(lfam, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	if (reuseport)
		CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0);
	if (wildcard && lfam == AF_INET6)
		CHECK(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) == 0);
	CHECK(bind(fd, (void *)&ss, sl) == 0);
	return fd;
}

int port_of(int fd, int peer)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	CHECK((peer ? getpeername(fd, (void *)&ss, &l) : getsockname(fd, (void *)&ss, &l)) == 0);
	return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
}

int listener_opts(int *port, int reuseport)
{
	int fd = listen_socket(*port, reuseport);
	CHECK(listen(fd, 1024) == 0);
	*port = port_of(fd, 0);
	return fd;
}

int listener(int *port) { *port = 0; return listener_opts(port, 0); }

int connect_to(int port)
{
	struct sockaddr_storage ss;
	int fd = socket(fam, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	CHECK(connect(fd, (void *)&ss, loopback(&ss, port)) == 0);
	return fd;
}

/* A connected pair in this process. */
void pair(int *c, int *s)
{
	int port, l = listener(&port);
	*c = connect_to(port);
	*s = accept(l, NULL, NULL);
	CHECK(*s >= 0);
	close(l);
}

void write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		CHECK(w > 0);
		p += w;
		n -= (size_t)w;
	}
}

size_t read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		CHECK(r >= 0);
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Serves one connection: echoes until EOF. */
void echo(int fd)
{
	char buf[65536];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		write_all(fd, buf, (size_t)n);
}

void expect_echo(int fd, const char *msg)
{
	char buf[256];
	size_t n = strlen(msg);
	write_all(fd, msg, n);
	CHECK(read_full(fd, buf, n) == n);
	CHECK(memcmp(buf, msg, n) == 0);
}

/* One byte each way between the two ends of a pair. */
void expect_echo_pair(int c, int s)
{
	char b;
	write_all(c, "x", 1);
	CHECK(read(s, &b, 1) == 1);
	write_all(s, "y", 1);
	CHECK(read(c, &b, 1) == 1);
	out("both directions ok");
}

pid_t fork_child(void)
{
	pid_t p = fork();
	CHECK(p >= 0);
	return p;
}

int wait_child(pid_t p)
{
	int st;
	CHECK(waitpid(p, &st, 0) == p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const struct { const char *name; void (*fn)(void); } scenarios[] = {
	{ "fd-limit", sc_fd_limit }, { "dualstack", sc_dualstack }, { "churn", sc_churn },
	{ "kill-workers", sc_kill_workers }, { "stash-limit", sc_stash_limit },
	{ "fdleak", sc_fdleak },
	{ "names", sc_names }, { "sockopts", sc_sockopts }, { "sockopts-before", sc_sockopts_before },
	{ "sockopt-table", sc_sockopt_table }, { "tcp-info", sc_tcp_info }, { "sockopt-pin", sc_sockopt_pin },
	{ "sockopt-shared", sc_sockopt_shared },
	{ "listener-linger", sc_listener_linger },
	{ "oob", sc_oob }, { "shut-rd", sc_shut_rd }, { "rcvlowat", sc_rcvlowat },
	{ "connect-nonblock", sc_connect_nonblock }, { "connect-refused", sc_connect_refused },
	{ "connect-eintr", sc_connect_eintr }, { "connect-eintr-reconnect", sc_connect_eintr_reconnect },
	{ "connect-full-poll", sc_connect_full_poll }, { "connect-full-epoll", sc_connect_full_epoll },
	{ "connect-full-select", sc_connect_full_select }, { "connect-sndtimeo", sc_connect_sndtimeo },
	{ "connect-again", sc_connect_again }, { "connect-restart", sc_connect_restart },
	{ "epoll-before-connect", sc_epoll_before_connect }, { "fortify-pwait2", sc_fortify_pwait2 }, { "readiness", sc_readiness },
	{ "halfclose", sc_halfclose }, { "peer-closed", sc_peer_closed }, { "msgflags", sc_msgflags }, { "mmsg", sc_mmsg }, { "vectored", sc_vectored },
	{ "first-write", sc_first_write },
	{ "sendfile-splice", sc_sendfile_splice }, { "ioctl", sc_ioctl }, { "backpressure", sc_backpressure },
	{ "sigkill", sc_sigkill }, { "fork-after-accept", sc_fork_after_accept }, { "prefork", sc_prefork },
	{ "reuseport", sc_reuseport }, { "exec", sc_exec }, { "exec-listener", sc_exec_listener }, { "dup", sc_dup }, { "scm-rights", sc_scm_rights },
	{ "many", sc_many }, { "bulk", sc_bulk },
	{ "prefork-fd-limit", sc_prefork_fd_limit }, { "fork-while-connecting", sc_fork_while_connecting },
	{ "close-range-fork", sc_close_range_fork },
};

int main(int argc, char **argv)
{
	self = argv[0];
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		for (unsigned i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
			printf("%s\n", scenarios[i].name);
		return 0;
	}
	if (argc > 2 && !strcmp(argv[2], "6"))
		fam = AF_INET6;
	if (!strcmp(argv[1], "child-echo") && argc > 2) {
		fam = AF_INET;
		child_echo(atoi(argv[2]));
		return 0;
	}
	if (!strcmp(argv[1], "serve-inherited") && argc > 3) {
		serve_until_quit(atoi(argv[2]), atoi(argv[3]));
		return 0;
	}
	if (!strcmp(argv[1], "serve-echo") && argc > 2) {
		serve_echo(atoi(argv[2]));
		return 0;
	}
	if (!strcmp(argv[1], "client-echo") && argc > 2) {
		client_echo(atoi(argv[2]));
		return 0;
	}
	check_kind();
	for (unsigned i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		if (!strcmp(argv[1], scenarios[i].name)) {
			scenarios[i].fn();
			return 0;
		}
	}
	fprintf(stderr, "lfprobe: unknown scenario %s\n", argv[1]);
	return 2;
}
