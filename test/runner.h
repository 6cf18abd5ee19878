/* A tiny test runner in the style of libuv's: each test runs in a forked
 * child with a timeout; LF_SKIP() skips with a reason, which the runner
 * prints ("skip NAME: reason") for the harness to check against
 * test/skips.allow. A test whose `xfail` names a known fault and its issue
 * ("... (issue N)", which the harness requires) must fail (it is counted
 * as xfailed); if it passes, the run fails so that the mark comes off.
 *
 * The runner's own lines start in the first column: "ok   NAME",
 * "FAIL NAME: why" (exit status N, killed by signal N, timed out after N s),
 * "skip NAME: reason", "xfail NAME: mark", "XPASS NAME: mark", and the
 * summary. A test's stdout and stderr (and its children's) go to a pipe,
 * shown on the runner's stderr after "  | ", so that nothing a test prints
 * can be taken for one of those. `PROGRAM --list` prints the test names. */
#ifndef LF_TEST_RUNNER_H
#define LF_TEST_RUNNER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

struct lf_test {
	const char *name;
	void (*fn)(void);
	unsigned timeout_s; /* 0 means the default (30 s) */
	const char *xfail;  /* a known fault that makes this test fail, "(issue N)" */
};

/* Runs the tests named on the command line (all without names); prints one
 * line per test and "N passed, N failed, N skipped[, N xfailed]". Returns
 * 0 when nothing failed, 1 when something did, 2 for an unknown name.
 * With the one argument --list, prints each test's name and runs none. */
int lf_test_main(const struct lf_test *tests, int argc, char **argv);

/* Ends the running test as skipped, with the reason on stderr and to the
 * runner. Only for what the machine lacks (see test/skips.allow). */
void lf_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define LF_SKIP(...) lf_test_skip(__VA_ARGS__)

#define ASSERT(c) do { if (!(c)) { \
	fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #c); abort(); } } while (0)

#define ASSERT_CMP(a, op, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
	if (!(a_ op b_)) { fprintf(stderr, "%s:%d: %s %s %s: %lld vs %lld (errno %d %s)\n", \
		__FILE__, __LINE__, #a, #op, #b, a_, b_, errno, strerror(errno)); abort(); } } while (0)
#define ASSERT_EQ(a, b) ASSERT_CMP(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_CMP(a, !=, b)
#define ASSERT_GE(a, b) ASSERT_CMP(a, >=, b)
#define ASSERT_GT(a, b) ASSERT_CMP(a, >, b)
#define ASSERT_LE(a, b) ASSERT_CMP(a, <=, b)
#define ASSERT_LT(a, b) ASSERT_CMP(a, <, b)
#define ASSERT_STREQ(a, b) do { const char *a_ = (a), *b_ = (b); \
	if (strcmp(a_, b_)) { fprintf(stderr, "%s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__, a_, b_); abort(); } } while (0)

#endif
