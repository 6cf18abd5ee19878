/* lfprobe scenarios: the socket behaviours of one connection (names,
 * options, connect, readiness, half-close, flags, vectored I/O, sendfile and
 * splice, ioctls, backpressure) and dual-stack listeners. */
#include <pthread.h>
#include <sys/time.h>
#include "probe.h"

/* An address as text. */
static const char *addr_str(const struct sockaddr_storage *ss)
{
	static char buf[64];
	inet_ntop(ss->ss_family, ss->ss_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
							  : (const void *)&((const struct sockaddr_in *)ss)->sin_addr,
		  buf, sizeof(buf));
	return buf;
}

static void print_addr(const char *who, int fd, int peer)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	CHECK((peer ? getpeername(fd, (void *)&ss, &l) : getsockname(fd, (void *)&ss, &l)) == 0);
	out("%s %s family %d len %u addr %s", who, peer ? "peer" : "local", ss.ss_family, l, addr_str(&ss));
}

void sc_names(void)
{
	int c, s, port, l = listener(&port);
	struct sockaddr_storage a;
	socklen_t al = sizeof(a);
	c = connect_to(port);
	s = accept(l, (void *)&a, &al);
	CHECK(s >= 0);
	path("client", c);
	path("server", s);
	out("accept addr family %d len %u", a.ss_family, al);
	out("accept addr port == client local port: %d", ntohs(((struct sockaddr_in *)&a)->sin_port) == port_of(c, 0));
	out("client peer port == listen port: %d", port_of(c, 1) == port);
	out("server local port == listen port: %d", port_of(s, 0) == port);
	out("server peer port == client local port: %d", port_of(s, 1) == port_of(c, 0));
	/* All four addresses (a listener on 127.0.0.2 or a wildcard makes
	 * the two ends' addresses differ), and accept's. */
	print_addr("client", c, 0);
	print_addr("server", s, 1);
	print_addr("client", c, 1);
	print_addr("server", s, 0);
	out("accept addr %s", addr_str(&a));
	/* A short buffer gets the kernel's truncation: full length reported. */
	struct sockaddr_in small;
	socklen_t sl = 8;
	CHECK(getpeername(c, (void *)&small, &sl) == 0);
	out("short buffer reports len %u", sl);
	for (int opt = 0; opt < 3; opt++) {
		int v, o = opt == 0 ? SO_DOMAIN : opt == 1 ? SO_TYPE : SO_PROTOCOL;
		socklen_t vl = sizeof(v);
		CHECK(getsockopt(c, SOL_SOCKET, o, &v, &vl) == 0);
		out("client %s = %d", opt == 0 ? "SO_DOMAIN" : opt == 1 ? "SO_TYPE" : "SO_PROTOCOL", v);
		vl = sizeof(v);
		CHECK(getsockopt(s, SOL_SOCKET, o, &v, &vl) == 0);
		out("server %s = %d", opt == 0 ? "SO_DOMAIN" : opt == 1 ? "SO_TYPE" : "SO_PROTOCOL", v);
	}
	expect_echo_pair(c, s);
}

static void getset(int fd, const char *name, int level, int opt, int val)
{
	int v = -1;
	socklen_t l = sizeof(v);
	errno = 4242; /* success must leave errno alone */
	CHECK(setsockopt(fd, level, opt, &val, sizeof(val)) == 0);
	CHECK(getsockopt(fd, level, opt, &v, &l) == 0);
	out("%s set %d get %d len %u errno kept %d", name, val, v, l, errno == 4242);
}

void sc_sockopts(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
	for (int i = 0; i < 2; i++) {
		int fd = i ? s : c;
		out("-- %s", i ? "server" : "client");
		getset(fd, "TCP_NODELAY", IPPROTO_TCP, TCP_NODELAY, 1);
		getset(fd, "TCP_NODELAY", IPPROTO_TCP, TCP_NODELAY, 0);
		getset(fd, "TCP_KEEPIDLE", IPPROTO_TCP, TCP_KEEPIDLE, 30);
		getset(fd, "TCP_KEEPINTVL", IPPROTO_TCP, TCP_KEEPINTVL, 5);
		getset(fd, "TCP_KEEPCNT", IPPROTO_TCP, TCP_KEEPCNT, 4);
		getset(fd, "SO_KEEPALIVE", SOL_SOCKET, SO_KEEPALIVE, 1);
		getset(fd, "SO_RCVBUF", SOL_SOCKET, SO_RCVBUF, 65536);
		getset(fd, "SO_SNDBUF", SOL_SOCKET, SO_SNDBUF, 65536);
		getset(fd, "SO_REUSEADDR", SOL_SOCKET, SO_REUSEADDR, 1);
		struct linger lg = { 1, 5 }, lg2;
		socklen_t l = sizeof(lg2);
		CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg2, &l) == 0);
		out("SO_LINGER %d %d", lg2.l_onoff, lg2.l_linger);
		struct timeval tv = { 0, 200000 }, tv2;
		l = sizeof(tv2);
		CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv2, &l) == 0);
		out("SO_RCVTIMEO %ld.%06ld", (long)tv2.tv_sec, (long)tv2.tv_usec);
		l = sizeof(tv2);
		CHECK(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv2, &l) == 0);
		out("SO_SNDTIMEO %ld.%06ld", (long)tv2.tv_sec, (long)tv2.tv_usec);
		char b;
		uint64_t t0 = now_us();
		ssize_t r = recv(fd, &b, 1, 0);
		int e = errno;
		out("recv with SO_RCVTIMEO 200 ms on an idle socket: %zd %s after >= 200 ms: %s", r,
		    ename(r < 0 ? e : 0), at_least(t0, 200));
		int err = -1;
		l = sizeof(err);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) == 0);
		out("SO_ERROR %d", err);
	}
}

