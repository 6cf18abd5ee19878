/* lfprobe scenarios: many connections, large transfers, churn, killed
 * workers, the hello stash, descriptor limits and leaks. */
#include "probe.h"

#include <sys/ptrace.h>
#include <sys/syscall.h>

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
	for (int i = 0; i < N; i++)
		fds[i] = connect_to(port);
	for (int i = 0; i < N; i++) {
		char m[16], b[16];
		int k = snprintf(m, sizeof(m), "conn %d", i);
		write_all(fds[i], m, (size_t)k);
		CHECK(read_full(fds[i], b, (size_t)k) == (size_t)k && !memcmp(b, m, (size_t)k));
		unixes += !strcmp(path_of(fds[i]), "unix"); /* the server has it: it echoed */
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
 * workers: negotiation under contention. Every connection echoes, and
 * every client and worker process exits cleanly. CHURN per client, 4
 * clients: enough for test_cli's TIME_WAIT count, few enough that a port
 * range full of the suite's earlier TIME_WAITs does not make it slow. */
#define CHURN 100
void sc_churn(void)
{
	int port, l = listener(&port), quit[2];
	out("#port %d", port); /* for test_cli's TIME_WAIT count */
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
			int unixes = 0, len = 0;
			static char ports[CHURN * 6 + 16];
			for (int i = 0; i < CHURN; i++) {
				int c = connect_to(port);
				char m[8];
				CHECK(read_timed(c, m, 4));
				unixes += !strncmp(m, "unix", 4);
				write_all(c, "churn", 5);
				CHECK(read_timed(c, m, 5) && !memcmp(m, "churn", 5));
				len += snprintf(ports + len, sizeof(ports) - len, " %d", port_of(c, 0));
				close(c);
			}
			out("#client-ports%s", ports); /* for test_cli: its TIME_WAITs are these */
			_exit(unixes == CHURN ? 10 : unixes == 0 ? 11 : 12);
		}
	}
	int paths = 0, failed = 0, st;
	for (int k = 0; k < 4; k++) {
		int r = wait_child(kids[k]);
		if (r >= 10 && r <= 12)
			paths |= 1 << (r - 10);
		else
			out("churn client %d exited %d", k, r), failed++;
	}
	out("#path churn %s", paths == 1 ? "unix" : paths == 2 ? "tcp" : "mixed");
	if (!failed)
		out("%d connect/echo/close cycles ok", 4 * CHURN);
	close(quit[1]);
	for (pid_t w; (w = wait(&st)) > 0;)
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			out("churn worker exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* Reads n bytes within 10 s. Returns 1 when they came, 0 on EOF, -errno
 * on an error, -ETIMEDOUT when nothing came (a hang). */
static int read_or_end(int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		struct pollfd p = { fd, POLLIN, 0 };
		int r = poll(&p, 1, 10000);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return -ETIMEDOUT;
		ssize_t k = read(fd, buf + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k == 0 ? 0 : -errno;
		got += (size_t)k;
	}
	return 1;
}

/* One client connection to a worker that may be killed: 0 completed,
 * 1 ended by EOF, 2 by a reset (ECONNRESET, or EPIPE on the write), 3
 * hung, 4 anything else. */
static int kill_workers_client(int port)
{
	char m[8];
	int c = connect_to(port), r = read_or_end(c, m, 4);
	if (r == 1) {
		ssize_t w = write(c, "kill", 4);
		r = w == 4 ? read_or_end(c, m, 4) : w < 0 ? -errno : -EIO;
		if (r == 1 && memcmp(m, "kill", 4))
			r = -EPROTO;
	}
	close(c);
	return r == 1 ? 0 : r == 0 ? 1 : r == -ECONNRESET || r == -EPIPE ? 2 : r == -ETIMEDOUT ? 3 : 4;
}

static bool is_accept(uint64_t nr)
{
#ifdef SYS_accept
	if (nr == SYS_accept)
		return true;
#endif
	return nr == SYS_accept4;
}

/* Kills worker w (which called PTRACE_TRACEME and stopped) the moment one
 * of its accept calls on l returns a connection, followed system call by
 * system call: the connection is then the dead worker's, and its client
 * must see it end. */
static void kill_at_accept(pid_t w, int l)
{
	struct __ptrace_syscall_info si;
	uint64_t nr = ~0ull, fd = ~0ull;
	int st, pass = 0;

	CHECK(waitpid(w, &st, 0) == w && WIFSTOPPED(st));
	CHECK(ptrace(PTRACE_SETOPTIONS, w, 0, PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL) == 0);
	for (;;) {
		CHECK(ptrace(PTRACE_SYSCALL, w, 0, pass) == 0);
		CHECK(waitpid(w, &st, 0) == w && WIFSTOPPED(st));
		pass = 0;
		if (WSTOPSIG(st) != (SIGTRAP | 0x80)) {
			pass = WSTOPSIG(st); /* a signal for the worker: deliver it */
			continue;
		}
		CHECK(ptrace(PTRACE_GET_SYSCALL_INFO, w, sizeof(si), &si) > 0);
		if (si.op == PTRACE_SYSCALL_INFO_ENTRY) {
			nr = si.entry.nr;
			fd = si.entry.args[0];
		} else if (si.op == PTRACE_SYSCALL_INFO_EXIT && is_accept(nr) && fd == (uint64_t)l && !si.exit.is_error) {
			kill(w, SIGKILL);
			waitpid(w, NULL, 0);
			return;
		}
	}
}

static const char *ended(int outcome)
{
	static const char *what[] = { "completed", "ended with EOF or a reset", "ended with EOF or a reset",
				      "hung (no answer, EOF or reset within 10 s)", "failed otherwise" };
	return what[outcome];
}

/* Workers killed with SIGKILL, replaced by the parent. First one worker is
 * killed the moment its accept returns a connection (before it can write
 * to it); then workers are killed at random moments while a client makes
 * 300 connections. Every client connection either completes or ends with
 * EOF or a reset when its worker dies; none hangs (10 s without an answer,
 * an EOF or a reset), and the listener keeps working for the next clients.
 * How many ended which way in the random part depends on timing: it is a
 * note (#), not compared. */
void sc_kill_workers(void)
{
	int port, l = listener(&port), quit[2];
	CHECK(pipe(quit) == 0);
	pid_t traced = fork_child();
	if (traced == 0) {
		close(quit[1]);
		CHECK(ptrace(PTRACE_TRACEME, 0, 0, 0) == 0);
		raise(SIGSTOP);
		serve_until_quit(l, quit[0]);
		_exit(0);
	}
	pid_t first = fork_child();
	if (first == 0)
		_exit(kill_workers_client(port));
	kill_at_accept(traced, l);
	out("client of a worker killed as its accept returned: %s", ended(wait_child(first)));

	pid_t workers[3];
	for (int w = 0; w < 3; w++)
		if ((workers[w] = fork_child()) == 0) {
			close(quit[1]);
			serve_until_quit(l, quit[0]);
			_exit(0);
		}
	pid_t cl = fork_child();
	if (cl == 0) {
		int n[5] = { 0 };
		for (int i = 0; i < 300; i++)
			n[kill_workers_client(port)]++;
		out("#kill-workers: of 300 connections %d completed, %d ended by EOF, %d by a reset, %d hung, %d failed otherwise",
		    n[0], n[1], n[2], n[3], n[4]);
		if (n[3] || n[4])
			out("kill-workers: %d connection(s) hung, %d failed otherwise", n[3], n[4]);
		else
			out("kill-workers: every connection completed or ended with EOF or a reset; none hung");
		_exit(n[0] ? 0 : 1);
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
	out("client process under kills exited %d", wait_child(cl));
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
			close(last - 1); /* one for the path's proof (probe.c) */
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
