/* The three processes of one `loopfast bench connect` run: an epoll server
 * that answers one byte per connection, an epoll client that keeps N
 * connections in flight (non-blocking connect, 1-byte request, 1-byte
 * response, close, again), and for the flood row a flooder that, as another
 * uid when run as root, keeps the server's rendezvous full of junk hellos;
 * for the park row, issue 19's second attack (parker()).
 * Every TCP row counts, on both ends, how many connections really took
 * the fast path, asking the kernel (kpath_fast_end: a Unix stream whose
 * peer the other process holds), never loopfast itself, so that a silent
 * fallback cannot pass for a measurement. */
#include "connect.h"
#include "protocol.h"
#include "kpath.h"
#include "loopfast.h"
#include "cmdline.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *const conn_path_names[CONN_NPATHS] = { "tcp",        "fast",       "client-only", "unix",
						    "tcp+flood", "fast+flood", "tcp+park",    "fast+park",
						    "tcp+unix",  "seccomp" };

#define SAMPLE_EVERY 8 /* one connection in 8 is checked for its path */

/* The client's pid, which it writes before its first connect, in a shared
 * page made before fork: the server's half of the kernel's verdict. */
static volatile pid_t *client_pid;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void unix_name(struct sockaddr_un *sun, socklen_t *len, pid_t owner)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "lf-bench-connect-%d", (int)owner);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Server: answers "y" to every byte, closes on EOF. Reports on `out`, when
 * told to stop (SIGTERM), how many connections it accepted and how many of
 * its sampled ones were on the fast path (the kernel's verdict). */
static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static void serve(int path, int report)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int l, ep = epoll_create1(EPOLL_CLOEXEC), one = 1;
	uint64_t accepted = 0, sampled = 0, fast = 0;

	signal(SIGTERM, on_term);
	if (path == CONN_UNIX) {
		l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
		unix_name((struct sockaddr_un *)&ss, &sl, getpid());
	} else {
		struct sockaddr_in *in = (void *)&ss;
		l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		memset(&ss, 0, sizeof(ss));
		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof(*in);
		if (CONN_FAST_SERVER(path))
			lf_enable_fast_path(l);
	}
	if (l < 0 || bind(l, (void *)&ss, sl) || listen(l, CONN_MAX_CLIENTS) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, l, &(struct epoll_event){ .events = EPOLLIN, .data.fd = l }))
		_exit(3);
	/* tcp+unix: the TCP handshake (whose SYN the firewall sees) then the
	 * bytes over a Unix connection, nothing else: each TCP connection is
	 * closed once accepted, and the request comes on the Unix listener. */
	int lu = -1;
	if (path == CONN_TCP_UNIX) {
		struct sockaddr_un un;
		socklen_t ul;
		unix_name(&un, &ul, getpid());
		lu = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (lu < 0 || bind(lu, (void *)&un, ul) || listen(lu, CONN_MAX_CLIENTS) ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, lu, &(struct epoll_event){ .events = EPOLLIN, .data.fd = lu }))
			_exit(3);
	}
	sl = sizeof(ss);
	getsockname(l, (void *)&ss, &sl);
	struct stat st;
	int id[2] = { path == CONN_UNIX ? 0 : ntohs(((struct sockaddr_in *)&ss)->sin_port),
		      fstat(l, &st) ? 0 : (int)st.st_ino }; /* port, and the inode that names the rendezvous */
	if (write(report, id, sizeof(id)) != sizeof(id))
		_exit(3);
	while (!stop) {
		struct epoll_event ev[256];
		int n = epoll_wait(ep, ev, 256, 100);
		for (int i = 0; i < n; i++) {
			int fd = ev[i].data.fd;
			if (fd == l || fd == lu) {
				int c;
				while ((c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					if (fd == l && path == CONN_TCP_UNIX) { /* the handshake only */
						accepted++;
						close(c);
						continue;
					}
					if (fd == l && accepted++ % SAMPLE_EVERY == 0 && path != CONN_UNIX) {
						sampled++;
						fast += kpath_fast_end(c, *client_pid) == 1;
					}
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &(struct epoll_event){ .events = EPOLLIN, .data.fd = c });
				}
				continue;
			}
			char b[64];
			ssize_t r = read(fd, b, sizeof(b));
			if (r > 0) {
				for (ssize_t k = 0; k < r; k++)
					b[k] = 'y';
				if (write(fd, b, (size_t)r) != r)
					r = 0;
			}
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
				close(fd); /* leaves the epoll set with its last reference */
		}
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	uint64_t out[4] = { accepted, sampled, fast,
			    (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + (uint64_t)ru.ru_utime.tv_usec +
				    (uint64_t)ru.ru_stime.tv_usec };
	if (write(report, out, sizeof(out)) != sizeof(out))
		_exit(3);
	_exit(0);
}

struct slot {
	int fd;
	int state; /* 0 connecting, 1 waiting for the answer */
};

/* Client: keeps `clients` connections in flight for warmup + time seconds
 * and reports what it completed in the timed window. */
static void client(int path, unsigned clients, int port, pid_t server, const struct conn_opts *o, int report)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	struct slot *slots = calloc(clients, sizeof(*slots));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	uint64_t done = 0, errors = 0, sampled = 0, fast = 0, seq = 0;

	if (path == CONN_UNIX) {
		unix_name((struct sockaddr_un *)&ss, &sl, server);
	} else {
		struct sockaddr_in *in = (void *)&ss;
		memset(&ss, 0, sizeof(ss));
		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		in->sin_port = htons((uint16_t)port);
		sl = sizeof(*in);
	}
	struct sockaddr_un un; /* tcp+unix: where the request goes once the handshake is done */
	socklen_t ul;
	unix_name(&un, &ul, server);
	if (!slots || ep < 0)
		_exit(3);
	*client_pid = getpid();

	/* (Re)starts slot i: a new connection, connect in flight. */
#define START(i) do { \
		struct slot *s_ = &slots[i]; \
		s_->fd = socket(path == CONN_UNIX ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); \
		if (CONN_OPTED_IN(path)) \
			lf_enable_fast_path(s_->fd); \
		int r_ = connect(s_->fd, (void *)&ss, sl); \
		s_->state = 0; \
		if (r_ < 0 && errno != EINPROGRESS && errno != EAGAIN) { \
			errors++; \
			close(s_->fd); \
			s_->fd = -1; \
		} else { \
			epoll_ctl(ep, EPOLL_CTL_ADD, s_->fd, &(struct epoll_event){ .events = EPOLLOUT, .data.u32 = (uint32_t)(i) }); \
		} \
	} while (0)

	for (unsigned i = 0; i < clients; i++)
		START(i);
	double t0 = now_s(), start = t0 + o->warmup_s, end = start + o->time_s;
	bool timing = false;
	while (now_s() < end) {
		struct epoll_event ev[256];
		int n = epoll_wait(ep, ev, 256, 100);
		if (!timing && now_s() >= start) {
			timing = true;
			done = errors = sampled = fast = 0;
			start = now_s();
		}
		for (int k = 0; k < n; k++) {
			unsigned i = ev[k].data.u32;
			struct slot *s = &slots[i];
			if (s->state == 0) {
				int err = 0;
				socklen_t el = sizeof(err);
				getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el);
				if (!err && path == CONN_TCP_UNIX) {
					close(s->fd);
					s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
					err = s->fd < 0 || connect(s->fd, (void *)&un, ul);
					if (!err)
						epoll_ctl(ep, EPOLL_CTL_ADD, s->fd,
							  &(struct epoll_event){ .events = EPOLLIN, .data.u32 = i });
				}
				if (err || write(s->fd, "x", 1) != 1) {
					errors++;
					close(s->fd);
					START(i);
					continue;
				}
				s->state = 1;
				if (path != CONN_TCP_UNIX)
					epoll_ctl(ep, EPOLL_CTL_MOD, s->fd,
						  &(struct epoll_event){ .events = EPOLLIN, .data.u32 = i });
				continue;
			}
			char b;
			ssize_t r = read(s->fd, &b, 1);
			if (r < 0 && errno == EAGAIN)
				continue;
			if (r == 1 && b == 'y') {
				done++;
				if (path != CONN_UNIX && path != CONN_TCP_UNIX && seq++ % SAMPLE_EVERY == 0) {
					sampled++;
					fast += kpath_fast_end(s->fd, server) == 1;
				}
			} else {
				errors++;
			}
			close(s->fd);
			START(i);
		}
		for (unsigned i = 0; i < clients; i++) /* slots whose connect failed at once */
			if (slots[i].fd < 0)
				START(i);
	}