/* Options set before connect carry over to the connection. */
void sc_sockopts_before(void)
{
	int port, l = listener(&port), one = 1, v;
	struct sockaddr_storage ss;
	struct timeval tv = { 0, 150000 };
	CHECK(setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
	int c = socket(fam, SOCK_STREAM, 0);
	CHECK(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
	CHECK(connect(c, (void *)&ss, loopback(&ss, port)) == 0);
	int s = accept(l, NULL, NULL);
	path("client", c);
	socklen_t vl = sizeof(v);
	CHECK(getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0);
	out("client TCP_NODELAY after connect %d", v);
	vl = sizeof(v);
	CHECK(getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0);
	out("accepted TCP_NODELAY inherited from listener %d", v);
	char b;
	uint64_t t0 = now_us();
	ssize_t r = recv(c, &b, 1, 0);
	int e = errno;
	out("recv times out (SO_RCVTIMEO 150 ms): %zd %s after >= 150 ms: %s", r, ename(r < 0 ? e : 0),
	    at_least(t0, 150));
	/* The timeout is the call's, not each wait's: MSG_WAITALL with bytes
	 * coming every 50 ms for a second ends at 150 ms with what came. */
	pid_t p = fork_child();
	if (p == 0) {
		for (int i = 0; i < 20; i++) {
			usleep(50000);
			write_all(s, "w", 1);
		}
		_exit(0);
	}
	char w[20];
	r = recv(c, w, sizeof(w), MSG_WAITALL);
	out("MSG_WAITALL under SO_RCVTIMEO 150 ms, a byte every 50 ms: ended before all 20: %s",
	    r > 0 && r < (ssize_t)sizeof(w) ? "yes" : r < 0 ? ename(errno) : "no");
	wait_child(p);
	/* The socket's timeout, set through a dup (the descriptor's own
	 * flags cannot know it), or one of 4,294,968 s (2^32 ms: an int of
	 * ms would wrap to 672). */
	while (recv(c, w, sizeof(w), MSG_DONTWAIT) > 0) /* what came after the timeout */
		;
	int d = dup(c);
	CHECK(d >= 0 && setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0, 0 }, sizeof(tv)) == 0);
	CHECK(setsockopt(d, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
	watch("recv under a SO_RCVTIMEO set through a dup", 5);
	t0 = now_us();
	r = recv(c, &b, 1, 0);
	e = errno;
	unwatch();
	out("recv under SO_RCVTIMEO 150 ms set through a dup: %zd %s after >= 150 ms: %s", r, ename(r < 0 ? e : 0),
	    at_least(t0, 150));
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 4294968, 0 }, sizeof(tv)) == 0);
	close(d);
	p = fork_child();
	if (p == 0) {
		usleep(1000000);
		write_all(s, "l", 1);
		_exit(0);
	}
	r = recv(c, &b, 1, 0);
	out("recv under SO_RCVTIMEO 4294968 s, a byte after 1 s: %zd %s", r, ename(r < 0 ? errno : 0));
	wait_child(p);
	close(c);
	close(s);

	/* More of them, as TCP reads them back after connect and accept. */
	struct { int level, opt; const char *name; int val; } o[] = {
		{ IPPROTO_IP, IP_TOS, "IP_TOS", 0x10 }, { IPPROTO_IP, IP_TTL, "IP_TTL", 33 },
		{ IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE", 42 }, { IPPROTO_TCP, TCP_USER_TIMEOUT, "TCP_USER_TIMEOUT", 1234 },
		{ IPPROTO_TCP, TCP_NOTSENT_LOWAT, "TCP_NOTSENT_LOWAT", 4096 }, { SOL_SOCKET, SO_REUSEPORT, "SO_REUSEPORT", 1 },
	};
	int n = sizeof(o) / sizeof(o[0]);
	for (int i = 0; i < n; i++)
		CHECK(setsockopt(l, o[i].level, o[i].opt, &o[i].val, sizeof(int)) == 0);
	CHECK(setsockopt(l, IPPROTO_TCP, TCP_CONGESTION, "reno", 4) == 0);
	c = socket(fam, SOCK_STREAM, 0);
	for (int i = 0; i < n; i++)
		CHECK(setsockopt(c, o[i].level, o[i].opt, &(int){ o[i].val + (o[i].opt == SO_REUSEPORT ? 0 : 1) }, sizeof(int)) == 0);
	CHECK(setsockopt(c, IPPROTO_TCP, TCP_CONGESTION, "reno", 4) == 0);
	CHECK(connect(c, (void *)&ss, loopback(&ss, port)) == 0);
	s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("client", c);
	path("server", s);
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < n; i++) {
			vl = sizeof(v);
			CHECK(getsockopt(k ? s : c, o[i].level, o[i].opt, &v, &vl) == 0);
			out("%s %s after %s %d", k ? "accepted" : "client", o[i].name, k ? "accept" : "connect", v);
		}
		char cc[16] = { 0 };
		vl = sizeof(cc);
		CHECK(getsockopt(k ? s : c, IPPROTO_TCP, TCP_CONGESTION, cc, &vl) == 0);
		out("%s TCP_CONGESTION %s", k ? "accepted" : "client", cc);
	}
	vl = sizeof(v);
	CHECK(getsockopt(l, IPPROTO_TCP, TCP_SAVE_SYN, &v, &vl) == 0);
	out("listener TCP_SAVE_SYN (never set) %d", v);
}

void sc_connect_nonblock(void)
{
	int port, l = listener(&port);
	struct sockaddr_storage ss;
	int c = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r = connect(c, (void *)&ss, loopback(&ss, port));
	out("nonblocking connect: %d %s", r, ename(r < 0 ? errno : 0));
	struct pollfd p = { c, POLLOUT, 0 };
	CHECK(poll(&p, 1, 5000) == 1);
	out("poll revents POLLOUT %d POLLERR %d", !!(p.revents & POLLOUT), !!(p.revents & POLLERR));
	fd_set w;
	FD_ZERO(&w);
	FD_SET(c, &w);
	struct timeval tv = { 5, 0 };
	out("select writable %d", select(c + 1, NULL, &w, NULL, &tv) == 1 && FD_ISSET(c, &w));
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = 42 }, got;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
	int n = epoll_wait(ep, &got, 1, 5000);
	out("epoll EPOLLOUT %d data %llu", n == 1 && (got.events & EPOLLOUT), n == 1 ? (unsigned long long)got.data.u64 : 0ull);
	int err = -1;
	socklen_t el = sizeof(err);
	CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0);
	out("SO_ERROR %d", err);
	r = connect(c, (void *)&ss, loopback(&ss, port));
	out("second connect: %d %s", r, ename(r < 0 ? errno : 0));
	int s = accept(l, NULL, NULL);
	path("client", c);
	path("server", s);
	int fl = fcntl(c, F_GETFL);
	out("client still nonblocking %d", !!(fl & O_NONBLOCK));
	char b;
	r = read(c, &b, 1);
	out("read on empty nonblocking: %d %s", r, ename(r < 0 ? errno : 0));
	write_all(s, "y", 1);
	CHECK(poll(&(struct pollfd){ c, POLLIN, 0 }, 1, 5000) == 1);
	CHECK(read(c, &b, 1) == 1 && b == 'y');
	out("data ok");
}

void sc_connect_refused(void)
{
	int port, l = listener(&port);
	close(l); /* nobody listens there now */
	struct sockaddr_storage ss;
	int c = socket(fam, SOCK_STREAM, 0);
	int r = connect(c, (void *)&ss, loopback(&ss, port));
	out("connect to a closed port: %d %s", r, ename(r < 0 ? errno : 0));
}

/* epoll registrations made before connect survive it. */
void sc_epoll_before_connect(void)
{
	int port, l = listener(&port);
	struct sockaddr_storage ss;
	int c = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.u64 = 7 }, got[4];
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
	int r = connect(c, (void *)&ss, loopback(&ss, port));
	out("connect %d %s", r, ename(r < 0 ? errno : 0));
	int n = epoll_wait(ep, got, 4, 5000);
	out("epoll_wait %d events OUT %d IN %d data %llu", n, n > 0 && (got[0].events & EPOLLOUT), n > 0 && (got[0].events & EPOLLIN), n > 0 ? (unsigned long long)got[0].data.u64 : 0ull);
	int s = accept(l, NULL, NULL);
	path("client", c);
	write_all(s, "z", 1);
	ev.events = EPOLLIN;
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0);
	n = epoll_wait(ep, got, 4, 5000);
	out("after peer write: %d events IN %d", n, n > 0 && (got[0].events & EPOLLIN));
	r = epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	out("ADD again: %d %s", r, ename(r < 0 ? errno : 0));
}

/* epoll_pwait2 and the _FORTIFY_SOURCE entry points (a program built with
 * -D_FORTIFY_SOURCE reads through __read_chk): what they return is
 * the application's own, nothing of loopfast's. */
extern ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
extern ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
extern int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);

