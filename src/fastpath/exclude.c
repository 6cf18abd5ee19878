/* The opt-out: LOOPFAST_EXCLUDE (what `loopfast run --exclude` sets) names
 * listeners and destinations that stay on plain TCP, as a comma-separated
 * list of PORT, ADDR:PORT, [ADDR6]:PORT or localhost:PORT.
 *
 * Matching: an entry that names only a port (or a wildcard address,
 * 0.0.0.0 or [::]) matches every address with that port; ADDR:PORT
 * matches that address and port, and also a listener on a wildcard
 * address with that port (it serves ADDR:PORT too). localhost means
 * 127.0.0.1 and ::1. IPv4-mapped IPv6 addresses match their IPv4 form.
 *
 * The list is parsed once, at start-up (preload.c) or at the first check
 * (the library, for programs that use the C API: an operator's opt-out
 * wins over the program's opt-in). A bad entry is ignored and said once
 * per process, on one line of stderr; the good ones still apply. Nothing
 * here allocates, so it is safe inside any interposed call.
 *
 * Used by connect.c (client: before anything else, counted as
 * LF_EV_EXCLUDED) and listener.c (no new rendezvous for an excluded
 * listener), and by the CLI to check `--exclude` (lf__exclude_parse). */
#include "process.h"
#include "sys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct lf_ep table[LF_EXCLUDE_MAX];
static int ntable;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* One entry, s[0..n). Fills out[] (one address, two for localhost);
 * returns how many, or 0 with *why set. */
static int parse_entry(const char *s, size_t n, struct lf_ep out[2], const char **why)
{
	char addr[INET6_ADDRSTRLEN + 2];
	const char *port = s, *colon = NULL;
	size_t alen = 0;
	unsigned long v = 0;

	if (n && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close || close + 1 == s + n || close[1] != ':') {
			*why = "an IPv6 address is written [ADDR]:PORT";
			return 0;
		}
		alen = (size_t)(close - s - 1);
		if (alen >= sizeof(addr)) {
			*why = "not an IPv6 address";
			return 0;
		}
		memcpy(addr, s + 1, alen);
		addr[alen] = '\0';
		port = close + 2;
		colon = close + 1;
	} else if ((colon = memchr(s, ':', n))) {
		if (memchr(colon + 1, ':', (size_t)(s + n - colon - 1))) {
			*why = "an IPv6 address is written [ADDR]:PORT";
			return 0;
		}
		alen = (size_t)(colon - s);
		if (alen >= sizeof(addr)) {
			*why = "not an IP address";
			return 0;
		}
		memcpy(addr, s, alen);
		addr[alen] = '\0';
		port = colon + 1;
	}
	size_t plen = (size_t)(s + n - port);
	if (plen == 0 || plen > 5) {
		*why = "the port must be a number from 1 to 65535";
		return 0;
	}
	for (size_t i = 0; i < plen; i++) {
		if (port[i] < '0' || port[i] > '9') {
			*why = "the port must be a number from 1 to 65535";
			return 0;
		}
		v = v * 10 + (unsigned long)(port[i] - '0');
	}
	if (v < 1 || v > 65535) {
		*why = "the port must be a number from 1 to 65535";
		return 0;
	}
	memset(out, 0, 2 * sizeof(*out));
	out[0].port = out[1].port = (uint16_t)v;
	if (!colon) {
		out[0].family = AF_UNSPEC; /* every address */
		return 1;
	}
	if (s[0] != '[' && !strcmp(addr, "localhost")) {
		out[0].family = AF_INET;
		out[0].addr.v4.s_addr = htonl(INADDR_LOOPBACK);
		out[1].family = AF_INET6;
		out[1].addr.v6 = in6addr_loopback;
		return 2;
	}
	if (s[0] == '[') {
		struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6 };
		if (inet_pton(AF_INET6, addr, &sin6.sin6_addr) != 1) {
			*why = "not an IPv6 address";
			return 0;
		}
		lf__ep_from_sockaddr(&out[0], (struct sockaddr *)&sin6, sizeof(sin6)); /* v4-mapped: v4 */
	} else {
		out[0].family = AF_INET;
		if (inet_pton(AF_INET, addr, &out[0].addr.v4) != 1) {
			*why = "not an IPv4 address (write IPv6 as [ADDR]:PORT; no host names but localhost)";
			return 0;
		}
	}
	out[0].port = (uint16_t)v;
	if (lf__ep_is_any(&out[0]))
		out[0].family = AF_UNSPEC;
	return 1;
}

int lf__exclude_parse(const char *list, struct lf_ep *out, int max, struct lf_exclude_err *err)
{
	int n = 0;

	err->nbad = 0;
	err->entry[0] = '\0';
	err->why = NULL;
	for (const char *p = list ? list : ""; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *s = p;
		size_t k = len;
		struct lf_ep two[2];
		const char *why = NULL;

		p += len + (end ? 1 : 0);
		while (k && (*s == ' ' || *s == '\t'))
			s++, k--;
		while (k && (s[k - 1] == ' ' || s[k - 1] == '\t'))
			k--;
		if (!k)
			continue; /* empty entries (",80", "80,") are allowed */
		int got = parse_entry(s, k, two, &why);
		if (got && n + got > max) {
			got = 0;
			why = "too many entries";
		}
		if (!got) {
			if (err->nbad++ == 0) {
				snprintf(err->entry, sizeof(err->entry), "%.*s", (int)(k < 60 ? k : 60), s);
				err->why = why;
			}
			continue;
		}
		for (int i = 0; i < got; i++)
			out[n++] = two[i];
	}
	return n;
}

bool lf__exclude_match(const struct lf_ep *tab, int n, const struct lf_ep *ep)
{
	for (int i = 0; i < n; i++) {
		if (tab[i].port != ep->port)
			continue;
		if (tab[i].family == AF_UNSPEC || lf__ep_is_any(ep))
			return true;
		if (lf__ep_equal(&tab[i], ep))
			return true;
	}
	return false;
}

static void init(void)
{
	struct lf_exclude_err err;
	int e = errno;

	ntable = lf__exclude_parse(getenv("LOOPFAST_EXCLUDE"), table, LF_EXCLUDE_MAX, &err);
	if (err.nbad) {
		char line[256];
		int len = snprintf(line, sizeof(line), "loopfast[%d]: LOOPFAST_EXCLUDE: ignoring '%s' (%s)%s\n",
				   (int)getpid(), err.entry, err.why,
				   err.nbad > 1 ? " and other bad entries" : "");
		if (len > (int)sizeof(line) - 1)
			len = (int)sizeof(line) - 1;
		(void)!lf__sys_write(2, line, (size_t)len);
	}
	errno = e;
}

void lf__exclude_init(void)
{
	pthread_once(&once, init);
}

bool lf__excluded(const struct lf_ep *ep)
{
	lf__exclude_init();
	return ntable && lf__exclude_match(table, ntable, ep);
}
