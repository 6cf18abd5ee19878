/* The loopfast command: one file per subcommand and a dispatch table (main.c). */
#ifndef LF_CLI_H
#define LF_CLI_H

#include <stdbool.h>
#include <stddef.h>

extern bool lf_cli_json;     /* the global --json flag */
extern const char *lf_cli_argv0;

/* Prints one line naming what failed (JSON object when --json) and returns 2,
 * the exit status for bad input and failures. */
int lf_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Directory of the running loopfast executable (for finding the preload
 * library and bench/ scripts). */
const char *lf_cli_selfdir(void);

/* Finds bench/<rel> next to the build tree or in the installed share
 * directory. Returns 0 (path filled) or -ENOENT. */
int lf_cli_find_script(const char *rel, char *path, size_t len);

/* Option parsing shared by the subcommands: a whole decimal number within
 * [lo, hi], and a comma-separated list of names (a bit per name). Both
 * print the error and return 2 on bad input, 0 otherwise. */
int lf_cli_parse_uint(const char *opt, const char *s, unsigned long long lo, unsigned long long hi,
		      unsigned long long *out);
int lf_cli_parse_list(const char *opt, const char *what, const char *s, const char *const *names, unsigned n,
		      unsigned *mask);
/* Runs python3 on bench/<rel> with two arguments (stdout to stderr);
 * 0 or the error printer's 2. */
int lf_cli_run_script(const char *rel, const char *arg1, const char *arg2);

int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_latency(int argc, char **argv);
int cmd_bench_udp(int argc, char **argv);
int cmd_bench_app(int argc, char **argv);
int cmd_bench_connect(int argc, char **argv);

#endif