void sc_fortify_pwait2(void)
{
	int port, l = listener(&port);
	struct sockaddr_storage ss;
	int c = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.u64 = 7 }, got[8];
	struct timespec ts = { 5, 0 };
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
	int r = connect(c, (void *)&ss, loopback(&ss, port));
	out("connect %d %s", r, ename(r < 0 ? errno : 0));
	int n = epoll_pwait2(ep, got, 8, &ts, NULL);
	out("epoll_pwait2 %d OUT %d data %llu", n, n > 0 && (got[0].events & EPOLLOUT),
	    n > 0 ? (unsigned long long)got[0].data.u64 : 0ull);
	int s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("client", c);
	usleep(50 * 1000); /* whatever the accept set off has arrived */
	write_all(s, "zy", 2);
	ev.events = EPOLLIN;
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0);
	n = epoll_pwait2(ep, got, 8, &ts, NULL);
	int foreign = 0;
	for (int i = 0; i < n; i++)
		foreign += got[i].data.u64 != 7;
	out("after peer write: epoll_pwait2 %d IN %d, events not the application's: %d", n,
	    n > 0 && (got[0].events & EPOLLIN), foreign);
	char b[8];
	out("__read_chk %zd", __read_chk(c, b, 1, sizeof(b)));
	struct pollfd p = { c, POLLIN, 0 };
	int pr = __poll_chk(&p, 1, 5000, sizeof(p));
	out("__poll_chk %d IN %d", pr, !!(p.revents & POLLIN));
	out("__recv_chk %zd", __recv_chk(c, b, 1, sizeof(b), 0));
	close(s);
	out("__recv_chk at EOF %zd", __recv_chk(c, b, 1, sizeof(b), 0) == 0 ? (ssize_t)0 : (ssize_t)-2);
	close(c);
	close(l);
	close(ep);
}

/* Whether pid is blocked in a poll, select or epoll wait, by the kernel's
 * word (/proc/PID/syscall's first field, the call's number). */
static bool blocked_in_wait(pid_t pid)
{
	static const long waits[] = {
#ifdef SYS_poll /* not on aarch64 */
		SYS_poll, SYS_select, SYS_epoll_wait,
#endif
		SYS_pselect6, SYS_ppoll, SYS_epoll_pwait, SYS_epoll_pwait2,
	};
	char path[64], buf[64] = { 0 };
	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	long nr = n > 0 ? strtol(buf, NULL, 10) : -1;
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++)
		if (nr == waits[i])
			return true;
	return false;
}

/* A child that writes one byte to fd 50 ms from now, and not before its
 * parent blocks in its wait (up to 2 s more): a byte that came while the
 * wait still spun (the parent preempted that long) would test nothing of
 * the blocking call's wake-up. */
static pid_t write_later(int fd)
{
	pid_t parent = getpid(), p = fork_child();
	if (p == 0) {
		usleep(50000);
		for (int i = 0; i < 2000 && !blocked_in_wait(parent); i++)
			usleep(1000);
		write_all(fd, "w", 1);
		_exit(0);
	}
	return p;
}

void sc_readiness(void)
{
	int c, s;
	char buf[16];
	pair(&c, &s);
	path("client", c);
	path("server", s);
	struct pollfd p = { s, POLLIN, 0 };
	out("poll idle %d", poll(&p, 1, 0));
	fd_set r;
	struct timeval tv = { 0, 0 };
	FD_ZERO(&r);
	FD_SET(s, &r);
	out("select idle %d", select(s + 1, &r, NULL, NULL, &tv));
	int lt = epoll_create1(0), et = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = s }, got;
	CHECK(epoll_ctl(lt, EPOLL_CTL_ADD, s, &ev) == 0);
	ev.events = EPOLLIN | EPOLLET;
	CHECK(epoll_ctl(et, EPOLL_CTL_ADD, s, &ev) == 0);
	int n1 = epoll_wait(lt, &got, 1, 0), n2 = epoll_wait(et, &got, 1, 0);
	out("epoll idle lt %d et %d", n1, n2);
	/* Waits that time out never end early. */
	uint64_t t0 = now_us();
	n1 = poll(&p, 1, 100);
	out("poll idle 100 ms: %d after >= 100 ms: %s", n1, at_least(t0, 100));
	FD_ZERO(&r);
	FD_SET(s, &r);
	tv.tv_usec = 100000;
	t0 = now_us();
	n1 = select(s + 1, &r, NULL, NULL, &tv);
	out("select idle 100 ms: %d after >= 100 ms: %s", n1, at_least(t0, 100));
	t0 = now_us();
	n1 = epoll_wait(lt, &got, 1, 100);
	out("epoll_wait idle 100 ms: %d after >= 100 ms: %s", n1, at_least(t0, 100));
	write_all(c, "abc", 3);
	n1 = poll(&p, 1, 5000);
	out("poll after write %d revents IN %d", n1, !!(p.revents & POLLIN));
	FD_ZERO(&r);
	FD_SET(s, &r);
	tv.tv_sec = 5;
	out("select after write %d", select(s + 1, &r, NULL, NULL, &tv));
	n1 = epoll_wait(lt, &got, 1, 5000);
	n2 = epoll_wait(lt, &got, 1, 0);
	out("epoll lt %d %d", n1, n2);
	n1 = epoll_wait(et, &got, 1, 5000);
	n2 = epoll_wait(et, &got, 1, 0);
	out("epoll et %d then %d", n1, n2);
	write_all(c, "d", 1);
	out("epoll et after more data %d", epoll_wait(et, &got, 1, 5000));
	out("read %zd", read(s, buf, sizeof(buf)));
	n1 = poll(&p, 1, 0);
	n2 = epoll_wait(lt, &got, 1, 0);
	out("poll drained %d, epoll lt drained %d", n1, n2);
	/* Bytes that come while each wait blocks wake it. */
	pid_t w = write_later(c);
	n1 = poll(&p, 1, 5000);
	out("poll woken by a write 50 ms later: %d IN %d", n1, !!(p.revents & POLLIN));
	CHECK(wait_child(w) == 0 && read(s, buf, sizeof(buf)) == 1);
	w = write_later(c);
	FD_ZERO(&r);
	FD_SET(s, &r);
	tv.tv_sec = 5;
	out("select woken by a write 50 ms later: %d", select(s + 1, &r, NULL, NULL, &tv));
	CHECK(wait_child(w) == 0 && read(s, buf, sizeof(buf)) == 1);
	w = write_later(c);
	out("epoll_wait woken by a write 50 ms later: %d", epoll_wait(lt, &got, 1, 5000));
	CHECK(wait_child(w) == 0 && read(s, buf, sizeof(buf)) == 1);
	struct pollfd pw = { s, POLLOUT, 0 };
	out("poll writable %d", poll(&pw, 1, 0));
	shutdown(c, SHUT_WR);
	n1 = poll(&p, 1, 5000);
	out("poll after peer SHUT_WR %d IN %d read %zd", n1, !!(p.revents & POLLIN), read(s, buf, sizeof(buf)));
	ev.events = EPOLLIN | EPOLLRDHUP;
	int rh = epoll_create1(0);
	CHECK(epoll_ctl(rh, EPOLL_CTL_ADD, s, &ev) == 0);
	n1 = epoll_wait(rh, &got, 1, 5000);
	out("epoll RDHUP %d %d", n1, n1 == 1 && (got.events & EPOLLRDHUP));
}

void sc_halfclose(void)
{
	int port, l = listener(&port);
	pid_t p = fork_child();
	if (p == 0) {
		int s = accept(l, NULL, NULL);
		char buf[4096];
		size_t total = 0;
		ssize_t n;
		while ((n = read(s, buf, sizeof(buf))) > 0)
			total += (size_t)n;
		char reply[64];
		int k = snprintf(reply, sizeof(reply), "got %zu bytes", total);
		write_all(s, reply, (size_t)k);
		close(s);
		_exit(0);
	}
	int c = connect_to(port);
	path("client", c);
	char data[10000];
	memset(data, 'h', sizeof(data));
	write_all(c, data, sizeof(data));
	out("shutdown %d", shutdown(c, SHUT_WR));
	ssize_t w = write(c, "x", 1);
	out("write after SHUT_WR %zd %s", w, ename(w < 0 ? errno : 0));
	char buf[64] = { 0 };
	size_t n = read_full(c, buf, sizeof(buf) - 1);
	out("reply '%.*s' then EOF %d", (int)n, buf, read(c, buf, 1) == 0);
	out("child %d", wait_child(p));
}

