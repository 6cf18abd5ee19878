/* libFuzzer target: lf__name_parse, which reads the abstract names of
 * peers (a hello's sender, the peer of a fast-path socket). Any process
 * can bind any abstract name, so every byte here is an attacker's.
 *
 * Input: one byte that adjusts the length (a signed offset from the
 * length of the bytes that follow), then the bytes of sun_path. Checked,
 * besides memory safety (ASan, UBSan):
 *   - the result never depends on bytes past the length it was given;
 *   - a client name parses back to the same endpoints once re-made with
 *     lf__name_client, a listener name to the same inode with
 *     lf__name_listener (what is accepted is exactly what is produced). */
#include "protocol.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct parsed {
	enum lf_name_kind kind;
	unsigned long ino;
	int family;
	struct lf_ep a, b;
};

static struct parsed parse(const struct sockaddr_un *sun, socklen_t len)
{
	struct parsed p;

	memset(&p, 0, sizeof(p));
	p.kind = lf__name_parse(sun, len, &p.ino, &p.family, &p.a, &p.b);
	return p;
}

static int same(const struct parsed *x, const struct parsed *y)
{
	if (x->kind != y->kind)
		return 0;
	if (x->kind == LF_NAME_LISTENER)
		return x->ino == y->ino && x->family == y->family;
	if (x->kind == LF_NAME_CLIENT)
		return x->family == y->family && lf__ep_equal(&x->a, &y->a) && lf__ep_equal(&x->b, &y->b);
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_un lo, hi, re;
	size_t off = offsetof(struct sockaddr_un, sun_path);

	if (size < 1)
		return 0;
	size_t n = size - 1 > sizeof(lo.sun_path) ? sizeof(lo.sun_path) : size - 1;
	long len = (long)(off + n) + (int8_t)data[0];
	if (len < 0)
		len = 0;
	if (len > (long)sizeof(lo) + 16)
		len = (long)sizeof(lo) + 16; /* the parser must refuse lengths past the structure */
	/* The same name with everything past `len` filled two ways. */
	memset(&lo, 0, sizeof(lo));
	memset(&hi, 0xff, sizeof(hi));
	lo.sun_family = hi.sun_family = AF_UNIX;
	memcpy(lo.sun_path, data + 1, n);
	memcpy(hi.sun_path, data + 1, n);
	for (size_t i = (size_t)len; i < sizeof(lo); i++)
		((uint8_t *)&lo)[i] = 0;
	if ((size_t)len < sizeof(hi))
		memcpy(&hi, &lo, (size_t)len);
	struct parsed p = parse(&lo, (socklen_t)len), q = parse(&hi, (socklen_t)len);
	if (!same(&p, &q))
		abort(); /* read past the length it was given */
	if (p.kind == LF_NAME_CLIENT) {
		if ((p.family != AF_INET && p.family != AF_INET6) ||
		    (p.a.family != AF_INET && p.a.family != AF_INET6) || (p.b.family != AF_INET && p.b.family != AF_INET6))
			abort();
		struct parsed r = parse(&re, lf__name_client(&re, p.family, &p.a, &p.b, 0xabc));
		if (!same(&p, &r))
			abort(); /* accepted a name loopfast would never make */
	} else if (p.kind == LF_NAME_LISTENER) {
		struct parsed r = parse(&re, lf__name_listener(&re, p.family, p.ino));
		if (!same(&p, &r))
			abort();
	} else if (p.kind != LF_NAME_NONE) {
		abort();
	}
	return 0;
}
