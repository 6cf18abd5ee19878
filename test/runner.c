#include "runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <time.h>
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

/* A test's own output (its stdout and stderr, and its children's): read
 * from the pipe the child writes to and shown on the runner's stderr, each
 * line after "  | ", so that nothing a test prints can be taken for one of
 * the runner's lines (which start in the first column). */
struct relay {
	int fd;
	size_t len;
	char buf[4096];
};

static void relay_line(const char *s, size_t n)
{
	fprintf(stderr, "  | %.*s\n", (int)n, s);
}

/* Reads what is there (the read end is non-blocking); shows each whole
 * line, and a partial one when the buffer is full or `flush` is set.
 * Returns false at the end of the pipe (every writer gone). */
static bool relay_read(struct relay *r, bool flush)
{
	for (;;) {
		ssize_t n = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
		if (n > 0)
			r->len += (size_t)n;
		char *start = r->buf, *nl;
		while ((nl = memchr(start, '\n', r->len - (size_t)(start - r->buf)))) {
			relay_line(start, (size_t)(nl - start));
			start = nl + 1;
		}
		r->len -= (size_t)(start - r->buf);
		memmove(r->buf, start, r->len);
		if (r->len == sizeof(r->buf) || (n <= 0 && flush && r->len)) {
			relay_line(r->buf, r->len);
			r->len = 0;
		}
		if (n <= 0 && !(n < 0 && errno == EINTR))
			return n < 0;
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs one test in a child so that a crash, hang or leaked state cannot
 * affect the others. The parent enforces the timeout (a test may install
 * its own SIGALRM handler) and kills a child that outlives it. Returns the
 * child's exit status, 77 for a skip (its reason in `reason`), or -1 with
 * why in `reason` (timed out, killed by a signal). */
static int run_one(const struct lf_test *t, char *reason, size_t rlen)
{
	unsigned timeout = t->timeout_s ? t->timeout_s : 30;
	struct relay out = { .fd = -1 };
	int p[2], o[2], st;
	pid_t pid;

	reason[0] = '\0';
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		return -1;
	/* The child's end blocks (a test writing much must not lose output). */
	if (pipe2(o, O_CLOEXEC) || fcntl(o[0], F_SETFL, O_NONBLOCK)) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		close(o[0]);
		close(o[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		close(o[0]);
		if (dup2(o[1], STDOUT_FILENO) < 0 || dup2(o[1], STDERR_FILENO) < 0)
			_exit(70);
		skip_fd = p[1];
		t->fn();
		exit(0);
	}
	close(p[1]);
	close(o[1]);
	out.fd = o[0];
	int r = -1;
	bool open = true; /* until every writer of the pipe is gone */
	for (double end = now_s() + timeout;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			goto done;
		if (now_s() >= end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			snprintf(reason, rlen, "timed out after %u s", timeout);
			goto done;
		}
		struct pollfd pfd = { out.fd, POLLIN, 0 };
		if (!open)
			usleep(10000);
		else if (poll(&pfd, 1, 10) > 0)
			open = relay_read(&out, false);
	}
	ssize_t n = read(p[0], reason, rlen - 1);
	reason[n > 0 ? n : 0] = '\0';
	if (WIFEXITED(st))
		r = WEXITSTATUS(st);
	else
		snprintf(reason, rlen, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
done:
	/* What the child left in the pipe; a grandchild that still holds its
	 * end is not waited for. */
	relay_read(&out, true);
	close(o[0]);
	close(p[0]);
	return r;
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
	if (argc == 2 && !strcmp(argv[1], "--list")) {
		for (const struct lf_test *t = tests; t->name; t++)
			printf("%s\n", t->name);
		return 0;
	}
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
			if (r > 0)
				snprintf(reason, sizeof(reason), "exit status %d", r);
			printf("FAIL %s: %s\n", t->name, reason[0] ? reason : "the runner could not run it");
		}
	}
	if (xfailed)
		printf("%d passed, %d failed, %d skipped, %d xfailed\n", passed, failed, skipped, xfailed);
	else
		printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}
