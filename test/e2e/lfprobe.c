/* lfprobe: an unmodified TCP program for the end-to-end tests.
 *
 * usage: lfprobe SCENARIO [4|6]
 *
 * Each scenario exercises one socket behaviour between a client and a
 * server on loopback and prints a transcript of what a program can observe.
 * The tests run it over plain TCP and under `loopfast run` and require the
 * same transcript. Lines starting with "#path " say which kernel object
 * carried each connection (unix or tcp, from /proc/net/unix): they are
 * checked separately, never compared. Nothing here knows about loopfast. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <linux/sockios.h>
#include <unistd.h>

static int fam = AF_INET;
static const char *self;

static void out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

#define CHECK(c) do { if (!(c)) { out("FAIL %s:%d %s (errno %d %s)", __FILE__, __LINE__, #c, errno, strerror(errno)); exit(1); } } while (0)

static const char *ename(int e)
{
	switch (e) {
	case 0: return "0";
	case EAGAIN: return "EAGAIN";
	case EINPROGRESS: return "EINPROGRESS";
	case EPIPE: return "EPIPE";
	case ECONNRESET: return "ECONNRESET";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EISCONN: return "EISCONN";
	case ENOTCONN: return "ENOTCONN";
	default: return strerror(e);
	}
}

/* Which kernel object is behind fd: "unix" or "tcp". */
static const char *path_of(int fd)
{
	char link[64], target[64], line[512];
	unsigned long ino = 0, x;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return "none";
	target[n] = 0;
	sscanf(target, "socket:[%lu]", &ino);
	FILE *f = fopen("/proc/net/unix", "r");
	const char *r = "tcp";
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu", &x) == 1 && x == ino)
			r = "unix";
	if (f)
		fclose(f);
	return r;
}

static void path(const char *who, int fd) { out("#path %s %s", who, path_of(fd)); }

static socklen_t loopback(struct sockaddr_storage *ss, int port)
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
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a->sin_port = htons(port);
	return sizeof(*a);
}

static int port_of(int fd, int peer)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	CHECK((peer ? getpeername(fd, (void *)&ss, &l) : getsockname(fd, (void *)&ss, &l)) == 0);
	return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
}

static int listener_opts(int *port, int reuseport)
{
	struct sockaddr_storage ss;
	int one = 1, fd = socket(fam, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	if (reuseport)
		CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0);
	CHECK(bind(fd, (void *)&ss, loopback(&ss, *port)) == 0);
	CHECK(listen(fd, 1024) == 0);
	*port = port_of(fd, 0);
	return fd;
}

static int listener(int *port) { *port = 0; return listener_opts(port, 0); }

static int connect_to(int port)
{
	struct sockaddr_storage ss;
	int fd = socket(fam, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	CHECK(connect(fd, (void *)&ss, loopback(&ss, port)) == 0);
	return fd;
}

/* A connected pair in this process. */
static void pair(int *c, int *s)
{
	int port, l = listener(&port);
	*c = connect_to(port);
	*s = accept(l, NULL, NULL);
	CHECK(*s >= 0);
	close(l);
}

static void write_all(int fd, const void *buf, size_t n)
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

static size_t read_full(int fd, void *buf, size_t n)
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
static void echo(int fd)
{
	char buf[65536];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		write_all(fd, buf, (size_t)n);
}

static void expect_echo(int fd, const char *msg)
{
	char buf[256];
	size_t n = strlen(msg);
	write_all(fd, msg, n);
	CHECK(read_full(fd, buf, n) == n);
	CHECK(memcmp(buf, msg, n) == 0);
}

/* One byte each way between the two ends of a pair. */
static void expect_echo_pair(int c, int s)
{
	char b;
	write_all(c, "x", 1);
	CHECK(read(s, &b, 1) == 1);
	write_all(s, "y", 1);
	CHECK(read(c, &b, 1) == 1);
	out("both directions ok");
}

static pid_t fork_child(void)
{
	pid_t p = fork();
	CHECK(p >= 0);
	return p;
}

static int wait_child(pid_t p)
{
	int st;
	CHECK(waitpid(p, &st, 0) == p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- scenarios */

static void sc_names(void)
{
	int c, s, port, l = listener(&port);
	struct sockaddr_storage a, b;
	socklen_t al = sizeof(a), bl = sizeof(b);
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
	bl = sizeof(b);
	CHECK(getsockname(c, (void *)&b, &bl) == 0);
	char buf[64];
	inet_ntop(b.ss_family, b.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&b)->sin6_addr : (void *)&((struct sockaddr_in *)&b)->sin_addr, buf, sizeof(buf));
	out("client local family %d len %u addr %s", b.ss_family, bl, buf);
	bl = sizeof(b);
	CHECK(getpeername(s, (void *)&b, &bl) == 0);
	inet_ntop(b.ss_family, b.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&b)->sin6_addr : (void *)&((struct sockaddr_in *)&b)->sin_addr, buf, sizeof(buf));
	out("server peer family %d len %u addr %s", b.ss_family, bl, buf);
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

static void sc_sockopts(void)
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
		ssize_t r = recv(fd, &b, 1, 0);
		out("recv with SO_RCVTIMEO on an idle socket: %zd %s", r, ename(r < 0 ? errno : 0));
		int err = -1;
		l = sizeof(err);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) == 0);
		out("SO_ERROR %d", err);
	}
}