/* poll's answer as names: the bits a peer's close moves. */
static const char *poll_names(int fd)
{
	static char b[64];
	struct pollfd p = { fd, POLLIN | POLLOUT | POLLRDHUP, 0 };

	b[0] = 0;
	if (poll(&p, 1, 0) < 0)
		return "poll failed";
	if (p.revents & POLLIN)
		strcat(b, " IN");
	if (p.revents & POLLOUT)
		strcat(b, " OUT");
	if (p.revents & POLLRDHUP)
		strcat(b, " RDHUP");
	if (p.revents & POLLERR)
		strcat(b, " ERR");
	if (p.revents & POLLHUP)
		strcat(b, " HUP");
	return b;
}

/* Writing to a connection whose peer closed it (a client's request on a
 * keep-alive connection the server has just closed). TCP: no POLLHUP
 * yet, the first write succeeds (the peer's kernel answers it with a
 * reset), and only then POLLERR|POLLHUP and EPIPE. A Unix stream says
 * POLLHUP and EPIPE at once (documented in loopfast(7)). */
void sc_peer_closed(void)
{
	int c, s;
	char b[8];
	pair(&c, &s);
	path("client", c);
	write_all(c, "q", 1);
	CHECK(read(s, b, 1) == 1);
	close(s);
	usleep(100000);
	out("after the peer's close: poll%s", poll_names(c));
	out("read %zd", read(c, b, sizeof(b)));
	ssize_t w = send(c, "x", 1, MSG_NOSIGNAL);
	out("first write %zd %s", w, ename(w < 0 ? errno : 0));
	usleep(100000);
	out("after it: poll%s", poll_names(c));
	w = send(c, "y", 1, MSG_NOSIGNAL);
	out("second write %zd %s", w, ename(w < 0 ? errno : 0));
	int e = 0;
	socklen_t l = sizeof(e);
	out("SO_ERROR %d %s", getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &l), ename(e));
	out("read %zd", read(c, b, sizeof(b)));
	close(c);
}

static void on_sigalrm(int sig)
{
	(void)sig;
}

void sc_msgflags(void)
{
	int c, s;
	char buf[64];
	pair(&c, &s);
	path("client", c);
	ssize_t r = recv(c, buf, sizeof(buf), MSG_DONTWAIT);
	out("MSG_DONTWAIT empty %zd %s", r, ename(r < 0 ? errno : 0));
	/* A read of 0 bytes: EAGAIN on an empty socket, a blocking one waits
	 * for a byte (the kernel's low-water mark is at least 1) and reads 0. */
	r = recv(c, buf, 0, MSG_DONTWAIT);
	out("recv of 0, MSG_DONTWAIT, empty %zd %s", r, ename(r < 0 ? errno : 0));
	pid_t z = fork_child();
	if (z == 0) {
		usleep(100000);
		write_all(s, "z", 1);
		_exit(0);
	}
	r = recv(c, buf, 0, 0);
	out("recv of 0, blocking %zd", r);
	r = recv(c, buf, 1, MSG_DONTWAIT); /* the byte it waited for is there */
	out("then MSG_DONTWAIT %zd %s", r, ename(r < 0 ? errno : 0));
	wait_child(z);
	/* Its one wait ends with 0 whatever ends it: the timeout, a signal
	 * (SA_RESTART or not); read and readv of nothing are the VFS's 0. */
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0, 150000 }, sizeof(struct timeval)) == 0);
	r = recv(c, buf, 0, 0);
	out("recv of 0 under SO_RCVTIMEO 150 ms, empty: %zd %s", r, ename(r < 0 ? errno : 0));
	/* (a timeout too: the Unix socket's wait, which the supervisor keeps,
	 * would restart for ever) */
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 2, 0 }, sizeof(struct timeval)) == 0);
	struct sigaction sa = { .sa_handler = on_sigalrm, .sa_flags = SA_RESTART };
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
	CHECK(setitimer(ITIMER_REAL, &(struct itimerval){ { 0, 0 }, { 0, 100000 } }, NULL) == 0);
	r = recv(c, buf, 0, 0);
	out("recv of 0 under SO_RCVTIMEO 2 s, SA_RESTART signal after 100 ms: %zd %s", r, ename(r < 0 ? errno : 0));
	signal(SIGALRM, SIG_DFL);
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0, 0 }, sizeof(struct timeval)) == 0);
	watch("read of 0", 5);
	out("read of 0, empty: %zd", read(c, buf, 0));
	out("readv of nothing, empty: %zd", readv(c, (struct iovec[2]){ { buf, 0 }, { buf, 0 } }, 2));
	unwatch();
	/* Only an urgent byte queued: a read of 0 returns at once, a peek
	 * (which cannot take it) waits for more, to its timeout. */
	write_all(s, "u", 1); /* (the tier's urgent data needs a ring first) */
	CHECK(recv(c, buf, 1, 0) == 1);
	CHECK(send(s, "!", 1, MSG_OOB) == 1);
	CHECK(poll(&(struct pollfd){ c, POLLPRI, 0 }, 1, 5000) == 1);
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 1, 0 }, sizeof(struct timeval)) == 0);
	r = recv(c, buf, 0, 0); /* (the timeout: a Unix socket, under the supervisor, waits for more) */
	out("recv of 0 under SO_RCVTIMEO 1 s, only an urgent byte queued: %zd %s", r, ename(r < 0 ? errno : 0));
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0, 150000 }, sizeof(struct timeval)) == 0);
	watch("MSG_PEEK, an urgent byte queued", 5);
	r = recv(c, buf, 1, MSG_PEEK);
	unwatch();
	out("MSG_PEEK under SO_RCVTIMEO 150 ms, only an urgent byte queued: %zd %s", r, ename(r < 0 ? errno : 0));
	CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0, 0 }, sizeof(struct timeval)) == 0);
	r = recv(c, buf, 1, MSG_OOB);
	out("then MSG_OOB %zd %s '%.*s'", r, ename(r < 0 ? errno : 0), (int)(r > 0 ? r : 0), buf);
	write_all(s, "peekaboo", 8);
	CHECK(poll(&(struct pollfd){ c, POLLIN, 0 }, 1, 5000) == 1);
	r = recv(c, buf, 4, MSG_PEEK);
	out("MSG_PEEK %zd '%.*s'", r, (int)r, buf);
	r = recv(c, buf, 8, 0);
	out("then recv %zd '%.*s'", r, (int)r, buf);
	pid_t p = fork_child();
	if (p == 0) {
		write_all(s, "0123456789", 10);
		usleep(100000);
		write_all(s, "abcdefghij", 10);
		_exit(0);
	}
	r = recv(c, buf, 20, MSG_WAITALL);
	out("MSG_WAITALL %zd '%.*s'", r, (int)r, buf);
	wait_child(p);
	close(s);
	r = recv(c, buf, sizeof(buf), 0);
	out("after peer close recv %zd", r);
	/* Writing to a connection the peer closed: first write may succeed
	 * (TCP) or fail; keep writing until EPIPE, with no SIGPIPE. */
	int e = 0;
	for (int i = 0; i < 100 && !e; i++) {
		if (send(c, "x", 1, MSG_NOSIGNAL) < 0)
			e = errno;
		else
			usleep(1000);
	}
	out("MSG_NOSIGNAL send eventually fails: %s", ename(e));
}

