/* What the supervisor tests' static programs share (sv_client.c,
 * sv_connect.c, sv_sec.c, sv_server.c): a loopback address to connect to,
 * an address as text, and the echo check. Each program is built alone
 * (`cc -static FILE.c` in the tests, one executable per file in CMake), so
 * these are static inline functions in a header. */
#ifndef SV_H
#define SV_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Fills ss with PORT on the loopback address of FAM: "4" 127.0.0.1, "6" ::1,
 * anything else ::ffff:127.0.0.1 (IPv4-mapped, for an AF_INET6 socket).
 * Returns the address's length. */
static inline socklen_t sv_loopback(struct sockaddr_storage *ss, const char *fam, int port)
{
	memset(ss, 0, sizeof(*ss));
	if (!strcmp(fam, "4")) {
		struct sockaddr_in *a = (void *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((unsigned short)port);
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return sizeof(*a);
	}
	struct sockaddr_in6 *a = (void *)ss;
	a->sin6_family = AF_INET6;
	a->sin6_port = htons((unsigned short)port);
	inet_pton(AF_INET6, strcmp(fam, "6") ? "::ffff:127.0.0.1" : "::1", &a->sin6_addr);
	return sizeof(*a);
}

/* "ADDR:PORT" for IPv4, "[ADDR]:PORT" for IPv6, "familyN" for any other. */
static inline void sv_name(const struct sockaddr_storage *a, char *out, size_t size)
{
	char h[INET6_ADDRSTRLEN] = "?";
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)a;
		inet_ntop(AF_INET, &s->sin_addr, h, sizeof(h));
		snprintf(out, size, "%s:%u", h, ntohs(s->sin_port));
	} else if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)a;
		inet_ntop(AF_INET6, &s->sin6_addr, h, sizeof(h));
		snprintf(out, size, "[%s]:%u", h, ntohs(s->sin6_port));
	} else {
		snprintf(out, size, "family%d", a->ss_family);
	}
}

/* fd's names as the kernel (or the supervisor) answers this program:
 * "LOCAL PEER", from getsockname and getpeername. */
static inline void sv_names(int fd, char *out, size_t size)
{
	struct sockaddr_storage la = { 0 }, pa = { 0 };
	socklen_t ll = sizeof(la), pl = sizeof(pa);
	char ls[80], ps[80];
	getsockname(fd, (void *)&la, &ll);
	getpeername(fd, (void *)&pa, &pl);
	sv_name(&la, ls, sizeof(ls));
	sv_name(&pa, ps, sizeof(ps));
	snprintf(out, size, "%s %s", ls, ps);
}

/* Sends n bytes of a pattern on fd, reads n back and prints "echo OK N"
 * when they are the same, else "echo BAD N" (N: the bytes read). */
static inline void sv_echo(int fd, size_t n)
{
	char *out = malloc(n), *in = malloc(n);
	size_t done = 0, got = 0;
	for (size_t i = 0; i < n; i++)
		out[i] = (char)(i * 7 + 3);
	while (done < n) {
		ssize_t w = write(fd, out + done, n - done);
		if (w <= 0)
			break;
		done += (size_t)w;
	}
	while (got < n) {
		ssize_t k = read(fd, in + got, n - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	printf(got == n && !memcmp(in, out, n) ? "echo OK %zu\n" : "echo BAD %zu\n", got);
	fflush(stdout);
	free(out);
	free(in);
}

#endif