#undef START
	double elapsed = now_s() - start;
	struct conn_result res = { .rate = elapsed > 0 ? (double)done / elapsed : 0, .done = done, .errors = errors,
				   .sampled = sampled, .fast = fast };
	if (write(report, &res, sizeof(res)) != sizeof(res))
		_exit(3);
	_exit(0);
}

/* Flooder: as another uid (nobody) when root, keeps up to 512 junk hellos
 * queued on the server's rendezvous and replaces them as fast as it can
 * (a CPU of its own, the attacker's best), for as long as it lives.
 * Reports how many it queued. */
static void flood(int port, unsigned ino, int report)
{
	struct lf_ep dst = { .family = AF_INET, .addr.v4.s_addr = htonl(INADDR_LOOPBACK), .port = (uint16_t)port };
	struct sockaddr_un rn, cn;
	socklen_t rl = lf__name_listener(&rn, AF_INET, ino);
	int held[512];
	uint64_t sent = 0;
	unsigned next = 0;

	signal(SIGTERM, on_term);
	if (getuid() == 0 && (setgid(65534) || setuid(65534)))
		_exit(3);
	for (unsigned i = 0; i < 512; i++)
		held[i] = -1;
	while (!stop) {
		struct lf_ep junk = dst;
		junk.port = (uint16_t)(1024 + (sent * 7919) % 60000);
		socklen_t cl = lf__name_client(&cn, AF_INET, &junk, &dst, (unsigned long)sent);
		int u = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (u < 0 || bind(u, (void *)&cn, cl) || connect(u, (void *)&rn, rl)) {
			if (u >= 0)
				close(u); /* full or absent: an attacker just tries again */
			continue;
		}
		(void)!write(u, "junk", 4);
		if (held[next] >= 0)
			close(held[next]);
		held[next] = u;
		next = (next + 1) % 512;
		sent++;
	}
	if (write(report, &sent, sizeof(sent)) != sizeof(sent))
		_exit(3);
	_exit(0);
}

