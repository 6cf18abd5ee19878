/* LOOPFAST_EXCLUDE: the parser (good entries kept, bad ones named and
 * skipped) and what each entry matches; the once-only warning of the
 * library's own reading of the environment. */
#include "runner.h"
#include "internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static struct lf_ep ep(int family, const char *addr, uint16_t port)
{
	struct lf_ep e = { .family = family, .port = port };
	ASSERT_EQ(inet_pton(family, addr, &e.addr), 1);
	return e;
}

static int parse(const char *s, struct lf_ep *out, struct lf_exclude_err *err)
{
	return lf__exclude_parse(s, out, LF_EXCLUDE_MAX, err);
}

static void good_entries(void)
{
	struct lf_ep t[LF_EXCLUDE_MAX];
	struct lf_exclude_err err;

	ASSERT_EQ(parse("6379", t, &err), 1);
	ASSERT_EQ(err.nbad, 0);
	ASSERT_EQ(t[0].family, AF_UNSPEC);
	ASSERT_EQ(t[0].port, 6379);
	ASSERT_EQ(parse(" 80 , 127.0.0.1:8080,[::1]:443,,localhost:5432, ", t, &err), 5);
	ASSERT_EQ(err.nbad, 0);
	ASSERT_EQ(t[0].port, 80);
	ASSERT(lf__ep_equal(&t[1], &(struct lf_ep){ .family = AF_INET, .addr.v4.s_addr = htonl(0x7f000001), .port = 8080 }));
	struct lf_ep v6 = ep(AF_INET6, "::1", 443);
	ASSERT(lf__ep_equal(&t[2], &v6));
	struct lf_ep l4 = ep(AF_INET, "127.0.0.1", 5432), l6 = ep(AF_INET6, "::1", 5432);
	ASSERT(lf__ep_equal(&t[3], &l4));
	ASSERT(lf__ep_equal(&t[4], &l6));
	/* v4-mapped is v4; wildcards mean every address. */
	ASSERT_EQ(parse("[::ffff:127.0.0.2]:9,0.0.0.0:10,[::]:11,65535,1", t, &err), 5);
	struct lf_ep m = ep(AF_INET, "127.0.0.2", 9);
	ASSERT(lf__ep_equal(&t[0], &m));
	ASSERT_EQ(t[1].family, AF_UNSPEC);
	ASSERT_EQ(t[2].family, AF_UNSPEC);
	ASSERT_EQ(parse("", t, &err), 0);
	ASSERT_EQ(err.nbad, 0);
	ASSERT_EQ(lf__exclude_parse(NULL, t, LF_EXCLUDE_MAX, &err), 0);
	ASSERT_EQ(err.nbad, 0);
}

static void bad_entries_are_named_and_skipped(void)
{
	static const char *const bad[] = {
		"0", "65536", "99999999999", "-1", "+80", "80x", "http", "127.0.0.1:", ":80", "127.0.0.1",
		"127.0.0.256:80", "::1:80", "[::1]80", "[::1]:", "[::1", "[zz]:80", "example.com:80",
		"127.0.0.1:80:90", "[fe80::1%lo]:80", "1.2.3:80", "[127.0.0.1]:80",
	};
	struct lf_ep t[LF_EXCLUDE_MAX];
	struct lf_exclude_err err;

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char list[128];
		snprintf(list, sizeof(list), "22,%s,23", bad[i]);
		int n = parse(list, t, &err);
		if (n != 2 || err.nbad != 1 || strcmp(err.entry, bad[i]) || !err.why) {
			fprintf(stderr, "'%s': %d entries, %d bad, named '%s'\n", bad[i], n, err.nbad, err.entry);
			ASSERT(0);
		}
		ASSERT_EQ(t[0].port, 22);
		ASSERT_EQ(t[1].port, 23);
	}
	ASSERT_EQ(parse("x,y,80", t, &err), 1);
	ASSERT_EQ(err.nbad, 2);
	ASSERT_STREQ(err.entry, "x");
	/* A long bad entry is cut, never overflows. */
	char big[4096];
	memset(big, '7', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ASSERT_EQ(parse(big, t, &err), 0);
	ASSERT_EQ(err.nbad, 1);
	ASSERT_LT(strlen(err.entry), sizeof(err.entry));
}