void sc_vectored(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
	path("server", s);
	struct iovec iov[3] = { { "one ", 4 }, { "two ", 4 }, { "three", 5 } };
	out("writev %zd", writev(c, iov, 3));
	char a[5], b[8];
	struct iovec in[2] = { { a, 5 }, { b, 8 } };
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	ssize_t r = readv(s, in, 2);
	out("readv %zd '%.5s' '%.*s'", r, a, (int)(r - 5), b);
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
	out("sendmsg %zd", sendmsg(s, &m, 0));
	char buf[32];
	struct iovec ri = { buf, sizeof(buf) };
	struct msghdr rm = { .msg_iov = &ri, .msg_iovlen = 1 };
	CHECK(poll(&(struct pollfd){ c, POLLIN, 0 }, 1, 5000) == 1);
	r = recvmsg(c, &rm, 0);
	out("recvmsg %zd '%.*s' flags %d", r, (int)r, buf, rm.msg_flags);
	/* A destination on a connected socket is ignored, as TCP does. */
	struct sockaddr_storage to;
	socklen_t tl = loopback(&to, 9);
	struct msghdr mn = { .msg_name = &to, .msg_namelen = tl, .msg_iov = iov, .msg_iovlen = 1 };
	ssize_t r1 = sendto(s, "@", 1, 0, (void *)&to, tl);
	ssize_t r2 = sendmsg(s, &mn, 0);
	out("sendto/sendmsg with an address: %zd %zd", r1, r2);
	/* What was sent, no more: a refused send (a Unix stream's EISCONN
	 * under a seccomp supervisor, which sees no send) leaves nothing. */
	size_t k = read_full(c, buf, (size_t)(r1 > 0 ? r1 : 0) + (size_t)(r2 > 0 ? r2 : 0));
	out("then '%.*s'", (int)k, buf);
	/* Many pieces: a blocking writev sends them all, and a recvmsg with
	 * MSG_WAITALL fills them all (300 > the tier's window of 64); past
	 * UIO_MAXIOV the kernel says EINVAL and sends nothing. */
	enum { PIECES = 300 };
	static char many[PIECES], got[PIECES];
	static struct iovec mv[1025];
	for (int i = 0; i < 1025; i++)
		mv[i] = (struct iovec){ many + i % PIECES, 1 };
	for (int i = 0; i < PIECES; i++)
		many[i] = (char)('a' + i % 26);
	errno = 0;
	ssize_t over = writev(c, mv, 1025);
	out("writev of 1025 pieces %zd %s", over, ename(over < 0 ? errno : 0));
	out("writev of %d pieces %zd", PIECES, writev(c, mv, PIECES));
	struct iovec gv[PIECES];
	for (int i = 0; i < PIECES; i++)
		gv[i] = (struct iovec){ got + i, 1 };
	struct msghdr gm = { .msg_iov = gv, .msg_iovlen = PIECES };
	r = recvmsg(s, &gm, MSG_WAITALL);
	out("recvmsg MSG_WAITALL of %d pieces %zd same %d", PIECES, r, r == PIECES && !memcmp(got, many, PIECES));
	/* Without MSG_WAITALL: what has come fills every piece (one send of
	 * 300 bytes is there at once when poll says so). */
	out("writev of %d pieces %zd", PIECES, writev(c, mv, PIECES));
	memset(got, 0, sizeof(got));
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	r = readv(s, gv, PIECES);
	out("readv of %d pieces %zd same %d", PIECES, r, r == PIECES && !memcmp(got, many, PIECES));
	errno = 0;
	r = readv(s, mv, 1025);
	out("readv of 1025 pieces %zd %s", r, ename(r < 0 ? errno : 0));
	/* Urgent: the last byte of all 70 pieces is the one at the mark. */
	struct msghdr om = { .msg_iov = mv, .msg_iovlen = 70 };
	out("sendmsg MSG_OOB of 70 pieces %zd", sendmsg(c, &om, MSG_OOB));
	CHECK(poll(&(struct pollfd){ s, POLLPRI, 0 }, 1, 5000) == 1);
	r = recv(s, got, sizeof(got), 0);
	char u = 0;
	ssize_t ru = recv(s, &u, 1, MSG_OOB);
	out("recv to the mark %zd same %d, then MSG_OOB %zd '%c'", r, r == 69 && !memcmp(got, many, 69), ru, u);
	/* MSG_TRUNC: TCP discards what it would have copied (no buffer at
	 * all here), what has come or, with MSG_WAITALL, all that was asked. */
	static char big[150000];
	static const int tflags[3] = { MSG_TRUNC, MSG_TRUNC | MSG_WAITALL, MSG_TRUNC | MSG_WAITALL | MSG_PEEK };
	static const char *const tname[3] = { "MSG_TRUNC", "MSG_TRUNC|MSG_WAITALL", "MSG_TRUNC|MSG_WAITALL|MSG_PEEK" };
	for (int i = 0; i < 3; i++) {
		write_all(c, big, sizeof(big));
		write_all(c, "hello", 5);
		CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
		errno = 0;
		r = recv(s, NULL, sizeof(big), tflags[i]);
		/* (without MSG_WAITALL, how much has come is the transport's) */
		out("recv NULL %s %s %s", tname[i], r > 0 && (i ? r == (ssize_t)sizeof(big) : 1) ? "ok" : "short",
		    ename(r < 0 ? errno : 0));
		size_t took = r > 0 && i < 2 ? (size_t)r : 0; /* (an error, or a peek, took nothing) */
		size_t k2 = took < sizeof(big) ? read_full(s, big, sizeof(big) - took) : 0;
		memset(buf, 0, sizeof(buf));
		int h = (int)read_full(s, buf, 5);
		out("then the rest %d and '%.*s'", took + k2 == sizeof(big), h, buf);
	}
	/* The kernel's checks come first, with MSG_TRUNC too; recv clamps a
	 * huge length; an urgent byte's MSG_OOB survives MSG_TRUNC. */
	errno = 0;
	struct msghdr tm = { .msg_iov = mv, .msg_iovlen = 1025 };
	r = recvmsg(s, &tm, MSG_TRUNC | MSG_DONTWAIT);
	out("recvmsg MSG_TRUNC of 1025 pieces %zd %s", r, ename(r < 0 ? errno : 0));
	struct iovec huge = { buf, SIZE_MAX };
	tm = (struct msghdr){ .msg_iov = &huge, .msg_iovlen = 1 };
	errno = 0;
	r = recvmsg(s, &tm, MSG_TRUNC | MSG_DONTWAIT);
	out("recvmsg MSG_TRUNC of SIZE_MAX %zd %s", r, ename(r < 0 ? errno : 0));
	write_all(c, "hello", 5);
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	r = recv(s, big, SIZE_MAX, MSG_DONTWAIT); /* (a static buffer: the stack's top + 2 GiB would be EFAULT) */
	out("recv of SIZE_MAX %zd '%.*s'", r, (int)(r > 0 ? r : 0), big);
	CHECK(send(c, "abc", 3, MSG_OOB) == 3);
	CHECK(poll(&(struct pollfd){ s, POLLPRI, 0 }, 1, 5000) == 1);
	char ob = 0;
	struct iovec oi = { &ob, 1 };
	tm = (struct msghdr){ .msg_iov = &oi, .msg_iovlen = 1 };
	r = recvmsg(s, &tm, MSG_OOB | MSG_TRUNC);
	out("recvmsg MSG_OOB|MSG_TRUNC %zd flags %d", r, tm.msg_flags);
	out("then '%.*s'", (int)read_full(s, buf, 2), buf);
	/* A non-blocking write that fits part, made with a stale errno of
	 * another connection's reset (an event loop's): the next write says
	 * the socket is full, never a reset. */
	static char full[8 << 20];
	fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
	errno = ECONNRESET;
	ssize_t part = send(c, full, sizeof(full), 0);
	errno = 0;
	r = send(c, full, sizeof(full), 0);
	out("a full non-blocking send %s, the next %zd %s", part > 0 && part < (ssize_t)sizeof(full) ? "short" : "not short",
	    r, ename(r < 0 ? errno : 0));
	CHECK(read_full(s, full, (size_t)part) == (size_t)part);
}

