/* What the loopfast command and the benchmarks it runs share: the global
 * --json flag, the one error printer that honours it, the option parsers,
 * finding and running a benchmark's script, and the benchmarks' entry
 * points (which src/cli/main.c's dispatch table calls). It lives in
 * bench/common, not src/cli, so that a benchmark includes nothing of the
 * command's own headers and the command calls the benchmarks, never the
 * reverse. */
#ifndef LF_CMDLINE_H
#define LF_CMDLINE_H

#include <stdbool.h>
#include <stddef.h>

extern bool lf_cli_json; /* the global --json flag */

/* Prints one line naming what failed (JSON object when --json) and returns 2,
 * the exit status for bad input and failures. */
int lf_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Directory of the running loopfast executable (for finding the preload
 * library and bench/ scripts). */
const char *lf_cli_selfdir(void);

/* Finds bench/<rel> next to the build tree or in the installed share
 * directory. Returns 0 (path filled) or -ENOENT. */
int lf_cli_find_script(const char *rel, char *path, size_t len);

/* The option parsers of the command and every benchmark: a whole decimal
 * number within [lo, hi], and a comma-separated list of names (a bit per
 * name). Both print the error and return 2 on bad input, 0 otherwise. */
int lf_cli_parse_uint(const char *opt, const char *s, unsigned long long lo, unsigned long long hi,
		      unsigned long long *out);
int lf_cli_parse_list(const char *opt, const char *what, const char *s, const char *const *names, unsigned n,
		      unsigned *mask);
/* A comma-separated list of at most max whole numbers within [lo, hi]
 * into out[] and its length into *n: 0, or the error printer's 2. */
int lf_cli_parse_uints(const char *opt, const char *s, unsigned long long lo, unsigned long long hi,
		       unsigned long long *out, unsigned max, unsigned *n);
/* Seconds (a decimal number) within [lo, hi]: 0, or the error printer's 2. */
int lf_cli_parse_seconds(const char *opt, const char *s, double lo, double hi, double *out);

/* One option of a benchmark's command line at argv[*i] (argv[0]: the
 * benchmark's name): -h or --help prints usage and returns -1 (done);
 * "--NAME VALUE" or "--NAME=VALUE" fills name (size bytes) and *val, moves
 * *i past what it took and returns 0; anything else prints the error and
 * returns 2. Options without a value are the caller's to look for first. */
int lf_cli_next_opt(int argc, char **argv, int *i, const char *usage, char *name, size_t size, const char **val);

/* Runs python3 on bench/<rel> with two arguments (stdout to stderr);
 * 0 or the error printer's 2. */
int lf_cli_run_script(const char *rel, const char *arg1, const char *arg2);

/* Runs fn(arg) in a child under `loopfast run`'s seccomp supervisor
 * (src/cli/supervise.c, whole-process mode) and supervises it until it
 * ends: its exit code (`loopfast bench connect`'s seccomp row). */
int lf_cli_supervise_fn(void (*fn)(void *), void *arg);

/* The benchmarks' entry points: argv[0] is the benchmark's name. */
int cmd_bench_latency(int argc, char **argv);
int cmd_bench_udp(int argc, char **argv);
int cmd_bench_app(int argc, char **argv);
int cmd_bench_connect(int argc, char **argv);
int cmd_bench_stream(int argc, char **argv);

#endif
