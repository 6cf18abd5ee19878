/* Loopback endpoints and the abstract Unix names that carry them.
 *
 * A fast-path connection has no table: its TCP addresses are encoded in the
 * abstract name the client binds its Unix socket to, so any process holding
 * either end (after fork, exec or fd passing) can answer getsockname and
 * getpeername from the kernel's own state. Names are only ever read, never
 * trusted: any process can bind any free abstract name. */
#include "protocol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool lf__ep_from_sockaddr(struct lf_ep *ep, const struct sockaddr *sa, socklen_t len)
{
	memset(ep, 0, sizeof(*ep));
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;
		ep->family = AF_INET;
		ep->addr.v4 = in->sin_addr;
		ep->port = ntohs(in->sin_port);
		return true;
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		ep->port = ntohs(in6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			ep->family = AF_INET;
			memcpy(&ep->addr.v4, &in6->sin6_addr.s6_addr[12], 4);
		} else {
			ep->family = AF_INET6;
			ep->addr.v6 = in6->sin6_addr;
		}
		return true;
	}
	return false;
}

socklen_t lf__ep_to_sockaddr(const struct lf_ep *ep, int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *in6 = (void *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(ep->port);
		if (ep->family == AF_INET) {
			in6->sin6_addr.s6_addr[10] = 0xff;
			in6->sin6_addr.s6_addr[11] = 0xff;
			memcpy(&in6->sin6_addr.s6_addr[12], &ep->addr.v4, 4);
		} else {
			in6->sin6_addr = ep->addr.v6;
		}
		return sizeof(*in6);
	}
	struct sockaddr_in *in = (void *)ss;
	in->sin_family = AF_INET;
	in->sin_port = htons(ep->port);
	in->sin_addr = ep->addr.v4;
	return sizeof(*in);
}

bool lf__ep_is_loopback(const struct lf_ep *ep)
{
	if (ep->family == AF_INET)
		return (ntohl(ep->addr.v4.s_addr) >> 24) == 127;
	return IN6_IS_ADDR_LOOPBACK(&ep->addr.v6);
}

bool lf__ep_is_any(const struct lf_ep *ep)
{
	if (ep->family == AF_INET)
		return ep->addr.v4.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&ep->addr.v6);
}

bool lf__ep_equal(const struct lf_ep *a, const struct lf_ep *b)
{
	if (a->family != b->family || a->port != b->port)
		return false;
	if (a->family == AF_INET)
		return a->addr.v4.s_addr == b->addr.v4.s_addr;
	return IN6_ARE_ADDR_EQUAL(&a->addr.v6, &b->addr.v6);
}

static const char *ep_addr(const struct lf_ep *ep, char *buf, size_t len)
{
	return inet_ntop(ep->family, &ep->addr, buf, len);
}

int lf__ep_format(const struct lf_ep *ep, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];

	ep_addr(ep, a, sizeof(a));
	return snprintf(buf, len, ep->family == AF_INET6 ? "[%s]:%u" : "%s:%u", a, ep->port);
}

static socklen_t name_finish(int n)
{
	/* Abstract names are not NUL-terminated: the length is the name. */
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static socklen_t name_server(struct sockaddr_un *sun, int version, char kind, int family, unsigned long ino)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, LF_NAME_ROOT "%d/%c/%c/%lu", version, kind,
			 family == AF_INET ? '4' : '6', ino);
	return name_finish(n);
}

socklen_t lf__name_listener_of(struct sockaddr_un *sun, int version, int family, unsigned long ino)
{
	return name_server(sun, version, 'L', family, ino);
}

socklen_t lf__name_listener(struct sockaddr_un *sun, int family, unsigned long ino)
{
	return name_server(sun, LF_PROTO_VERSION, 'L', family, ino);
}

socklen_t lf__name_stash(struct sockaddr_un *sun, int family, unsigned long ino)
{
	return name_server(sun, LF_PROTO_VERSION, 'S', family, ino);
}

