/* Abstract names that carry TCP endpoints: round trips and rejection of
 * anything that is not exactly loopfast's. */
#include "runner.h"
#include "protocol.h"

#include <arpa/inet.h>
#include <stddef.h>

static struct lf_ep ep(int family, const char *addr, uint16_t port)
{
	struct lf_ep e = { .family = family, .port = port };
	ASSERT_EQ(inet_pton(family, addr, &e.addr), 1);
	return e;
}

static void listener_roundtrip(void)
{
	struct sockaddr_un sun;
	struct lf_ep a, b;
	unsigned long ino = 0;
	int fam;
	socklen_t l = lf__name_listener(&sun, AF_INET6, 4294967295ul);

	ASSERT_EQ(sun.sun_path[0], 0);
	ASSERT_EQ(lf__name_parse(&sun, l, &ino, &fam, &a, &b), LF_NAME_LISTENER);
	ASSERT_EQ(fam, AF_INET6);
	ASSERT_EQ(ino, 4294967295ul);
	l = lf__name_stash(&sun, AF_INET, 7);
	ASSERT_EQ(lf__name_parse(&sun, l, &ino, &fam, &a, &b), LF_NAME_NONE); /* the stash is no rendezvous */
}

static void client_roundtrip(void)
{
	struct sockaddr_un sun;
	struct lf_ep c = ep(AF_INET, "127.0.0.1", 40001), s = ep(AF_INET, "127.0.0.2", 5432), a, b;
	unsigned long ino;
	int fam;
	socklen_t l = lf__name_client(&sun, AF_INET6, &c, &s, 0x1234abcd);

	ASSERT_EQ(lf__name_parse(&sun, l, &ino, &fam, &a, &b), LF_NAME_CLIENT);
	ASSERT_EQ(fam, AF_INET6);
	ASSERT(lf__ep_equal(&a, &c));
	ASSERT(lf__ep_equal(&b, &s));
}

static enum lf_name_kind parse_str(const char *name)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct lf_ep a, b;
	unsigned long ino;
	int fam;
	size_t n = strlen(name);

	memcpy(sun.sun_path + 1, name, n);
	return lf__name_parse(&sun, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n), &ino, &fam, &a, &b);
}

static void rejects_garbage(void)
{
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "L/4/1234"), LF_NAME_LISTENER);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.1/1/127.0.0.1/2/ff"), LF_NAME_CLIENT);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/6/::1/1/::1/2/0"), LF_NAME_CLIENT);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.1/1/127.0.0.1/2"), LF_NAME_NONE); /* no nonce */
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.1/1/127.0.0.1/2/zz"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.1/1/127.0.0.1/2/ff/x"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.1/01/127.0.0.1/2/ff"), LF_NAME_NONE); /* leading zero */
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.1/-1/127.0.0.1/2/ff"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/fe80::1%lo/1/127.0.0.1/2/ff"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "L/4/1234/extra"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "L/5/1234"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "L/4/"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "L/4/12x"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "L/4/99999999999999999999999"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.256/1/127.0.0.1/2/ff"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "C/4/127.0.0.1/65536/127.0.0.1/2/ff"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX "X/4/1234"), LF_NAME_NONE);
	ASSERT_EQ(parse_str("loopfast/L/4/127.0.0.1/80"), LF_NAME_NONE); /* the first protocol's names */
	ASSERT_EQ(parse_str("other/2/L/4/1"), LF_NAME_NONE);
	ASSERT_EQ(parse_str(LF_NAME_PREFIX ""), LF_NAME_NONE);
	ASSERT_EQ(parse_str(""), LF_NAME_NONE);
	/* A filesystem path, not an abstract name. */
	struct sockaddr_un sun = { .sun_family = AF_UNIX, .sun_path = LF_NAME_PREFIX "L/4/1234" };
	struct lf_ep a, b;
	unsigned long ino;
	int fam;
	ASSERT_EQ(lf__name_parse(&sun, sizeof(sun), &ino, &fam, &a, &b), LF_NAME_NONE);
	/* An embedded NUL. */
	struct sockaddr_un z = { .sun_family = AF_UNIX };
	memcpy(z.sun_path + 1, LF_NAME_PREFIX "L/4/1\0002", 18);
	ASSERT_EQ(lf__name_parse(&z, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 19), &ino, &fam, &a, &b), LF_NAME_NONE);
}

static void v4_mapped_is_v4(void)
{
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(99) };
	struct sockaddr_storage ss;
	struct lf_ep e;

	inet_pton(AF_INET6, "::ffff:127.0.0.1", &in6.sin6_addr);
	ASSERT(lf__ep_from_sockaddr(&e, (struct sockaddr *)&in6, sizeof(in6)));
	ASSERT_EQ(e.family, AF_INET);
	ASSERT(lf__ep_is_loopback(&e));
	ASSERT_EQ(lf__ep_to_sockaddr(&e, AF_INET6, &ss), sizeof(in6));
	ASSERT_EQ(memcmp(&((struct sockaddr_in6 *)&ss)->sin6_addr, &in6.sin6_addr, 16), 0);
	ASSERT_EQ(lf__ep_to_sockaddr(&e, AF_INET, &ss), sizeof(struct sockaddr_in));
}

static void loopback_and_any(void)
{
	struct lf_ep a = ep(AF_INET, "127.9.8.7", 1), b = ep(AF_INET, "10.0.0.1", 1), c = ep(AF_INET6, "::1", 1),
		     d = ep(AF_INET6, "::", 1), e = ep(AF_INET, "0.0.0.0", 1);
	char buf[64];

	ASSERT(lf__ep_is_loopback(&a) && !lf__ep_is_loopback(&b) && lf__ep_is_loopback(&c) && !lf__ep_is_loopback(&d));
	ASSERT(lf__ep_is_any(&d) && lf__ep_is_any(&e) && !lf__ep_is_any(&a));
	lf__ep_format(&c, buf, sizeof(buf));
	ASSERT_STREQ(buf, "[::1]:1");
	lf__ep_format(&a, buf, sizeof(buf));
	ASSERT_STREQ(buf, "127.9.8.7:1");
}

static const struct lf_test tests[] = {
	{ "listener_roundtrip", listener_roundtrip, 0 },
	{ "client_roundtrip", client_roundtrip, 0 },
	{ "rejects_garbage", rejects_garbage, 0 },
	{ "v4_mapped_is_v4", v4_mapped_is_v4, 0 },
	{ "loopback_and_any", loopback_and_any, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
