#include "cmdline.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * `loopfast bench app ...` is orchestration (install packages, start servers,
 * run their benchmark clients, plot), which lives in bench/apps/apps.py. This finds
 * the script next to the executable -- <selfdir>/../bench/apps in the build tree,
 * <selfdir>/../share/loopfast/bench/apps when installed -- and execs python3 on it
 * with our arguments. LOOPFAST_BIN tells the script which loopfast to use for
 * `loopfast run` and `loopfast status`. The global --json flag becomes
 * `--json -` (the JSON on stdout, the tables on stderr).
 */
int cmd_bench_app(int argc, char **argv)
{
	const char *dir = lf_cli_selfdir();
	char script[PATH_MAX], self[PATH_MAX + 16];
	char **args;
	int n = 0;

	if (lf_cli_find_script("apps/apps.py", script, sizeof(script)) < 0)
		return lf_cli_error("bench app: apps.py not found in %s/../bench/apps or %s/../share/loopfast/bench/apps; "
				    "reinstall loopfast", dir, dir);
	snprintf(self, sizeof(self), "%s/loopfast", dir);
	if (setenv("LOOPFAST_BIN", self, 1) != 0)
		return lf_cli_error("bench app: setenv: %s", strerror(errno));

	args = calloc((size_t)argc + 4, sizeof(*args));
	if (!args)
		return lf_cli_error("bench app: out of memory");
	args[n++] = "python3";
	args[n++] = script;
	for (int i = 1; i < argc; i++)
		args[n++] = argv[i];
	if (lf_cli_json) {
		args[n++] = "--json";
		args[n++] = "-";
	}
	args[n] = NULL;
	fflush(NULL);
	execvp(args[0], args);
	int err = errno;
	free(args);
	return lf_cli_error("bench app: cannot run python3: %s (install python3)", strerror(err));
}