/* Options set before connect carry over to the connection. */
static void sc_sockopts_before(void)
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
	ssize_t r = recv(c, &b, 1, 0);
	out("recv times out: %zd %s", r, ename(r < 0 ? errno : 0));
}

static void sc_connect_nonblock(void)
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

static void sc_connect_refused(void)
{
	int port, l = listener(&port);
	close(l); /* nobody listens there now */
	struct sockaddr_storage ss;
	int c = socket(fam, SOCK_STREAM, 0);
	int r = connect(c, (void *)&ss, loopback(&ss, port));
	out("connect to a closed port: %d %s", r, ename(r < 0 ? errno : 0));
}

/* epoll registrations made before connect survive it. */
static void sc_epoll_before_connect(void)
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
	out("ADD again: %d %s", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev), ename(errno));
}

static void sc_readiness(void)
{
	int c, s;
	char buf[16];
	pair(&c, &s);
	path("client", c);
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

static void sc_halfclose(void)
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

static void sc_msgflags(void)
{
	int c, s;
	char buf[64];
	pair(&c, &s);
	path("client", c);
	ssize_t r = recv(c, buf, sizeof(buf), MSG_DONTWAIT);
	out("MSG_DONTWAIT empty %zd %s", r, ename(r < 0 ? errno : 0));
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

static void sc_vectored(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
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
	size_t k = read_full(c, buf, 5);
	out("then '%.*s'", (int)k, buf);
}

static void sc_sendfile_splice(void)
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

static void sc_ioctl(void)
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

static void sc_backpressure(void)
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
	size_t got = 0;
	while (got < total) {
		ssize_t r = read(s, buf, sizeof(buf));
		CHECK(r > 0);
		got += (size_t)r;
	}
	out("reader got everything %d", got == total);
	out("writable again %d", poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT));
}

static void sc_sigkill(void)
{
	int port, l = listener(&port), sync[2];
	CHECK(pipe(sync) == 0);
	pid_t p = fork_child();
	if (p == 0) {
		int s = accept(l, NULL, NULL);
		char b;
		CHECK(read(s, &b, 1) == 1); /* unread data stays queued */
		write_all(sync[1], "r", 1);
		pause();
		_exit(0);
	}
	close(l);
	int c = connect_to(port);
	path("client", c);
	write_all(c, "ab", 2);
	char b;
	CHECK(read(sync[0], &b, 1) == 1);
	kill(p, SIGKILL);
	wait_child(p);
	ssize_t r = read(c, &b, 1);
	out("read after peer SIGKILL: %s", r == 0 ? "EOF" : r < 0 && errno == ECONNRESET ? "ECONNRESET" : "other");
}

