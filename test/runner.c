#include "runner.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

/* In a test's child: where LF_SKIP writes its reason for the runner. */
static int skip_fd = -1;

void lf_test_skip(const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	fprintf(stderr, "skip: %s\n", reason);
	if (skip_fd >= 0 && write(skip_fd, reason, strlen(reason)) < 0)
		fprintf(stderr, "skip: cannot tell the runner: %s\n", strerror(errno));
	exit(77);
}

/* Runs one test in a child so that a crash, hang or leaked state cannot
 * affect the others. The parent enforces the timeout (a test may install
 * its own SIGALRM handler) and kills a child that outlives it. Returns the
 * child's exit status, 77 for a skip (its reason in `reason`), or -1. */
static int run_one(const struct lf_test *t, char *reason, size_t rlen)
{
	unsigned timeout = t->timeout_s ? t->timeout_s : 30;
	int p[2], st;
	pid_t pid;

	reason[0] = '\0';
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		skip_fd = p[1];
		t->fn();
		exit(0);
	}
	close(p[1]);
	for (unsigned ms = 0;; ms += 10) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			close(p[0]);
			return -1;
		}
		if (ms >= timeout * 1000) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			close(p[0]);
			fprintf(stderr, "  timed out after %us\n", timeout);
			return -1;
		}
		usleep(10000);
	}
	ssize_t n = read(p[0], reason, rlen - 1);
	reason[n > 0 ? n : 0] = '\0';
	close(p[0]);
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	fprintf(stderr, "  killed by signal %d\n", WTERMSIG(st));
	return -1;
}

static bool wanted(const char *name, int argc, char **argv)
{
	if (argc < 2)
		return true;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return true;
	return false;
}

int lf_test_main(const struct lf_test *tests, int argc, char **argv)
{
	int passed = 0, failed = 0, skipped = 0, xfailed = 0;
	char reason[512];

	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	for (int i = 1; i < argc; i++) {
		const struct lf_test *t = tests;
		while (t->name && strcmp(t->name, argv[i]))
			t++;
		if (!t->name) {
			fprintf(stderr, "%s: no test named '%s'\n", argv[0], argv[i]);
			return 2;
		}
	}
	for (const struct lf_test *t = tests; t->name; t++) {
		if (!wanted(t->name, argc, argv))
			continue;
		int r = run_one(t, reason, sizeof(reason));
		if (r == 77) {
			skipped++;
			printf("skip %s: %s\n", t->name, reason[0] ? reason : "(no reason given)");
		} else if (t->xfail && r != 0) {
			xfailed++;
			printf("xfail %s: %s\n", t->name, t->xfail);
		} else if (t->xfail) {
			failed++;
			printf("XPASS %s: %s\n", t->name, t->xfail);
			fprintf(stderr, "  passes, but is marked as an expected failure: remove the mark\n");
		} else if (r == 0) {
			passed++;
			printf("ok   %s\n", t->name);
		} else {
			failed++;
			printf("FAIL %s\n", t->name);
		}
	}
	if (xfailed)
		printf("%d passed, %d failed, %d skipped, %d xfailed\n", passed, failed, skipped, xfailed);
	else
		printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}