/* Parker (issue 19's second attack), as another uid (nobody) when root:
 * every half second it queues 400 hellos naming the server's port, one
 * byte written on each and closed at once (a closed hello with unread data
 * is not dead), from endpoints across 127.0.0.0/8 that all fall in one
 * bucket of protocol 3's unkeyed stash hash (FNV-1a, 16384 buckets); and it
 * makes 1000 plain TCP connections a second with MSS 89 in their SYN (the
 * "hello queued" mark) from other endpoints of that bucket, each reset once
 * established. Reports how many such connections it made. */
#define PARK_EPS 2448 /* 400 parked, the rest for the connections */
static void parker(int port, unsigned ino, int report)
{
	struct lf_ep dst = { .family = AF_INET, .addr.v4.s_addr = htonl(INADDR_LOOPBACK), .port = (uint16_t)port };
	static struct lf_ep eps[PARK_EPS];
	static int pending[1024];
	struct sockaddr_un rn, cn;
	socklen_t rl = lf__name_listener(&rn, AF_INET, ino);
	unsigned n = 0, npend = 0, target = 0;
	uint64_t made = 0, tries = 0, nonce = 0;
	double start = now_s(), parked = 0;

	signal(SIGTERM, on_term);
	if (getuid() == 0 && (setgid(65534) || setuid(65534)))
		_exit(3);
	for (unsigned x = 1; n < PARK_EPS && x < 65536; x++) {
		uint32_t h = 2166136261u ^ AF_INET, a = htonl(0x7f000001u | x << 8);
		for (int i = 0; i < 4; i++)
			h = (h ^ ((uint8_t *)&a)[i]) * 16777619u;
		if (x == 1)
			target = (h ^ 20000) & 16383;
		for (unsigned hi = 0; hi < 4 && n < PARK_EPS; hi++) {
			unsigned p = ((h ^ target) & 16383) | hi << 14;
			if (p >= 1024)
				eps[n++] = (struct lf_ep){ .family = AF_INET, .addr.v4.s_addr = a, .port = (uint16_t)p };
		}
	}
	while (!stop) {
		double t = now_s();
		if (t - parked >= 0.5) {
			parked = t;
			for (unsigned i = 0; i < 400; i++) {
				socklen_t cl = lf__name_client(&cn, AF_INET, &eps[i], &dst, (unsigned long)++nonce);
				int u = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
				if (u >= 0 && !bind(u, (void *)&cn, cl) && !connect(u, (void *)&rn, rl))
					(void)!write(u, "x", 1);
				if (u >= 0)
					close(u);
			}
		}
		for (unsigned i = 0; i < npend;) {
			struct pollfd pf = { pending[i], POLLOUT, 0 };
			if (poll(&pf, 1, 0) == 0) {
				i++;
				continue;
			}
			int e = 0;
			socklen_t el = sizeof(e);
			getsockopt(pending[i], SOL_SOCKET, SO_ERROR, &e, &el);
			made += e == 0;
			setsockopt(pending[i], SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 }, sizeof(struct linger));
			close(pending[i]);
			pending[i] = pending[--npend];
		}
		if (tries >= (t - start) * 1000 || npend == 1024) {
			usleep(500);
			continue;
		}
		const struct lf_ep *e = &eps[400 + tries++ % (PARK_EPS - 400)];
		int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1, mss = 89;
		struct sockaddr_in from = { .sin_family = AF_INET, .sin_addr = e->addr.v4, .sin_port = htons(e->port) };
		struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					  .sin_port = htons((uint16_t)port) };
		if (c < 0)
			continue;
		setsockopt(c, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(c, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
		if (bind(c, (void *)&from, sizeof(from)) || (connect(c, (void *)&to, sizeof(to)) && errno != EINPROGRESS))
			close(c);
		else
			pending[npend++] = c;
	}
	if (write(report, &made, sizeof(made)) != sizeof(made))
		_exit(3);
	_exit(0);
}