/* A PostgreSQL-style server: accept, fork a child per connection. */
static void sc_fork_after_accept(void)
{
	int port, l = listener(&port);
	pid_t srv = fork_child();
	if (srv == 0) {
		for (int i = 0; i < 5; i++) {
			int s = accept(l, NULL, NULL);
			CHECK(s >= 0);
			if (fork_child() == 0) {
				close(l);
				char m[64];
				int k = snprintf(m, sizeof(m), "backend for %s", path_of(s));
				write_all(s, m, (size_t)k);
				echo(s);
				_exit(0);
			}
			close(s);
		}
		while (wait(NULL) > 0)
			;
		_exit(0);
	}
	close(l);
	for (int i = 0; i < 5; i++) {
		int c = connect_to(port);
		char m[64] = { 0 };
		CHECK(read(c, m, sizeof(m) - 1) > 0);
		out("#path backend %s", m + 12);
		path("client", c);
		expect_echo(c, "query");
		close(c);
	}
	out("server %d", wait_child(srv));
	out("5 sessions ok");
}

/* Accepts one connection, tells the client which path it has, echoes. */
static void serve_one(int l)
{
	int s = accept(l, NULL, NULL);
	if (s < 0 && errno == EAGAIN)
		return; /* another worker took it */
	CHECK(s >= 0);
	char m[8];
	snprintf(m, sizeof(m), "%-4s", path_of(s));
	write_all(s, m, 4);
	echo(s);
	close(s);
}

static void serve_workers(int l, int nworkers, int conns_each)
{
	for (int w = 0; w < nworkers; w++) {
		if (fork_child() == 0) {
			for (int i = 0; i < conns_each; i++)
				serve_one(l);
			_exit(0);
		}
	}
}

static void clients(int port, int n, const char *what)
{
	int fds[64], unixes = 0;
	for (int i = 0; i < n; i++) {
		fds[i] = connect_to(port);
		if (!strcmp(path_of(fds[i]), "unix"))
			unixes++;
	}
	for (int i = 0; i < n; i++) {
		char m[5] = { 0 };
		CHECK(read_full(fds[i], m, 4) == 4);
		if (!strncmp(m, "unix", 4))
			unixes += 100;
		expect_echo(fds[i], "work");
		close(fds[i]);
	}
	out("#path %s %s", what, unixes == 0 ? "tcp" : unixes == n * 101 ? "unix" : "mixed");
	out("%d clients served", n);
}

static void sc_prefork(void)
{
	int port, l = listener(&port);
	serve_workers(l, 3, 8);
	close(l);
	clients(port, 24, "prefork");
	while (wait(NULL) > 0)
		;
}

/* Serves connections on l (path, then echo) until quit becomes readable. */
static void serve_until_quit(int l, int quit)
{
	/* Non-blocking: every worker wakes from poll, one wins the accept. */
	CHECK(fcntl(l, F_SETFL, O_NONBLOCK) == 0);
	for (;;) {
		struct pollfd p[2] = { { l, POLLIN, 0 }, { quit, POLLIN, 0 } };
		CHECK(poll(p, 2, 20000) > 0);
		if (p[1].revents)
			return;
		serve_one(l);
	}
}

/* Two SO_REUSEPORT listeners in two processes; the kernel spreads the
 * connections. */
static void sc_reuseport(void)
{
	int port = 0, quit[2];
	int l1 = listener_opts(&port, 1), l2 = listener_opts(&port, 1);
	CHECK(pipe(quit) == 0);
	for (int w = 0; w < 2; w++) {
		if (fork_child() == 0) {
			close(quit[1]);
			serve_until_quit(w ? l2 : l1, quit[0]);
			_exit(0);
		}
	}
	close(l1);
	close(l2);
	close(quit[0]);
	clients(port, 24, "reuseport");
	close(quit[1]);
	while (wait(NULL) > 0)
		;
}

/* One listener accepted from by this process and by a program it exec'd
 * (which inherited the listener). */
