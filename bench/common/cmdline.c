/* What the command and the benchmarks share (cmdline.h): the global --json
 * flag, the one error printer that honours it, the option parsers, where
 * the running executable and the benchmarks' scripts live. Nothing here
 * calls a subcommand or a benchmark, so both can call it. */
#include "cmdline.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool lf_cli_json;

int lf_cli_error(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (lf_cli_json) {
		printf("{\"error\": \"");
		for (const char *p = msg; *p; p++)
			if (*p == '"' || *p == '\\')
				printf("\\%c", *p);
			else if ((unsigned char)*p >= 0x20)
				putchar(*p);
		printf("\"}\n");
	} else {
		fprintf(stderr, "loopfast: %s\n", msg);
	}
	return 2;
}

const char *lf_cli_selfdir(void)
{
	static char dir[PATH_MAX];
	ssize_t n;

	if (dir[0])
		return dir;
	n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0)
		return strcpy(dir, ".");
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	return dir;
}

/* Finds a benchmark's script, rel = "<bench>/<file>", in the source tree
 * next to a build (<selfdir>/../bench/) or where `make install` puts it
 * (<selfdir>/../share/loopfast/bench/). Returns 0 or -ENOENT. */
int lf_cli_find_script(const char *rel, char *path, size_t len)
{
	static const char *const where[] = { "../bench", "../share/loopfast/bench" };

	for (unsigned i = 0; i < sizeof(where) / sizeof(where[0]); i++)
		if (snprintf(path, len, "%s/%s/%s", lf_cli_selfdir(), where[i], rel) < (int)len &&
		    access(path, R_OK) == 0)
			return 0;
	path[0] = '\0';
	return -ENOENT;
}

int lf_cli_parse_uint(const char *opt, const char *s, unsigned long long lo, unsigned long long hi,
		      unsigned long long *out)
{
	char *end;

	errno = 0;
	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return lf_cli_error("%s needs a number from %llu to %llu, got '%s'", opt, lo, hi, s ? s : "");
	unsigned long long v = strtoull(s, &end, 10);

	if (errno || *end || v < lo || v > hi)
		return lf_cli_error("%s needs a number from %llu to %llu, got '%s'", opt, lo, hi, s);
	*out = v;
	return 0;
}

int lf_cli_parse_uints(const char *opt, const char *s, unsigned long long lo, unsigned long long hi,
		       unsigned long long *out, unsigned max, unsigned *n)
{
	char buf[256], *save = NULL;
	unsigned k = 0;

	if (!s || strlen(s) >= sizeof(buf))
		return lf_cli_error("%s needs a comma-separated list of numbers", opt);
	strcpy(buf, s);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (k == max)
			return lf_cli_error("%s takes at most %u numbers", opt, max);
		if (lf_cli_parse_uint(opt, t, lo, hi, &out[k++]))
			return 2;
	}
	if (!k)
		return lf_cli_error("%s needs at least one number", opt);
	*n = k;
	return 0;
}

int lf_cli_parse_seconds(const char *opt, const char *s, double lo, double hi, double *out)
{
	char *end;

	errno = 0;
	double v = s && *s ? strtod(s, &end) : 0;
	if (!s || !*s || errno || *end || !(v >= lo && v <= hi))
		return lf_cli_error("%s needs seconds from %g to %g, got '%s'", opt, lo, hi, s ? s : "");
	*out = v;
	return 0;
}

/* The step every benchmark's option loop starts with. --NAME=VALUE is
 * split here, so that each benchmark takes both spellings. */
int lf_cli_next_opt(int argc, char **argv, int *i, const char *usage, char *name, size_t size, const char **val)
{
	const char *a = argv[*i], *eq = strchr(a, '=');

	if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
		fputs(usage, stdout);
		return -1;
	}
	if (strncmp(a, "--", 2) || (eq ? (size_t)(eq - a) : strlen(a)) >= size)
		return lf_cli_error("unexpected argument '%s' (try 'loopfast bench %s --help')", a, argv[0]);
	if (eq) {
		snprintf(name, size, "%.*s", (int)(eq - a), a);
		*val = eq + 1;
		return 0;
	}
	snprintf(name, size, "%s", a);
	if (*i + 1 >= argc)
		return lf_cli_error("%s needs a value", name);
	*val = argv[++*i];
	return 0;
}

int lf_cli_parse_list(const char *opt, const char *what, const char *s, const char *const *names, unsigned n,
		      unsigned *mask)
{
	char buf[256], *save = NULL;

	if (!s || !*s || strlen(s) >= sizeof(buf))
		return lf_cli_error("%s needs a comma-separated list", opt);
	strcpy(buf, s);
	*mask = 0;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned i;

		for (i = 0; i < n && strcmp(tok, names[i]); i++)
			;
		if (i == n) {
			char all[128] = "";

			for (unsigned k = 0; k < n; k++)
				snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", k ? ", " : "", names[k]);
			return lf_cli_error("unknown %s '%s' in %s (one of: %s)", what, tok, opt, all);
		}
		*mask |= 1u << i;
	}
	if (!*mask)
		return lf_cli_error("%s needs at least one name", opt);
	return 0;
}

/* Runs `python3 bench/<rel> ARG1 ARG2` (a plot script) with its stdout on
 * our stderr, so that stdout keeps only the table or the JSON. */
int lf_cli_run_script(const char *rel, const char *arg1, const char *arg2)
{
	char script[PATH_MAX];
	int st;

	if (lf_cli_find_script(rel, script, sizeof(script)) < 0)
		return lf_cli_error("bench/%s not found next to %s; install loopfast or run from the build tree", rel,
				    lf_cli_selfdir());
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(2, 1);
		execlp("python3", "python3", script, arg1, arg2, (char *)NULL);
		fprintf(stderr, "loopfast: cannot run python3: %s\n", strerror(errno));
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return lf_cli_error("%s %s %s failed (needs python3 with matplotlib)", script, arg1, arg2);
	return 0;
}
