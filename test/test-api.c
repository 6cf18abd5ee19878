/* The public C API: opt-in rules, errors, and the fast path between two
 * sockets of this process opted in with lf_enable_fast_path. Which path a
 * connection took is the kernel's word (test/kernel.h: the two ends' Unix
 * peers, or their TCP addresses); lf_fast_path_active() must agree with
 * it at both ends. */
#include "kernel.h"
#include "runner.h"
#include "loopfast.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The kernel's verdict on the connection c-s (K_FAST or K_TCP, never
 * neither), after checking that lf_fast_path_active() gives the same
 * answer at both ends. */
static int path(int c, int s)
{
	int k = k_path(c, s);

	ASSERT_NE(k, K_NEITHER);
	ASSERT_EQ(lf_fast_path_active(c), k);
	ASSERT_EQ(lf_fast_path_active(s), k);
	return k;
}

static void check_pair(int client_optin, int server_optin, int want)
{
	int port, l = k_listener(server_optin, &port), c = k_client(client_optin, port);
	int s = accept(l, NULL, NULL);
	char buf[6] = { 0 };

	ASSERT_GE(s, 0);
	ASSERT_EQ(path(c, s), want);
	ASSERT_EQ(write(c, "hello", 5), 5);
	ASSERT_EQ(read(s, buf, 5), 5);
	ASSERT_STREQ(buf, "hello");
	close(c);
	close(s);
	close(l);
}

static void both_opted_in(void) { check_pair(1, 1, K_FAST); }
static void only_client_opted_in(void) { check_pair(1, 0, K_TCP); }
static void only_server_opted_in(void) { check_pair(0, 1, K_TCP); }
static void neither_opted_in(void) { check_pair(0, 0, K_TCP); }

static void accepted_sockets_inherit(void)
{
	int port, l = k_listener(1, &port);
	for (int i = 0; i < 3; i++) {
		int c = k_client(1, port), s = accept(l, NULL, NULL);
		ASSERT_EQ(path(c, s), K_FAST);
		close(c);
		close(s);
	}
	close(l);
}

static void errors(void)
{
	int sv[2], udp = socket(AF_INET, SOCK_DGRAM, 0), pfd[2];

	ASSERT_EQ(lf_enable_fast_path(-1), -EBADF);
	ASSERT_EQ(lf_enable_fast_path(9999), -EBADF);
	ASSERT_EQ(pipe(pfd), 0);
	ASSERT_EQ(lf_enable_fast_path(pfd[0]), -ENOTSOCK);
	ASSERT_EQ(lf_fast_path_active(pfd[0]), -ENOTSOCK);
	ASSERT_EQ(lf_enable_fast_path(udp), -EOPNOTSUPP);
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ASSERT_EQ(lf_enable_fast_path(sv[0]), -EOPNOTSUPP);
	ASSERT_EQ(lf_fast_path_active(sv[0]), -EOPNOTSUPP);
	/* Sockets that TCP_INFO alone (MPTCP's answers it) or SO_PROTOCOL alone
	 * (6 for a raw IPPROTO_TCP socket and for NETLINK_XFRM) would take for
	 * TCP; each only where the machine can make it. */
	int odd[] = { socket(AF_INET, SOCK_STREAM, 262 /* IPPROTO_MPTCP */), socket(AF_INET, SOCK_RAW, IPPROTO_TCP),
		      socket(AF_NETLINK, SOCK_RAW, 6 /* NETLINK_XFRM */) };
	for (int i = 0; i < 3; i++) {
		if (odd[i] < 0)
			continue;
		ASSERT_EQ(lf_enable_fast_path(odd[i]), -EOPNOTSUPP);
		close(odd[i]);
	}

	int port, l = k_listener(0, &port), c = k_client(0, port);
	ASSERT_EQ(lf_enable_fast_path(c), -EISCONN);
	int fresh = socket(AF_INET6, SOCK_STREAM, 0);
	ASSERT_EQ(lf_fast_path_active(fresh), -ENOTCONN);
	ASSERT_EQ(lf_enable_fast_path(fresh), 0);
	ASSERT(lf_strerror(-EOPNOTSUPP) != NULL);
	ASSERT(strlen(lf_strerror(EISCONN)) > 0);
	close(c);
	close(l);
}

static void fast_path_socket_is_connected(void)
{
	int port, l = k_listener(1, &port), c = k_client(1, port), s = accept(l, NULL, NULL);

	ASSERT_EQ(path(c, s), K_FAST);
	ASSERT_EQ(lf_enable_fast_path(c), -EISCONN);
	ASSERT_EQ(lf_enable_fast_path(s), -EISCONN);
}

/* Not loopback: the opt-in is accepted and the connection is plain TCP
 * (here: refused, as nobody listens on that address). */
static void not_loopback_stays_tcp(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9) };

	inet_pton(AF_INET, "192.0.2.1", &a.sin_addr); /* TEST-NET-1: never routed here */
	ASSERT_EQ(lf_enable_fast_path(fd), 0);
	int r = connect(fd, (struct sockaddr *)&a, sizeof(a));
	ASSERT(r == -1 && (errno == EINPROGRESS || errno == ENETUNREACH || errno == EHOSTUNREACH));
	ASSERT_EQ(lf_fast_path_active(fd), -ENOTCONN);
	close(fd);
}

