/* The public C API: opt-in rules, errors, and the fast path between two
 * sockets of this process opted in with lf_enable_fast_path. */
#include "runner.h"
#include "loopfast.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int listener(int optin, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ASSERT_GE(fd, 0);
	ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ASSERT_EQ(listen(fd, 16), 0);
	if (optin)
		ASSERT_EQ(lf_enable_fast_path(fd), 0);
	ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static int client(int optin, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ASSERT_GE(fd, 0);
	if (optin)
		ASSERT_EQ(lf_enable_fast_path(fd), 0);
	ASSERT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void check_pair(int client_optin, int server_optin, int want)
{
	int port, l = listener(server_optin, &port), c = client(client_optin, port);
	int s = accept(l, NULL, NULL);
	char buf[6] = { 0 };

	ASSERT_GE(s, 0);
	ASSERT_EQ(lf_fast_path_active(c), want);
	ASSERT_EQ(lf_fast_path_active(s), want);
	ASSERT_EQ(write(c, "hello", 5), 5);
	ASSERT_EQ(read(s, buf, 5), 5);
	ASSERT_STREQ(buf, "hello");
	close(c);
	close(s);
	close(l);
}

static void both_opted_in(void) { check_pair(1, 1, 1); }
static void only_client_opted_in(void) { check_pair(1, 0, 0); }
static void only_server_opted_in(void) { check_pair(0, 1, 0); }
static void neither_opted_in(void) { check_pair(0, 0, 0); }

static void accepted_sockets_inherit(void)
{
	int port, l = listener(1, &port);
	for (int i = 0; i < 3; i++) {
		int c = client(1, port), s = accept(l, NULL, NULL);
		ASSERT_EQ(lf_fast_path_active(s), 1);
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

	int port, l = listener(0, &port), c = client(0, port);
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
	int port, l = listener(1, &port), c = client(1, port), s = accept(l, NULL, NULL);

	ASSERT_EQ(lf_fast_path_active(c), 1);
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
	int c = client(1, ntohs(a.sin_port)), s = accept(ex, NULL, NULL);
	ASSERT_GE(s, 0);
	ASSERT_EQ(lf_fast_path_active(c), 0);
	ASSERT_EQ(lf_fast_path_active(s), 0);
	int other = listener(1, &port2), c2 = client(1, port2), s2 = accept(other, NULL, NULL);
	ASSERT_GE(s2, 0);
	ASSERT_EQ(lf_fast_path_active(c2), 1);
	ASSERT_EQ(lf_fast_path_active(s2), 1);
	close(c), close(s), close(ex), close(c2), close(s2), close(other);
}

static void spin_setting(void)
{
	int port, l = listener(1, &port), c = client(1, port), u = socket(AF_INET, SOCK_DGRAM, 0);

	ASSERT_EQ(lf_set_spin(c, 50), 0);
	ASSERT_EQ(lf_set_spin(-1, 50), -EBADF);
	ASSERT_EQ(lf_set_spin(u, 50), -EOPNOTSUPP);
	close(l);
}

static const struct lf_test tests[] = {
	{ "excluded_listener_stays_tcp", excluded_listener_stays_tcp, 0 },
	{ "both_opted_in", both_opted_in, 0 },
	{ "only_client_opted_in", only_client_opted_in, 0 },
	{ "only_server_opted_in", only_server_opted_in, 0 },
	{ "neither_opted_in", neither_opted_in, 0 },
	{ "accepted_sockets_inherit", accepted_sockets_inherit, 0 },
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