static void sc_exec_listener(void)
{
	int port, l = listener(&port), quit[2];
	CHECK(pipe(quit) == 0);
	pid_t child = fork_child();
	if (child == 0) {
		char a[16], b[16];
		snprintf(a, sizeof(a), "%d", l);
		snprintf(b, sizeof(b), "%d", quit[0]);
		close(quit[1]);
		execl(self, self, "serve-inherited", a, b, (char *)NULL);
		_exit(127);
	}
	pid_t cl = fork_child();
	if (cl == 0) {
		close(quit[1]);
		clients(port, 24, "exec-listener");
		_exit(0);
	}
	close(quit[0]);
	int q2[2];
	CHECK(pipe(q2) == 0);
	pid_t server = fork_child(); /* this process's own accepting loop */
	if (server == 0) {
		close(q2[1]);
		serve_until_quit(l, q2[0]);
		_exit(0);
	}
	out("clients %d", wait_child(cl));
	close(quit[1]);
	close(q2[1]);
	out("exec'd server %d, server %d", wait_child(child), wait_child(server));
}

static void sc_exec(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
	pid_t p = fork_child();
	if (p == 0) {
		char fd[16];
		snprintf(fd, sizeof(fd), "%d", s);
		close(c);
		execl(self, self, "child-echo", fd, (char *)NULL);
		_exit(127);
	}
	close(s);
	expect_echo(c, "through exec");
	char m[64] = { 0 };
	shutdown(c, SHUT_WR);
	read_full(c, m, sizeof(m) - 1);
	out("child says: %s", m);
	out("child %d", wait_child(p));
}

static void child_echo(int s)
{
	char buf[256];
	ssize_t n = read(s, buf, 12);
	write_all(s, buf, (size_t)n);
	char dummy;
	while (read(s, &dummy, 1) > 0)
		;
	int v;
	socklen_t l = sizeof(v);
	getsockopt(s, SOL_SOCKET, SO_DOMAIN, &v, &l);
	int k = snprintf(buf, sizeof(buf), "domain %d peer port known %d", v, port_of(s, 1) > 0);
	write_all(s, buf, (size_t)k);
}

static void sc_dup(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
	int d1 = dup(c), d2 = fcntl(c, F_DUPFD_CLOEXEC, 100), d3 = 200, d4 = 201;
	CHECK(dup2(c, d3) == d3);
	CHECK(dup3(c, d4, O_CLOEXEC) == d4);
	out("F_DUPFD_CLOEXEC >= 100 %d cloexec %d", d2 >= 100, !!(fcntl(d2, F_GETFD) & FD_CLOEXEC));
	out("dup3 cloexec %d", !!(fcntl(d4, F_GETFD) & FD_CLOEXEC));
	int fds[4] = { d1, d2, d3, d4 };
	for (int i = 0; i < 4; i++) {
		out("dup %d peer port equal %d", i, port_of(fds[i], 1) == port_of(c, 1));
		int v;
		socklen_t l = sizeof(v);
		int one = 1;
		CHECK(setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
		CHECK(getsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &v, &l) == 0);
		out("dup %d nodelay %d", i, v);
	}
	close(c);
	write_all(d3, "via-dup", 7);
	char buf[8] = { 0 };
	CHECK(read_full(s, buf, 7) == 7);
	out("server got '%s'", buf);
	close(d1);
	close(d2);
	close(d3);
	close(d4);
	out("EOF after all copies closed %d", read(s, buf, 1) == 0);
}

static void send_fd(int sock, int fd)
{
	char c = 'F';
	struct iovec iov = { &c, 1 };
	union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr a; } u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	memset(&u, 0, sizeof(u));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	CHECK(sendmsg(sock, &m, 0) == 1);
}

static int recv_fd(int sock)
{
	char c;
	struct iovec iov = { &c, 1 };
	union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr a; } u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	int fd;
	CHECK(recvmsg(sock, &m, 0) == 1);
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	return fd;
}

static void sc_scm_rights(void)
{
	int c, s, sp[2];
	pair(&c, &s);
	path("client", c);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
	pid_t p = fork_child();
	if (p == 0) {
		close(s);
		close(c);
		int fd = recv_fd(sp[1]);
		int v, one = 1;
		socklen_t l = sizeof(v);
		getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l);
		char m[64];
		int k = snprintf(m, sizeof(m), "domain %d nodelay-set %d", v,
				 setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
		write_all(fd, m, (size_t)k);
		echo(fd);
		_exit(0);
	}
	send_fd(sp[0], s);
	close(s);
	char m[64] = { 0 };
	CHECK(read(c, m, sizeof(m) - 1) > 0);
	out("receiver: %s", m);
	expect_echo(c, "passed");
	close(c);
	out("child %d", wait_child(p));
}