/* LOOPFAST_EXCLUDE applies to programs that use the API too (read at the
 * first check, here the first opt-in of a listener): an excluded listener
 * opts in without error and stays plain TCP, another one is served. */
static void excluded_listener_stays_tcp(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int ex = socket(AF_INET, SOCK_STREAM, 0), port2;
	char env[16];

	ASSERT_GE(ex, 0);
	ASSERT_EQ(bind(ex, (struct sockaddr *)&a, sizeof(a)), 0);
	ASSERT_EQ(listen(ex, 16), 0);
	ASSERT_EQ(getsockname(ex, (struct sockaddr *)&a, &l), 0);
	snprintf(env, sizeof(env), "%u", ntohs(a.sin_port));
	ASSERT_EQ(setenv("LOOPFAST_EXCLUDE", env, 1), 0);
	ASSERT_EQ(lf_enable_fast_path(ex), 0);
	int c = k_client(1, ntohs(a.sin_port)), s = accept(ex, NULL, NULL);
	ASSERT_GE(s, 0);
	ASSERT_EQ(path(c, s), K_TCP);
	int other = k_listener(1, &port2), c2 = k_client(1, port2), s2 = accept(other, NULL, NULL);
	ASSERT_GE(s2, 0);
	ASSERT_EQ(path(c2, s2), K_FAST);
	close(c), close(s), close(ex), close(c2), close(s2), close(other);
}

static void spin_setting(void)
{
	int port, l = k_listener(1, &port), c = k_client(1, port), u = socket(AF_INET, SOCK_DGRAM, 0);

	ASSERT_EQ(lf_set_spin(c, 50), 0);
	ASSERT_EQ(lf_set_spin(-1, 50), -EBADF);
	ASSERT_EQ(lf_set_spin(u, 50), -EOPNOTSUPP);
	close(l);
}

/* Several clients connect before the server accepts any: each accepted
 * socket must be joined to its own client (the kernel pairs them), in the
 * order TCP queued them, and each carries its own client's bytes. */
static void each_accept_joins_its_own_client(void)
{
	int port, l = k_listener(1, &port), c[3], s[3];

	for (int i = 0; i < 3; i++)
		c[i] = k_client(1, port);
	for (int i = 0; i < 3; i++) {
		s[i] = accept(l, NULL, NULL);
		ASSERT_GE(s[i], 0);
	}
	for (int i = 0; i < 3; i++) {
		char b = 0;
		ASSERT_EQ(path(c[i], s[i]), K_FAST);
		ASSERT_EQ(k_path(c[i], s[(i + 1) % 3]), K_NEITHER);
		ASSERT_EQ(write(c[i], &"abc"[i], 1), 1);
		ASSERT_EQ(read(s[i], &b, 1), 1);
		ASSERT_EQ(b, "abc"[i]);
	}
	for (int i = 0; i < 3; i++)
		close(c[i]), close(s[i]);
	close(l);
}

/* The proof itself can fail: it tells a connected pair from two ends of
 * different connections, and Unix from TCP. */
static void kernel_verdict_can_fail(void)
{
	int u1[2], u2[2], port, l = k_listener(0, &port);

	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, u1), 0);
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, u2), 0);
	ASSERT_EQ(k_path(u1[0], u1[1]), K_FAST);
	ASSERT_EQ(k_path(u1[1], u1[0]), K_FAST);
	ASSERT_EQ(k_path(u1[0], u2[1]), K_NEITHER);
	int c1 = k_client(0, port), s1 = accept(l, NULL, NULL);
	int c2 = k_client(0, port), s2 = accept(l, NULL, NULL);
	ASSERT_EQ(k_path(c1, s1), K_TCP);
	ASSERT_EQ(k_path(s2, c2), K_TCP);
	ASSERT_EQ(k_path(c1, s2), K_NEITHER);
	ASSERT_EQ(k_path(c1, c1), K_NEITHER);
	ASSERT_EQ(k_path(c1, u1[0]), K_NEITHER);
	close(c1), close(s1), close(c2), close(s2), close(l);
	close(u1[0]), close(u1[1]), close(u2[0]), close(u2[1]);
}

static const struct lf_test tests[] = {
	{ "excluded_listener_stays_tcp", excluded_listener_stays_tcp, 0 },
	{ "both_opted_in", both_opted_in, 0 },
	{ "only_client_opted_in", only_client_opted_in, 0 },
	{ "only_server_opted_in", only_server_opted_in, 0 },
	{ "neither_opted_in", neither_opted_in, 0 },
	{ "accepted_sockets_inherit", accepted_sockets_inherit, 0 },
	{ "each_accept_joins_its_own_client", each_accept_joins_its_own_client, 0 },
	{ "kernel_verdict_can_fail", kernel_verdict_can_fail, 0 },
	{ "errors", errors, 0 },
	{ "fast_path_socket_is_connected", fast_path_socket_is_connected, 0 },
	{ "not_loopback_stays_tcp", not_loopback_stays_tcp, 0 },
	{ "spin_setting", spin_setting, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
