#include "runner.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs one test in a child so that a crash, hang or leaked state cannot
 * affect the others. The parent enforces the timeout (a test may install
 * its own SIGALRM handler) and kills a child that outlives it. */
static int run_one(const struct lf_test *t)
{
	unsigned timeout = t->timeout_s ? t->timeout_s : 30;
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		t->fn();
		exit(0);
	}
	for (unsigned ms = 0;; ms += 10) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (ms >= timeout * 1000) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fprintf(stderr, "  timed out after %us\n", timeout);
			return -1;
		}
		usleep(10000);
	}
	if (WIFEXITED(st))
		return WEXITSTATUS(st) == 77 ? 77 : WEXITSTATUS(st);
	fprintf(stderr, "  killed by signal %d\n", WTERMSIG(st));
	return -1;
}

int lf_test_main(const struct lf_test *tests, int argc, char **argv)
{
	int passed = 0, failed = 0, skipped = 0;

	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	for (const struct lf_test *t = tests; t->name; t++) {
		if (argc > 1 && strcmp(argv[1], t->name))
			continue;
		int r = run_one(t);
		if (r == 0) {
			passed++;
			printf("ok   %s\n", t->name);
		} else if (r == 77) {
			skipped++;
			printf("skip %s\n", t->name);
		} else {
			failed++;
			printf("FAIL %s\n", t->name);
		}
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}