/* A client's first write, larger than the socket's buffers, made before
 * its server accepts: blocking, it waits for the server and sends it all
 * (TCP queues the connection's bytes before the accept, and the write
 * returns once the server has read enough). */
enum { FIRST = 4 << 20 };
static char first_out[FIRST], first_in[FIRST];

static void *accept_and_read_later(void *arg)
{
	int *a = arg;
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	a[1] = accept(a[0], NULL, NULL);
	CHECK(a[1] >= 0);
	a[2] = (int)read_full(a[1], first_in, FIRST);
	return NULL;
}

void sc_first_write(void)
{
	int port, l = listener(&port);
	pthread_t t;

	for (size_t i = 0; i < FIRST; i++)
		first_out[i] = (char)(i * 7 + i / 4096);
	int c = connect_to(port);
	int arg[3] = { l, -1, 0 };
	CHECK(pthread_create(&t, NULL, accept_and_read_later, arg) == 0);
	ssize_t w = write(c, first_out, FIRST);
	out("first write of %d bytes before the accept %zd", FIRST, w);
	if (w > 0 && w < FIRST)
		write_all(c, first_out + w, FIRST - (size_t)w);
	CHECK(pthread_join(t, NULL) == 0);
	path("client", c);
	path("server", arg[1]);
	out("server read %d same %d", arg[2], arg[2] == FIRST && !memcmp(first_in, first_out, FIRST));
	close(c);
	close(arg[1]);
	close(l);
}

void sc_sendfile_splice(void)
{
	int c, s;
	char tmpl[] = "/tmp/lfprobe-XXXXXX", buf[300000];
	pair(&c, &s);
	path("client", c);
	int f = mkstemp(tmpl);
	CHECK(f >= 0);
	unlink(tmpl);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 7 + 3);
	write_all(f, buf, sizeof(buf));
	off_t off = 0;
	pid_t p = fork_child();
	if (p == 0) { /* server: splice socket -> pipe -> socket (echo) */
		int pp[2];
		CHECK(pipe(pp) == 0);
		size_t left = sizeof(buf);
		while (left) {
			ssize_t n = splice(s, NULL, pp[1], NULL, left, SPLICE_F_MOVE);
			CHECK(n > 0);
			left -= (size_t)n;
			while (n > 0) {
				ssize_t m = splice(pp[0], NULL, s, NULL, (size_t)n, SPLICE_F_MOVE);
				CHECK(m > 0);
				n -= m;
			}
		}
		_exit(0);
	}
	size_t sent = 0;
	while (sent < sizeof(buf)) {
		ssize_t n = sendfile(c, f, &off, sizeof(buf) - sent);
		CHECK(n > 0);
		sent += (size_t)n;
	}
	out("sendfile sent %zu", sent);
	char back[sizeof(buf)];
	size_t got = read_full(c, back, sizeof(back));
	out("echoed %zu equal %d", got, !memcmp(back, buf, sizeof(buf)));
	out("server %d", wait_child(p));
}

void sc_ioctl(void)
{
	int c, s, n = -1;
	pair(&c, &s);
	path("client", c);
	write_all(c, "0123456789", 10);
	for (int i = 0; i < 500 && n != 10; i++) {
		CHECK(ioctl(s, FIONREAD, &n) == 0);
		if (n != 10)
			usleep(1000);
	}
	out("FIONREAD %d", n);
	char buf[10];
	CHECK(read_full(s, buf, 10) == 10);
	CHECK(ioctl(s, FIONREAD, &n) == 0);
	out("FIONREAD after read %d", n);
	CHECK(ioctl(c, SIOCOUTQ, &n) == 0);
	out("SIOCOUTQ after the peer read everything %d", n);
}

void sc_backpressure(void)
{
	int c, s;
	static char buf[65536];
	pair(&c, &s);
	path("client", c);
	CHECK(fcntl(c, F_SETFL, O_NONBLOCK) == 0);
	size_t total = 0;
	ssize_t w;
	for (;;) {
		w = write(c, buf, sizeof(buf));
		if (w < 0)
			break;
		total += (size_t)w;
		CHECK(total < (256u << 20));
	}
	out("write stops with %s", ename(errno));
	out("queued less than 64 MiB: %d", total < (64u << 20));
	struct pollfd p = { c, POLLOUT, 0 };
	out("poll POLLOUT while full %d", poll(&p, 1, 0));
	CHECK(fcntl(c, F_SETFL, 0) == 0);
	struct timeval tv = { 0, 200000 };
	CHECK(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0);
	uint64_t t0 = now_us();
	w = write(c, buf, sizeof(buf));
	int e = errno;
	out("blocking write with SO_SNDTIMEO 200 ms while full: %zd %s after >= 200 ms: %s", w, ename(w < 0 ? e : 0),
	    at_least(t0, 200));
	total += w > 0 ? (size_t)w : 0;
	size_t got = 0;
	while (got < total) {
		ssize_t r = read(s, buf, sizeof(buf));
		CHECK(r > 0);
		got += (size_t)r;
	}
	out("reader got everything %d", got == total);
	out("writable again %d", poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT));

	/* The timeout is the call's, not each buffer's: a reader that takes
	 * 64 KiB every 50 ms frees room before each 200 ms wait ends (a Unix
	 * stream's own timeout restarts there), yet a 16 MiB write ends at
	 * 200 ms with what went. */
	pid_t k = fork_child();
	if (k == 0) {
		for (;;) { /* until killed: all 16 MiB would go in 13 s */
			usleep(50000);
			if (read(s, buf, sizeof(buf)) <= 0)
				break;
		}
		_exit(0);
	}
	char *big = calloc(16, 1 << 20);
	CHECK(big);
	t0 = now_us();
	w = write(c, big, 16u << 20);
	uint64_t took = now_us() - t0;
	out("a write of 16 MiB under SO_SNDTIMEO 200 ms, 64 KiB read every 50 ms: ended before all: %s",
	    w > 0 && w < (16 << 20) ? "yes" : w < 0 ? ename(errno) : "no");
	out("# it took %llu ms", (unsigned long long)took / 1000);
	free(big);
	kill(k, SIGKILL);
	wait_child(k);

	/* A signal in a write's wait under a send timeout ends it, SA_RESTART
	 * or not (the kernel restarts no wait that has a timeout). */
	struct sigaction sa = { .sa_handler = on_sigalrm, .sa_flags = SA_RESTART };
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
	tv = (struct timeval){ 2, 0 };
	CHECK(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0);
	CHECK(fcntl(c, F_SETFL, O_NONBLOCK) == 0);
	while (write(c, buf, sizeof(buf)) > 0)
		;
	CHECK(errno == EAGAIN && fcntl(c, F_SETFL, 0) == 0);
	CHECK(setitimer(ITIMER_REAL, &(struct itimerval){ { 0, 0 }, { 0, 50000 } }, NULL) == 0);
	w = write(c, buf, sizeof(buf));
	e = errno;
	out("a write to a full socket under SO_SNDTIMEO 2 s, SA_RESTART SIGALRM after 50 ms: %zd %s", w,
	    ename(w < 0 ? e : 0));
	signal(SIGALRM, SIG_DFL);

	/* The file's state is the kernel's, which a dup shares: O_NONBLOCK
	 * set through one makes the write EAGAIN at once; a timeout cleared
	 * through one, a blocking write. */
	int d = dup(c);
	CHECK(d >= 0 && setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &(struct timeval){ 60, 0 }, sizeof(tv)) == 0);
	CHECK(fcntl(d, F_SETFL, O_NONBLOCK) == 0);
	while (write(d, buf, sizeof(buf)) > 0)
		;
	watch("a write whose file a dup made non-blocking", 5);
	w = write(c, buf, sizeof(buf));
	unwatch();
	out("a write to a full socket whose file a dup made non-blocking: %zd %s", w, ename(w < 0 ? errno : 0));
	CHECK(fcntl(d, F_SETFL, 0) == 0);
	CHECK(setsockopt(d, SOL_SOCKET, SO_SNDTIMEO, &(struct timeval){ 0, 0 }, sizeof(tv)) == 0);
	k = fork_child();
	if (k == 0) {
		while (read(s, buf, sizeof(buf)) > 0)
			;
		_exit(0);
	}
	big = calloc(1, 1 << 20);
	CHECK(big);
	w = write(c, big, 1 << 20);
	out("a write of 1 MiB after a dup cleared SO_SNDTIMEO, the reader draining: %zd %s", w, ename(w < 0 ? errno : 0));
	free(big);
	kill(k, SIGKILL);
	wait_child(k);
	CHECK(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &(struct timeval){ 1, 0 }, sizeof(tv)) == 0);
	out("writev of nothing under SO_SNDTIMEO: %zd", writev(c, NULL, 0));
	close(d);
}

