/* libloopfast-unixconnect.so: the client side of `loopfast bench app
 * nginx`'s "unix" path. wrk and ab cannot connect to a Unix socket; preloaded
 * into them with LOOPFAST_UNIXCONNECT=PORT=PATH, this turns their connect()
 * to 127.0.0.1:PORT into a connect() of a Unix stream socket to PATH (nginx's
 * `listen unix:PATH`), put under the same fd with dup3 (same O_NONBLOCK and
 * close-on-exec). Nothing else is intercepted: after connect the client
 * reads and writes the Unix socket directly, as a client with its own Unix
 * socket support would. The cost it adds is one socket() and one dup3() per
 * connection; the TCP socket it replaces was never connected.
 *
 * Not part of the library: a benchmark's tool, installed beside it. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static unsigned short port;
static struct sockaddr_un target;
static socklen_t target_len;

__attribute__((constructor)) static void init(void)
{
	const char *e = getenv("LOOPFAST_UNIXCONNECT");
	char *end;

	real_connect = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
	if (!e)
		return;
	unsigned long p = strtoul(e, &end, 10);
	if (*end != '=' || p == 0 || p > 65535 || strlen(end + 1) >= sizeof(target.sun_path))
		return;
	target.sun_family = AF_UNIX;
	strcpy(target.sun_path, end + 1);
	target_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(end + 1) + 1);
	port = (unsigned short)p;
}

static int matches(const struct sockaddr *sa, socklen_t len)
{
	if (!port || !sa)
		return 0;
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return ntohs(in->sin_port) == port && ntohl(in->sin_addr.s_addr) == INADDR_LOOPBACK;
	}
	return 0;
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (!matches(sa, len))
		return real_connect(fd, sa, len);
	int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
	if (fl < 0 || fdfl < 0)
		return -1;
	int u = socket(AF_UNIX, SOCK_STREAM | ((fl & O_NONBLOCK) ? SOCK_NONBLOCK : 0), 0);
	if (u < 0)
		return -1;
	int r = real_connect(u, (const struct sockaddr *)&target, target_len), e = errno;
	if (r < 0 && e != EINPROGRESS) {
		close(u);
		errno = e;
		return -1;
	}
	if (dup3(u, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		e = errno;
		close(u);
		errno = e;
		return -1;
	}
	close(u);
	errno = e;
	return r;
}