static int read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	size_t got = 0;
	double deadline = now_s() + timeout_ms / 1000.0;

	while (got < len) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) || now_s() > deadline)
			return -ETIMEDOUT;
		nanosleep(&ts, NULL);
	}
	return 0;
}

static pid_t spawn(int *rd)
{
	int p[2];
	*rd = -1;
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		*rd = p[1];
		return 0;
	}
	close(p[1]);
	*rd = p[0];
	return pid;
}

static void reap(pid_t pid)
{
	int st;
	if (pid > 0 && waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
}

/* The seccomp row: serve() and client() as supervised children. */
struct conn_call {
	int path, report, port;
	unsigned clients;
	pid_t server;
	const struct conn_opts *o;
};

static void serve_fn(void *a)
{
	struct conn_call *c = a;
	serve(c->path, c->report);
}

static void client_fn(void *a)
{
	struct conn_call *c = a;
	client(c->path, c->clients, c->port, c->server, c->o, c->report);
}

int conn_run(int path, unsigned clients, const struct conn_opts *o, struct conn_result *r)
{
	int srd, crd, frd = -1, id[2], timeout = (int)((o->warmup_s + o->time_s) * 1000) + 20000;
	pid_t server, cl, fl = -1;
	uint64_t sv[4];

	memset(r, 0, sizeof(*r));
	if (!client_pid) {
		void *m = mmap(NULL, sizeof(*client_pid), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return r->err = -errno;
		client_pid = m;
	}
	*client_pid = 0;
	fflush(NULL);
	if ((server = spawn(&srd)) == 0 && path == CONN_SECCOMP)
		_exit(lf_cli_supervise_fn(serve_fn, &(struct conn_call){ .path = path, .report = srd }));
	if (server == 0)
		serve(path, srd);
	if (server < 0 || read_full(srd, id, sizeof(id), 5000)) {
		reap(server);
		return r->err = -EIO;
	}
	if ((CONN_FLOODED(path) || CONN_PARKED(path)) && (fl = spawn(&frd)) == 0) {
		if (CONN_PARKED(path))
			parker(id[0], (unsigned)id[1], frd);
		flood(id[0], (unsigned)id[1], frd);
	}
	if (fl > 0)
		usleep(200 * 1000); /* let the flood build up */
	if ((cl = spawn(&crd)) == 0 && path == CONN_SECCOMP)
		_exit(lf_cli_supervise_fn(client_fn, &(struct conn_call){ .path = path, .report = crd, .port = id[0],
									 .clients = clients, .server = server, .o = o }));
	if (cl == 0)
		client(path, clients, id[0], server, o, crd);
	int e = cl < 0 ? -EIO : read_full(crd, r, sizeof(*r), timeout);
	if (fl > 0) {
		kill(fl, SIGTERM);
		if (read_full(frd, &r->flood, sizeof(r->flood), 5000))
			r->flood = 0;
	}
	kill(server, SIGTERM);
	if (!e && read_full(srd, sv, sizeof(sv), 5000) == 0 && path != CONN_UNIX) {
		/* Both ends: the client's samples and the server's. */
		r->sampled += sv[1];
		r->fast += sv[2];
		r->accepted = sv[0];
		r->server_cpu_us = sv[3];
	}
	reap(cl);
	reap(fl);
	reap(server);
	close(srd);
	if (crd >= 0)
		close(crd);
	if (frd >= 0)
		close(frd);
	if (e)
		return r->err = e;
	return 0;
}