/* An IPv4 client and a dual-stack [::] listener (v4-mapped addresses). */
void sc_dualstack(void)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t al = sizeof(a);
	int zero = 0, l = socket(AF_INET6, SOCK_STREAM, 0);
	CHECK(setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) == 0);
	CHECK(bind(l, (void *)&a, sizeof(a)) == 0);
	CHECK(listen(l, 8) == 0);
	CHECK(getsockname(l, (void *)&a, &al) == 0);
	fam = AF_INET;
	int c = connect_to(ntohs(a.sin6_port));
	int s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	path("client", c);
	path("server", s);
	print_addr("client", c, 0);
	print_addr("client", c, 1);
	print_addr("server", s, 0);
	print_addr("server", s, 1);
	out("ports match %d %d", port_of(c, 0) == port_of(s, 1), port_of(c, 1) == port_of(s, 0));
	expect_echo_pair(c, s);
}

static volatile sig_atomic_t urgent;
static void on_sigurg(int sig) { (void)sig; urgent++; }

static void atmark(const char *when, int fd)
{
	int m = -1;
	CHECK(ioctl(fd, SIOCATMARK, &m) == 0);
	out("SIOCATMARK %s: %d", when, m);
}

static void recv_show(const char *what, int fd, size_t n, int flags)
{
	char buf[16];
	ssize_t r = recv(fd, buf, n, flags | MSG_DONTWAIT);
	out("%s: %zd %s%.*s", what, r, r < 0 ? ename(errno) : "", (int)(r > 0 ? r : 0), buf);
}

/* Waits for urgent data to be there (the sender's OOB byte went through). */
static void wait_pri(int fd)
{
	struct pollfd p = { fd, POLLPRI, 0 };
	CHECK(poll(&p, 1, 5000) == 1);
	out("poll POLLPRI %d POLLIN %d", !!(p.revents & POLLPRI), !!(p.revents & POLLIN));
}

/* Out-of-band data (MSG_OOB): the urgent byte, the mark, SO_OOBINLINE,
 * POLLPRI, SIGURG to the owner. */
void sc_oob(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
	path("server", s);
	struct sigaction sa = { .sa_handler = on_sigurg };
	CHECK(sigaction(SIGURG, &sa, NULL) == 0);
	CHECK(fcntl(s, F_SETOWN, getpid()) == 0);
	atmark("before", s);
	out("send MSG_OOB: %zd", send(c, "hello", 5, MSG_OOB));
	wait_pri(s);
	out("SIGURG received: %d", urgent > 0);
	atmark("with hell before the mark", s);
	recv_show("recv stops at the mark", s, 16, 0);
	atmark("at the mark", s);
	recv_show("recv MSG_OOB", s, 1, MSG_OOB);
	recv_show("recv MSG_OOB again", s, 1, MSG_OOB);
	recv_show("recv then", s, 16, 0);
	out("send more: %zd", send(c, "world", 5, 0));
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	recv_show("recv after the urgent byte", s, 16, 0);
	close(c);
	close(s);

	pair(&c, &s);
	out("SO_OOBINLINE: %d", setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &(int){ 1 }, sizeof(int)));
	out("send MSG_OOB: %zd", send(c, "ab", 2, MSG_OOB));
	wait_pri(s);
	recv_show("inline: recv MSG_OOB", s, 1, MSG_OOB);
	recv_show("inline: recv stops at the mark", s, 16, 0);
	atmark("inline, at the mark", s);
	recv_show("inline: recv the urgent byte in line", s, 16, 0);
	close(c);
	close(s);

	/* A second urgent byte before the first was read: TCP keeps only the
	 * last mark, and where the first byte goes differs (documented). */
	pair(&c, &s);
	out("send x MSG_OOB: %zd", send(c, "x", 1, MSG_OOB));
	wait_pri(s);
	out("send y MSG_OOB: %zd", send(c, "y", 1, MSG_OOB));
	CHECK(poll(&(struct pollfd){ s, POLLPRI, 0 }, 1, 5000) == 1);
	recv_show("two marks: recv MSG_OOB", s, 1, MSG_OOB);
	recv_show("two marks: recv", s, 16, 0);
	sa.sa_handler = SIG_DFL;
	sigaction(SIGURG, &sa, NULL);
}

/* shutdown(SHUT_RD): what is queued is still read, then 0 instead of a
 * wait; the peer may still send, and those bytes are read too. */
void sc_shut_rd(void)
{
	int c, s;
	char buf[16];
	pair(&c, &s);
	path("client", c);
	path("server", s);
	write_all(c, "ab", 2);
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	errno = 4242; /* success must leave errno alone */
	int rc = shutdown(s, SHUT_RD);
	out("shutdown SHUT_RD: %d errno kept %d", rc, errno == 4242);
	out("read what was queued: %zd", read(s, buf, sizeof(buf)));
	out("read with nothing queued (blocking socket): %zd", read(s, buf, sizeof(buf)));
	out("recv MSG_WAITALL: %zd", recv(s, buf, sizeof(buf), MSG_WAITALL));
	struct pollfd p = { s, POLLIN | POLLRDHUP, 0 };
	int n = poll(&p, 1, 0);
	out("poll: %d IN %d RDHUP %d", n, !!(p.revents & POLLIN), !!(p.revents & POLLRDHUP));
	fd_set r;
	FD_ZERO(&r);
	FD_SET(s, &r);
	struct timeval tv = { 0, 0 };
	out("select readable: %d", select(s + 1, &r, NULL, NULL, &tv));
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP }, got;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
	out("epoll with nothing queued: %d", epoll_wait(ep, &got, 1, 0));
	ssize_t w = write(c, "cd", 2);
	out("the peer writes after SHUT_RD: %zd %s", w, ename(w < 0 ? errno : 0));
	ssize_t got_n = 0;
	for (int i = 0; i < 5000 && got_n == 0; i++) { /* TCP reads 0 until the bytes are there */
		got_n = read(s, buf, sizeof(buf));
		if (got_n == 0)
			usleep(1000);
	}
	out("and the reader gets them: %zd '%.*s'", got_n, (int)(got_n > 0 ? got_n : 0), buf);
	out("epoll once bytes came: %d", epoll_wait(ep, &got, 1, 0));
	out("its own writes still go: %zd", write(s, "ef", 2));
	CHECK(read_full(c, buf, 2) == 2);
	out("the peer reads '%.2s'", buf);
	errno = 4242;
	rc = shutdown(s, SHUT_WR);
	out("SHUT_WR as well: %d errno kept %d", rc, errno == 4242);
	out("the peer reads EOF: %zd", read(c, buf, sizeof(buf)));
	close(c);
	close(s);

	pair(&c, &s);
	errno = 4242;
	rc = shutdown(s, SHUT_RDWR);
	out("shutdown SHUT_RDWR: %d errno kept %d", rc, errno == 4242);
	out("read: %zd", read(s, buf, sizeof(buf)));
	w = write(s, "x", 1);
	out("write: %zd %s", w, ename(w < 0 ? errno : 0));
	out("the peer reads EOF: %zd", read(c, buf, sizeof(buf)));
	w = write(c, "gh", 2);
	out("the peer writes: %zd %s", w, ename(w < 0 ? errno : 0));
}