socklen_t lf__name_client_tier(struct sockaddr_un *sun, int family, const struct lf_ep *c, const struct lf_ep *s,
			       unsigned long nonce, bool shm)
{
	char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
			 LF_NAME_PREFIX "%c/%c/%s/%u/%s/%u/%lx", shm ? 'T' : 'C', family == AF_INET ? '4' : '6',
			 ep_addr(c, a, sizeof(a)), c->port, ep_addr(s, b, sizeof(b)), s->port, nonce);
	return name_finish(n);
}

socklen_t lf__name_client(struct sockaddr_un *sun, int family, const struct lf_ep *c,
			  const struct lf_ep *s, unsigned long nonce)
{
	return lf__name_client_tier(sun, family, c, s, nonce, false);
}

bool lf__name_asks_shm(const struct sockaddr_un *sun, socklen_t len)
{
	size_t at = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(LF_NAME_PREFIX);

	return len > at && len <= sizeof(*sun) && sun->sun_path[at - offsetof(struct sockaddr_un, sun_path)] == 'T';
}

/* A decimal number without sign, leading zero or trailing junk. */
static bool parse_num(const char *s, unsigned long max, unsigned long *out)
{
	char *end;

	if (!s || !*s || (s[0] == '0' && s[1]) || *s < '0' || *s > '9')
		return false;
	errno = 0;
	*out = strtoul(s, &end, 10);
	return !errno && !*end && *out <= max;
}

static bool parse_ep(char *addr, char *port, struct lf_ep *ep)
{
	unsigned long p;

	if (!addr || !port)
		return false;
	memset(ep, 0, sizeof(*ep));
	ep->family = strchr(addr, ':') ? AF_INET6 : AF_INET;
	if (inet_pton(ep->family, addr, &ep->addr) != 1 || !parse_num(port, 65535, &p))
		return false;
	ep->port = (uint16_t)p;
	return true;
}

enum lf_name_kind lf__name_parse(const struct sockaddr_un *sun, socklen_t len, unsigned long *ino, int *family,
				 struct lf_ep *a, struct lf_ep *b)
{
	size_t off = offsetof(struct sockaddr_un, sun_path);
	size_t plen = strlen(LF_NAME_PREFIX);
	char buf[LF_NAME_MAX], *save = NULL, *end;

	if (len <= off + 1 + plen || len > sizeof(*sun) || sun->sun_family != AF_UNIX || sun->sun_path[0] != '\0')
		return LF_NAME_NONE;
	size_t n = len - off - 1;
	if (n >= sizeof(buf) || memcmp(sun->sun_path + 1, LF_NAME_PREFIX, plen))
		return LF_NAME_NONE;
	memcpy(buf, sun->sun_path + 1 + plen, n - plen);
	buf[n - plen] = '\0';
	if (memchr(buf, '\0', n - plen)) /* an embedded NUL: not one of ours */
		return LF_NAME_NONE;

	char *kind = strtok_r(buf, "/", &save), *fam = strtok_r(NULL, "/", &save);
	if (!kind || !fam || (strcmp(fam, "4") && strcmp(fam, "6")))
		return LF_NAME_NONE;
	*family = fam[0] == '4' ? AF_INET : AF_INET6;
	if (!strcmp(kind, "L")) {
		char *num = strtok_r(NULL, "/", &save);
		return parse_num(num, ~0ul, ino) && !strtok_r(NULL, "/", &save) ? LF_NAME_LISTENER : LF_NAME_NONE;
	}
	if (strcmp(kind, "C") && strcmp(kind, "T")) /* T: a client that asks for the shm tier */
		return LF_NAME_NONE;
	char *a1 = strtok_r(NULL, "/", &save), *p1 = strtok_r(NULL, "/", &save);
	char *a2 = strtok_r(NULL, "/", &save), *p2 = strtok_r(NULL, "/", &save);
	char *nonce = strtok_r(NULL, "/", &save);
	if (!parse_ep(a1, p1, a) || !parse_ep(a2, p2, b) || !nonce || !*nonce || strtok_r(NULL, "/", &save))
		return LF_NAME_NONE;
	strtoul(nonce, &end, 16);
	return *end ? LF_NAME_NONE : LF_NAME_CLIENT;
}