static void too_many_entries(void)
{
	char list[LF_EXCLUDE_MAX * 8 + 64] = "";
	struct lf_ep t[LF_EXCLUDE_MAX];
	struct lf_exclude_err err;

	for (int i = 1; i <= LF_EXCLUDE_MAX + 3; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%d,", i);
	ASSERT_EQ(parse(list, t, &err), LF_EXCLUDE_MAX);
	ASSERT_EQ(err.nbad, 3);
	ASSERT_STREQ(err.why, "too many entries");
}

static void matching(void)
{
	struct lf_ep t[LF_EXCLUDE_MAX];
	struct lf_exclude_err err;
	int n = parse("6379,127.0.0.1:8080,[::1]:9000", t, &err);

	struct lf_ep a = ep(AF_INET, "127.0.0.1", 6379), b = ep(AF_INET6, "::1", 6379), c = ep(AF_INET, "127.0.0.1", 8080),
		     d = ep(AF_INET, "127.0.0.2", 8080), e = ep(AF_INET6, "::1", 8080), f = ep(AF_INET, "0.0.0.0", 8080),
		     g = ep(AF_INET6, "::", 9000), h = ep(AF_INET, "127.0.0.1", 9000), i = ep(AF_INET, "127.0.0.1", 6380);
	ASSERT_EQ(n, 3);
	ASSERT(lf__exclude_match(t, n, &a)); /* PORT: every address */
	ASSERT(lf__exclude_match(t, n, &b));
	ASSERT(lf__exclude_match(t, n, &c)); /* ADDR:PORT: that address */
	ASSERT(!lf__exclude_match(t, n, &d));
	ASSERT(!lf__exclude_match(t, n, &e));
	ASSERT(lf__exclude_match(t, n, &f)); /* a wildcard listener serves 127.0.0.1:8080 too */
	ASSERT(lf__exclude_match(t, n, &g));
	ASSERT(!lf__exclude_match(t, n, &h));
	ASSERT(!lf__exclude_match(t, n, &i));
	ASSERT(!lf__exclude_match(t, 0, &a));
}

/* The library's reading of the environment: the good entries apply, a bad
 * one is said on exactly one line however often the table is consulted,
 * and errno is kept. Run in a child: the reading happens once per process. */
static void environment_warns_once(void)
{
	int p[2];
	ASSERT_EQ(pipe(p), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		dup2(p[1], 2);
		setenv("LOOPFAST_EXCLUDE", "7000,bogus,[::1]:7001", 1);
		struct lf_ep x = ep(AF_INET, "127.0.0.1", 7000), y = ep(AF_INET6, "::1", 7001), z = ep(AF_INET, "127.0.0.1", 7001);
		for (int k = 0; k < 3; k++) {
			errno = 1234;
			if (!lf__excluded(&x) || !lf__excluded(&y) || lf__excluded(&z) || errno != 1234)
				_exit(1);
		}
		_exit(0);
	}
	close(p[1]);
	char buf[1024];
	ssize_t n, total = 0;
	while ((n = read(p[0], buf + total, sizeof(buf) - 1 - (size_t)total)) > 0)
		total += n;
	buf[total] = '\0';
	close(p[0]);
	int st;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	int lines = 0;
	for (char *q = buf; *q; q++)
		lines += *q == '\n';
	ASSERT_EQ(lines, 1);
	ASSERT(strstr(buf, "LOOPFAST_EXCLUDE: ignoring 'bogus'"));
}

static const struct lf_test tests[] = {
	{ "good_entries", good_entries, 0 },
	{ "bad_entries_are_named_and_skipped", bad_entries_are_named_and_skipped, 0 },
	{ "too_many_entries", too_many_entries, 0 },
	{ "matching", matching, 0 },
	{ "environment_warns_once", environment_warns_once, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