static void sc_many(void)
{
	enum { N = 1000 };
	struct rlimit rl = { 4096, 4096 };
	setrlimit(RLIMIT_NOFILE, &rl);
	int port, l = listener(&port);
	pid_t p = fork_child();
	if (p == 0) {
		int ep = epoll_create1(0), done = 0;
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = l }, evs[64];
		epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
		while (done < N) {
			int n = epoll_wait(ep, evs, 64, 10000);
			CHECK(n > 0);
			for (int i = 0; i < n; i++) {
				int fd = evs[i].data.fd;
				if (fd == l) {
					int s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
					CHECK(s >= 0);
					ev.data.fd = s;
					epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
					continue;
				}
				char buf[64];
				ssize_t r = read(fd, buf, sizeof(buf));
				if (r > 0)
					write_all(fd, buf, (size_t)r);
				else if (r == 0) {
					close(fd);
					done++;
				}
			}
		}
		_exit(0);
	}
	close(l);
	static int fds[N];
	int unixes = 0;
	for (int i = 0; i < N; i++) {
		fds[i] = connect_to(port);
		unixes += !strcmp(path_of(fds[i]), "unix");
	}
	for (int i = 0; i < N; i++) {
		char m[16], b[16];
		int k = snprintf(m, sizeof(m), "conn %d", i);
		write_all(fds[i], m, (size_t)k);
		CHECK(read_full(fds[i], b, (size_t)k) == (size_t)k && !memcmp(b, m, (size_t)k));
	}
	for (int i = 0; i < N; i++)
		close(fds[i]);
	out("#path many %s", unixes == N ? "unix" : unixes ? "mixed" : "tcp");
	out("1000 connections echoed; server %d", wait_child(p));
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct bulk { int fd; size_t total; };

static void *bulk_writer(void *arg)
{
	struct bulk *b = arg;
	static char buf[1 << 20];
	uint64_t data = 0x1234567, sizes = 99;
	size_t done = 0;
	while (done < b->total) {
		size_t n = 1 + rng(&sizes) % sizeof(buf);
		if (n > b->total - done)
			n = b->total - done;
		for (size_t i = 0; i < n; i++)
			buf[i] = (char)((done + i) * 2654435761u >> 13);
		write_all(b->fd, buf, n);
		done += n;
	}
	shutdown(b->fd, SHUT_WR);
	(void)data;
	return NULL;
}

