/* `loopfast`: the global flags and the dispatch table (one file per
 * subcommand, as bpftool does). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

static const struct cmd cmds[] = {
	{ "run", cmd_run, "run [--spin-us N] [--exclude PORT|ADDR:PORT,...] [--] PROG [ARGS...]\n"
			  "                                       run PROG with every loopback TCP socket opted in" },
	{ "status", cmd_status, "status                               list fast-path listeners and connections" },
	{ "bench", cmd_bench, "bench latency|udp|app ...            benchmarks (see loopfast(1))" },
	{ NULL, NULL, NULL },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: loopfast [--json] COMMAND [ARGS...]\n\ncommands:\n");
	for (const struct cmd *c = cmds; c->name; c++)
		fprintf(f, "  %s\n", c->help);
}

int main(int argc, char **argv)
{
	int i = 1;

	lf_cli_argv0 = argv[0];
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--json"))
			lf_cli_json = true;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--version")) {
			printf("loopfast 0.1.0\n");
			return 0;
		} else {
			return lf_cli_error("unknown option '%s' (try 'loopfast --help')", argv[i]);
		}
	}
	if (i == argc) {
		usage(stderr);
		return 2;
	}
	for (const struct cmd *c = cmds; c->name; c++)
		if (!strcmp(c->name, argv[i]))
			return c->fn(argc - i, argv + i);
	return lf_cli_error("unknown command '%s' (try 'loopfast --help')", argv[i]);
}
