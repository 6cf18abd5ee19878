/* lfprobe scenarios: many connections, large transfers, churn, killed
 * workers, the hello stash, descriptor limits and leaks. */
#include "probe.h"

void sc_many(void)
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

void sc_bulk(void)
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


static int count_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 4096; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* Connections and listeners leave no descriptor behind once closed. */
void sc_fdleak(void)
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
void sc_churn(void)
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
void sc_kill_workers(void)
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
void sc_stash_limit(void)
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
void sc_fd_limit(void)
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