/* SO_RCVLOWAT: a blocking read waits for that many bytes; poll, select
 * and epoll wait for them on TCP only (documented). */
void sc_rcvlowat(void)
{
	int c, s, n = 0;
	char buf[16];
	pair(&c, &s);
	path("client", c);
	path("server", s);
	CHECK(setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &(int){ 5 }, sizeof(int)) == 0);
	int v;
	socklen_t vl = sizeof(v);
	CHECK(getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &vl) == 0);
	out("SO_RCVLOWAT %d", v);
	write_all(c, "abc", 3);
	for (int i = 0; i < 5000 && n != 3; i++) {
		CHECK(ioctl(s, FIONREAD, &n) == 0);
		if (n != 3)
			usleep(1000);
	}
	out("queued %d", n);
	out("poll below the mark: %d", poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 0));
	fd_set r;
	FD_ZERO(&r);
	FD_SET(s, &r);
	struct timeval tv = { 0, 0 };
	out("select below the mark: %d", select(s + 1, &r, NULL, NULL, &tv));
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN }, got;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
	out("epoll below the mark: %d", epoll_wait(ep, &got, 1, 0));
	out("MSG_DONTWAIT below the mark: %zd", recv(s, buf, sizeof(buf), MSG_DONTWAIT));
	/* Nothing queued: a blocking read waits for bytes that reach the mark.
	 * (They come in one write: a TCP read that already took some bytes
	 * waits for the mark in new ones, and may wait for ever; documented.) */
	pid_t p = fork_child();
	if (p == 0) {
		usleep(100000);
		write_all(c, "defghi", 6);
		_exit(0);
	}
	out("a blocking read waits for the mark: %zd", recv(s, buf, sizeof(buf), 0));
	out("writer %d", wait_child(p));
	write_all(c, "jklmn", 5);
	out("poll at the mark: %d", poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000));
	out("read %zd", recv(s, buf, sizeof(buf), 0));
	/* Bytes below the mark queued: the read takes them and waits for the
	 * rest (enough new ones that TCP wakes too). */
	write_all(c, "abc", 3);
	for (int i = 0, q = 0; i < 5000 && q != 3; i++) {
		CHECK(ioctl(s, FIONREAD, &q) == 0);
		if (q != 3)
			usleep(1000);
	}
	p = fork_child();
	if (p == 0) {
		usleep(100000);
		write_all(c, "defghijk", 8);
		_exit(0);
	}
	out("a blocking read with 3 queued, then 8 more: %zd", recv(s, buf, sizeof(buf), 0));
	out("writer %d", wait_child(p));
}

/* recvmmsg and sendmmsg on a connected stream: what each message reports
 * (its length, no source address, no ancillary data), MSG_WAITFORONE, a
 * timeout, EOF (each message 0 bytes), and a destination given to
 * sendmmsg (TCP ignores it). */
static void mmsg_show(const char *what, int r, struct mmsghdr *v, char bufs[][16])
{
	out("%s: %d %s", what, r, ename(r < 0 ? errno : 0));
	for (int i = 0; i < r; i++)
		out("  message %d: len %u '%.*s' namelen %u controllen %zu flags %#x", i, v[i].msg_len, (int)v[i].msg_len,
		    bufs[i], (unsigned)v[i].msg_hdr.msg_namelen, (size_t)v[i].msg_hdr.msg_controllen, v[i].msg_hdr.msg_flags);
}

static void mmsg_prepare(struct mmsghdr *v, struct iovec *iov, char bufs[][16], struct sockaddr_storage *names,
			 char ctl[][64], int n)
{
	memset(v, 0, sizeof(*v) * (size_t)n);
	for (int i = 0; i < n; i++) {
		iov[i] = (struct iovec){ bufs[i], 16 };
		v[i].msg_hdr = (struct msghdr){ .msg_name = &names[i], .msg_namelen = sizeof(names[i]), .msg_iov = &iov[i],
						.msg_iovlen = 1, .msg_control = ctl[i], .msg_controllen = 64 };
	}
}

void sc_mmsg(void)
{
	int c, s, port;
	char bufs[4][16], ctl[4][64];
	struct iovec iov[4];
	struct mmsghdr v[4];
	struct sockaddr_storage names[4], dst;
	int r;
	pair(&c, &s);
	path("client", c);
	path("server", s);

	write_all(c, "onetwothree", 11);
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	mmsg_prepare(v, iov, bufs, names, ctl, 4);
	r = recvmmsg(s, v, 4, MSG_WAITFORONE, NULL);
	mmsg_show("recvmmsg MSG_WAITFORONE", r, v, bufs);

	mmsg_prepare(v, iov, bufs, names, ctl, 4);
	r = recvmmsg(s, v, 4, MSG_DONTWAIT, NULL);
	mmsg_show("recvmmsg MSG_DONTWAIT, nothing queued", r, v, bufs);

	/* Two messages' worth, one after the other: the second waits. */
	pid_t p = fork_child();
	if (p == 0) {
		write_all(c, "first", 5);
		usleep(100000);
		write_all(c, "second", 6);
		_exit(0);
	}
	mmsg_prepare(v, iov, bufs, names, ctl, 4);
	r = recvmmsg(s, v, 2, 0, NULL);
	mmsg_show("recvmmsg of 2, blocking", r, v, bufs);
	wait_child(p);

	/* A timeout, looked at after each message: one message, then the
	 * second waits until data comes, past the timeout. */
	p = fork_child();
	if (p == 0) {
		write_all(c, "a", 1);
		usleep(300000);
		write_all(c, "b", 1);
		_exit(0);
	}
	struct timespec ts = { 0, 100000000 };
	mmsg_prepare(v, iov, bufs, names, ctl, 4);
	r = recvmmsg(s, v, 2, 0, &ts);
	mmsg_show("recvmmsg of 2, timeout 100 ms", r, v, bufs);
	out("  timeout left: %s", ts.tv_sec == 0 && ts.tv_nsec == 0 ? "0" : "some");
	wait_child(p);

	/* Three messages, each with a destination (another port). */
	socklen_t dl = loopback(&dst, 9);
	struct iovec siov[3] = { { "one", 3 }, { "two", 3 }, { "three", 5 } };
	struct mmsghdr sv[3];
	memset(sv, 0, sizeof(sv));
	for (int i = 0; i < 3; i++)
		sv[i].msg_hdr = (struct msghdr){ .msg_name = &dst, .msg_namelen = dl, .msg_iov = &siov[i], .msg_iovlen = 1 };
	r = sendmmsg(c, sv, 3, 0);
	out("sendmmsg with destinations: %d %s, lens %u %u %u", r, ename(r < 0 ? errno : 0), sv[0].msg_len,
	    sv[1].msg_len, sv[2].msg_len);
	CHECK(poll(&(struct pollfd){ s, POLLIN, 0 }, 1, 5000) == 1);
	usleep(50000); /* all three queued */
	mmsg_prepare(v, iov, bufs, names, ctl, 4);
	r = recvmmsg(s, v, 1, 0, NULL);
	mmsg_show("recvmmsg of what sendmmsg sent", r, v, bufs);
	/* EOF: every message of 0 bytes. */
	close(c);
	mmsg_prepare(v, iov, bufs, names, ctl, 4);
	r = recvmmsg(s, v, 3, 0, NULL);
	mmsg_show("recvmmsg after the peer closed", r, v, bufs);
	close(s);
	(void)port;
}
