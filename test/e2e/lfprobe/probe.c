/* lfprobe: an unmodified TCP program for the end-to-end tests.
 *
 * usage: lfprobe SCENARIO [4|6]
 *
 * Each scenario exercises one socket behaviour between a client and a
 * server on loopback and prints a transcript of what a program can observe.
 * The tests run it over plain TCP and under `loopfast run` and require the
 * same transcript. Lines starting with "#" are notes, never compared:
 * "#path " lines say which kernel object carried each connection (unix or
 * tcp, from /proc/net/unix) and are checked separately; others carry what
 * depends on timing (counts, ports). Nothing here knows about loopfast. */
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

/* Which kernel object is behind fd: "unix" or "tcp". */
const char *path_of(int fd)
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

void path(const char *who, int fd) { out("#path %s %s", who, path_of(fd)); }

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
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a->sin_port = htons(port);
	return sizeof(*a);
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
	{ "oob", sc_oob }, { "shut-rd", sc_shut_rd }, { "rcvlowat", sc_rcvlowat },
	{ "connect-nonblock", sc_connect_nonblock }, { "connect-refused", sc_connect_refused },
	{ "connect-eintr", sc_connect_eintr }, { "connect-eintr-reconnect", sc_connect_eintr_reconnect },
	{ "connect-full-poll", sc_connect_full_poll }, { "connect-full-epoll", sc_connect_full_epoll },
	{ "connect-full-select", sc_connect_full_select }, { "connect-sndtimeo", sc_connect_sndtimeo },
	{ "connect-again", sc_connect_again }, { "connect-restart", sc_connect_restart },
	{ "epoll-before-connect", sc_epoll_before_connect }, { "fortify-pwait2", sc_fortify_pwait2 }, { "readiness", sc_readiness },
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
