/* lfprobe scenarios: connections and listeners across processes (kill,
 * fork, prefork, SO_REUSEPORT, exec, dup, SCM_RIGHTS) and the echo server and
 * client the tests start on their own. */
#include "probe.h"

void sc_sigkill(void)
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
void sc_fork_after_accept(void)
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

void clients(int port, int n, const char *what)
{
	int fds[64], unixes = 0;
	for (int i = 0; i < n; i++)
		fds[i] = connect_to(port);
	for (int i = 0; i < n; i++) {
		char m[5] = { 0 };
		CHECK(read_full(fds[i], m, 4) == 4);
		/* Asked once a worker has it: the peer of a fast-path connection
		 * nobody accepted yet is in no process. */
		if (!strcmp(path_of(fds[i]), "unix"))
			unixes++;
		if (!strncmp(m, "unix", 4))
			unixes += 100;
		expect_echo(fds[i], "work");
		close(fds[i]);
	}
	out("#path %s %s", what, unixes == 0 ? "tcp" : unixes == n * 101 ? "unix" : "mixed");
	out("%d clients served", n);
}

void sc_prefork(void)
{
	int port, l = listener(&port);
	serve_workers(l, 3, 8);
	close(l);
	clients(port, 24, "prefork");
	while (wait(NULL) > 0)
		;
}

/* Serves connections on l (path, then echo) until quit becomes readable. */
void serve_until_quit(int l, int quit)
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
void sc_reuseport(void)
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
void sc_exec_listener(void)
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

void sc_exec(void)
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

void child_echo(int s)
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

void sc_dup(void)
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