static void sc_bulk(void)
{
	const char *mb = getenv("LFPROBE_BULK_MB");
	size_t total = (size_t)(mb ? atol(mb) : 1024) << 20;
	int port, l = listener(&port);
	pid_t p = fork_child();
	if (p == 0) { /* echo with random read sizes */
		int s = accept(l, NULL, NULL);
		static char buf[1 << 20];
		uint64_t sizes = 7;
		ssize_t n;
		while ((n = read(s, buf, 1 + rng(&sizes) % sizeof(buf))) > 0)
			write_all(s, buf, (size_t)n);
		CHECK(n == 0);
		_exit(0);
	}
	close(l);
	int c = connect_to(port);
	path("client", c);
	struct bulk b = { c, total };
	pthread_t t;
	pthread_create(&t, NULL, bulk_writer, &b);
	static char buf[1 << 20];
	uint64_t sizes = 5;
	size_t got = 0, bad = 0;
	ssize_t n;
	while ((n = read(c, buf, 1 + rng(&sizes) % sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++)
			bad += buf[i] != (char)((got + (size_t)i) * 2654435761u >> 13);
		got += (size_t)n;
	}
	pthread_join(t, NULL);
	out("bulk %zu MiB each way: received %zu MiB, corrupt bytes %zu, server %d", total >> 20, got >> 20, bad, wait_child(p));
}

/* Serves echo connections for the mixed tests: prints the port, then
 * serves N connections one at a time, reporting each one's path. */
static void serve_echo(int n)
{
	const char *want = getenv("LFPROBE_PORT");
	int port = want ? atoi(want) : 0, l = listener_opts(&port, 0);
	out("%d", port);
	for (int i = 0; i < n; i++) {
		int s = accept(l, NULL, NULL);
		CHECK(s >= 0);
		fprintf(stderr, "#path server %s\n", path_of(s));
		echo(s);
		close(s);
	}
}

static void client_echo(int port)
{
	int c = connect_to(port);
	path("client", c);
	expect_echo(c, "mixed ends");
	out("echo ok");
}

static int count_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 4096; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* Connections and listeners leave no descriptor behind once closed. */
static void sc_fdleak(void)
{
	int before = count_fds(), c[50], s[50], port, l = listener(&port);
	for (int i = 0; i < 50; i++) {
		c[i] = connect_to(port);
		s[i] = accept(l, NULL, NULL);
		CHECK(s[i] >= 0);
	}
	path("client", c[0]);
	path("server", s[0]);
	for (int i = 0; i < 50; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(l);
	out("descriptors after closing everything: %+d", count_fds() - before);
}

static void print_addr(const char *who, int fd, int peer)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	char buf[64];
	CHECK((peer ? getpeername(fd, (void *)&ss, &l) : getsockname(fd, (void *)&ss, &l)) == 0);
	inet_ntop(ss.ss_family, ss.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr : (void *)&((struct sockaddr_in *)&ss)->sin_addr, buf, sizeof(buf));
	out("%s %s family %d len %u addr %s", who, peer ? "peer" : "local", ss.ss_family, l, buf);
}

/* An IPv4 client and a dual-stack [::] listener (v4-mapped addresses). */
static void sc_dualstack(void)
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

/* Reads n bytes or gives up after 10 s: a hang is a failure, not a wait. */
static bool read_timed(int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, 10000) != 1)
			return false;
		ssize_t r = read(fd, buf + got, n - got);
		if (r <= 0)
			return false;
		got += (size_t)r;
	}
	return true;
}

/* Clients connecting and closing as fast as they can against prefork
 * workers: negotiation under contention. Every connection echoes. */
static void sc_churn(void)
{
	int port, l = listener(&port), quit[2];
	CHECK(pipe(quit) == 0);
	for (int w = 0; w < 3; w++)
		if (fork_child() == 0) {
			close(quit[1]);
			serve_until_quit(l, quit[0]);
			_exit(0);
		}
	close(quit[0]);
	close(l);
	pid_t kids[4];
	for (int k = 0; k < 4; k++) {
		kids[k] = fork_child();
		if (kids[k] == 0) {
			int unixes = 0;
			for (int i = 0; i < 250; i++) {
				int c = connect_to(port);
				char m[8];
				CHECK(read_timed(c, m, 4));
				unixes += !strncmp(m, "unix", 4);
				write_all(c, "churn", 5);
				CHECK(read_timed(c, m, 5) && !memcmp(m, "churn", 5));
				close(c);
			}
			_exit(unixes == 250 ? 10 : unixes == 0 ? 11 : 12);
		}
	}
	int paths = 0;
	for (int k = 0; k < 4; k++)
		paths |= 1 << (wait_child(kids[k]) - 10);
	out("#path churn %s", paths == 1 ? "unix" : paths == 2 ? "tcp" : "mixed");
	out("1000 connect/echo/close cycles ok");
	close(quit[1]);
	while (wait(NULL) > 0)
		;
}

/* Workers killed with SIGKILL at random moments, replaced by the parent:
 * a client may lose its connection (EOF/reset), never hang, and the
 * listener keeps working for the next clients. */
static void sc_kill_workers(void)
{
	int port, l = listener(&port), quit[2];
	CHECK(pipe(quit) == 0);
	pid_t workers[3];
	for (int w = 0; w < 3; w++)
		if ((workers[w] = fork_child()) == 0) {
			close(quit[1]);
			serve_until_quit(l, quit[0]);
			_exit(0);
		}
	pid_t cl = fork_child();
	if (cl == 0) {
		int lost = 0;
		for (int i = 0; i < 300; i++) {
			int c = connect_to(port);
			char m[8];
			if (!read_timed(c, m, 4) || write(c, "kill", 4) != 4 || !read_timed(c, m, 4))
				lost++;
			close(c);
		}
		_exit(lost < 300 ? 0 : 1);
	}
	uint64_t seed = 42;
	for (int round = 0; round < 30; round++) {
		usleep(2000 + (unsigned)(seed = seed * 6364136223846793005u + 1) % 8000);
		int w = (int)((seed >> 33) % 3);
		kill(workers[w], SIGKILL);
		waitpid(workers[w], NULL, 0);
		if ((workers[w] = fork_child()) == 0) {
			close(quit[1]);
			serve_until_quit(l, quit[0]);
			_exit(0);
		}
	}
	out("clients under kills %d", wait_child(cl));
	clients(port, 20, "after-kills");
	close(quit[1]);
	close(l);
	while (wait(NULL) > 0)
		;
}

