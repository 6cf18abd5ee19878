/* What every subcommand shares: the global --json flag, the one error
 * printer that honours it, and where the running executable lives. Nothing
 * here calls a subcommand, so subcommands and benchmarks can call it. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool lf_cli_json;
const char *lf_cli_argv0 = "loopfast";

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
	static const char *const where[] = { "%s/../bench/%s", "%s/../share/loopfast/bench/%s" };

	for (unsigned i = 0; i < sizeof(where) / sizeof(where[0]); i++)
		if (snprintf(path, len, where[i], lf_cli_selfdir(), rel) < (int)len && access(path, R_OK) == 0)
			return 0;
	path[0] = '\0';
	return -ENOENT;
}