void sc_scm_rights(void)
{
	int c, s, sp[2];
	pair(&c, &s);
	path("client", c);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
	pid_t p = fork_child();
	if (p == 0) {
		close(s);
		close(c);
		close(sp[0]); /* a parent that fails before it sends gives EOF here, not a hang */
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
	close(sp[1]);
	send_fd(sp[0], s);
	close(s);
	char m[64] = { 0 };
	CHECK(read(c, m, sizeof(m) - 1) > 0);
	out("receiver: %s", m);
	expect_echo(c, "passed");
	close(c);
	out("child %d", wait_child(p));
}
/* Serves echo connections for the mixed tests: prints the port, then
 * serves N connections one at a time, reporting each one's path. */
void serve_echo(int n)
{
	const char *want = getenv("LFPROBE_PORT");
	int port = want ? atoi(want) : 0, l = listener_opts(&port, 0);
	out("%d", port);
	for (int i = 0; i < n; i++) {
		int s = accept(l, NULL, NULL);
		CHECK(s >= 0);
		fpath(stderr, "server", s);
		echo(s);
		close(s);
	}
}

void client_echo(int port)
{
	int c = connect_to(port);
	path("client", c);
	expect_echo(c, "mixed ends");
	out("echo ok");
}

/* A prefork worker at its descriptor limit, with one slot left for
 * accept, as over TCP: the listener was made (and opted in) by its parent
 * before the fork, and the worker's claim still checks the hello with the
 * kernel. (A child that had to make its own sock_diag socket at its first
 * claim could not: every hello was dropped, its client got EPIPE.) */
void sc_prefork_fd_limit(void)
{
	struct rlimit rl, saved;
	int ready[2], port;
	CHECK(pipe(ready) == 0);
	CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
	rl = saved;
	rl.rlim_cur = 64;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	int l = listener(&port);
	pid_t p = fork_child();
	if (p == 0) {
		int fd, last = -1;
		while ((fd = open("/dev/null", O_RDONLY)) >= 0)
			last = fd;
		close(last);
		write_all(ready[1], "r", 1);
		int s = accept(l, NULL, NULL);
		CHECK(s >= 0);
		echo(s);
		_exit(0);
	}
	close(l);
	CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
	char b;
	CHECK(read(ready[0], &b, 1) == 1);
	int c = connect_to(port);
	path("client", c);
	expect_echo(c, "a worker at its limit");
	close(c);
	out("echo from a prefork worker at its fd limit ok; worker %d", wait_child(p));
}

static volatile int asking = 1;

/* A thread that connects in a loop to a port nobody listens on (each
 * connect asks sock_diag under loopfast). */
static void *ask_loop(void *arg)
{
	int port = (int)(intptr_t)arg;
	while (asking) {
		int c = socket(fam, SOCK_STREAM, 0);
		struct sockaddr_storage ss;
		socklen_t sl = loopback(&ss, port);
		connect(c, (struct sockaddr *)&ss, sl);
		close(c);
	}
	return NULL;
}

/* Forks while another thread connects in a loop: each child connects
 * once itself and exits; none may hang (a child that inherited a lock its
 * parent's other thread held would wait for it forever). Each child has
 * 5 s. */
void sc_fork_while_connecting(void)
{
	int c, s;
	pair(&c, &s);
	path("client", c);
	expect_echo_pair(c, s);
	int dead, l = listener(&dead);
	close(l); /* a port nobody listens on */
	pthread_t t;
	CHECK(pthread_create(&t, NULL, ask_loop, (void *)(intptr_t)dead) == 0);
	int forks = 300, hung = 0, refused = 0;
	for (int i = 0; i < forks && !hung; i++) {
		pid_t p = fork_child();
		if (p == 0) {
			int k = socket(fam, SOCK_STREAM, 0);
			struct sockaddr_storage ss;
			socklen_t sl = loopback(&ss, dead);
			int r = connect(k, (struct sockaddr *)&ss, sl);
			_exit(r < 0 && errno == ECONNREFUSED ? 0 : 1);
		}
		uint64_t t0 = now_us();
		int st;
		pid_t w;
		while ((w = waitpid(p, &st, WNOHANG)) == 0 && now_us() - t0 < 5000000)
			usleep(1000);
		if (w == 0) {
			hung++;
			kill(p, SIGKILL);
			waitpid(p, &st, 0);
		} else
			refused += WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	asking = 0;
	pthread_join(t, NULL);
	out("children that did not exit within 5 s: %d; connect refused in %d of %d", hung, refused, hung ? refused : forks);
	close(c);
	close(s);
}

/* A daemon that closes every descriptor (close_range), puts a file of its
 * own on a number loopfast had used (its sock_diag socket's, if there is
 * one), and forks: the child must find that file intact. */
void sc_close_range_fork(void)
{
	int c, s, n = 40;
	pair(&c, &s);
	path("client", c);
	expect_echo_pair(c, s);
	/* The highest netlink socket's number, as the daemon would find it
	 * by chance. */
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	CHECK(d);
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name), dom = 0;
		socklen_t dl = sizeof(dom);
		if (fd > 2 && fd != dirfd(d) && syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) == 0 &&
		    dom == AF_NETLINK)
			n = fd;
	}
	closedir(d);
	CHECK(syscall(SYS_close_range, 3, ~0u, 0) == 0);
	char name[] = "/tmp/lfprobe-daemon-XXXXXX";
	int f = mkstemp(name);
	CHECK(f >= 0);
	unlink(name);
	write_all(f, "the daemon's own file", 21);
	CHECK(dup2(f, n) == n);
	close(f);
	int res[2];
	CHECK(pipe(res) == 0);
	pid_t p = fork_child();
	if (p == 0) {
		char buf[64] = "";
		ssize_t r = pread(n, buf, sizeof(buf) - 1, 0);
		char line[128];
		int len = snprintf(line, sizeof(line), "%zd %s '%s'", r, ename(r < 0 ? errno : 0), r > 0 ? buf : "");
		write_all(res[1], line, (size_t)len);
		_exit(0);
	}
	close(res[1]);
	char line[128] = "";
	ssize_t r = read_full(res[0], line, sizeof(line) - 1);
	line[r > 0 ? r : 0] = 0;
	out("the child reads the daemon's file on the reused number: %s; child %d", line, wait_child(p));
	char buf[64] = "";
	r = pread(n, buf, sizeof(buf) - 1, 0);
	out("and the parent: %zd '%s'", r, r > 0 ? buf : "");
}