/* Prefork workers at a low descriptor limit and a burst of 40 clients
 * whose hellos are all queued: taking them must not need a descriptor per
 * pending hello. */
static void sc_stash_limit(void)
{
	struct rlimit rl, saved;
	int port, quit[2];
	CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
	rl = saved;
	rl.rlim_cur = 64;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	int l = listener(&port);
	CHECK(pipe(quit) == 0);
	for (int w = 0; w < 2; w++)
		if (fork_child() == 0) {
			int fd, last = -1;
			close(quit[1]);
			while ((fd = open("/dev/null", O_RDONLY)) >= 0)
				last = fd;
			close(last); /* one slot for accept, */
			close(last - 1); /* one for reading /proc/net/unix */
			serve_until_quit(l, quit[0]);
			_exit(0);
		}
	close(l);
	close(quit[0]);
	CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
	usleep(100000); /* the workers are at their limit */
	clients(port, 40, "stash-limit");
	close(quit[1]);
	while (wait(NULL) > 0)
		;
}

/* A server at its descriptor limit, with one slot left for accept. */
static void sc_fd_limit(void)
{
	int ready[2], port;
	CHECK(pipe(ready) == 0);
	pid_t p = fork_child();
	if (p == 0) {
		struct rlimit rl;
		int fd, last = -1;
		CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
		rl.rlim_cur = 64;
		CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
		int l = listener(&port);
		while ((fd = open("/dev/null", O_RDONLY)) >= 0)
			last = fd;
		close(last);
		write_all(ready[1], &port, sizeof(port));
		int s = accept(l, NULL, NULL);
		CHECK(s >= 0);
		echo(s);
		_exit(0);
	}
	CHECK(read(ready[0], &port, sizeof(port)) == sizeof(port));
	int c = connect_to(port);
	path("client", c);
	expect_echo(c, "at the limit");
	close(c);
	out("echo at the server's fd limit ok; server %d", wait_child(p));
}

static const struct { const char *name; void (*fn)(void); } scenarios[] = {
	{ "fd-limit", sc_fd_limit }, { "dualstack", sc_dualstack }, { "churn", sc_churn },
	{ "kill-workers", sc_kill_workers }, { "stash-limit", sc_stash_limit },
	{ "fdleak", sc_fdleak },
	{ "names", sc_names }, { "sockopts", sc_sockopts }, { "sockopts-before", sc_sockopts_before },
	{ "connect-nonblock", sc_connect_nonblock }, { "connect-refused", sc_connect_refused },
	{ "epoll-before-connect", sc_epoll_before_connect }, { "readiness", sc_readiness },
	{ "halfclose", sc_halfclose }, { "msgflags", sc_msgflags }, { "vectored", sc_vectored },
	{ "sendfile-splice", sc_sendfile_splice }, { "ioctl", sc_ioctl }, { "backpressure", sc_backpressure },
	{ "sigkill", sc_sigkill }, { "fork-after-accept", sc_fork_after_accept }, { "prefork", sc_prefork },
	{ "reuseport", sc_reuseport }, { "exec", sc_exec }, { "exec-listener", sc_exec_listener }, { "dup", sc_dup }, { "scm-rights", sc_scm_rights },
	{ "many", sc_many }, { "bulk", sc_bulk },
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
	for (unsigned i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		if (!strcmp(argv[1], scenarios[i].name)) {
			scenarios[i].fn();
			return 0;
		}
	}
	fprintf(stderr, "lfprobe: unknown scenario %s\n", argv[1]);
	return 2;
}
