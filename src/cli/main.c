/* `loopfast`: the global flags and the one dispatch table (one file per
 * subcommand, as bpftool does). `loopfast --help` and `loopfast bench
 * --help` are printed from the table, so a command cannot be run without
 * being listed. */
#include "cli.h"
#include "loopfast.h"

#include <stdio.h>
#include <string.h>

struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv); /* argv[0] is the name; NULL for a group */
	const char *args;                 /* its arguments, for the usage lines */
	const char *help;                 /* what it does, one line */
	const struct cmd *sub;            /* a group's commands (bench) */
};

#define CMD(n, f, a, h) { .name = n, .fn = f, .args = a, .help = h }

static const struct cmd bench_cmds[] = {
	CMD("latency", cmd_bench_latency, "[OPTIONS]",
	    "round-trip latency, completion styles x transports (loopfast-bench-latency(1))"),
	CMD("udp", cmd_bench_udp, "[OPTIONS]",
	    "UDP receive designs, plain sockets and Registered I/O (loopfast-bench-udp(1))"),
	CMD("app", cmd_bench_app, "APP [OPTIONS]",
	    "real servers and their clients: TCP, fast path, Unix sockets (loopfast-bench-app(1))"),
	CMD("connect", cmd_bench_connect, "[OPTIONS]", "connection setup rate per path (loopfast-bench-connect(1))"),
	CMD("stream", cmd_bench_stream, "[OPTIONS]",
	    "one connection's throughput by write size: tcp, fast, fast+shm, unix (loopfast-bench-stream(1))"),
	{ .name = NULL },
};

static const struct cmd cmds[] = {
	CMD("run", cmd_run, "[--spin-us N] [--exclude PORT|ADDR:PORT[,...]] [--] PROG [ARGS...]",
	    "run PROG with every loopback TCP socket opted in"),
	CMD("status", cmd_status, "[--all | --user NAME] [--pid PID]", "list fast-path listeners and connections"),
	{ .name = "bench", .args = "BENCHMARK [OPTIONS]", .help = "benchmarks", .sub = bench_cmds },
	{ .name = NULL },
};

/* Lists tab's commands, a group's as "GROUP NAME", each with its arguments
 * and, below, what it does. */
static void list(FILE *f, const struct cmd *tab, const char *group)
{
	for (const struct cmd *c = tab; c->name; c++)
		if (c->sub)
			list(f, c->sub, c->name);
		else
			fprintf(f, "  %s%s%s %s\n      %s\n", group ? group : "", group ? " " : "", c->name, c->args,
				c->help);
}

static int usage(const struct cmd *group)
{
	if (group) {
		printf("usage: loopfast [--json] %s %s\n\n%s:\n", group->name, group->args, group->help);
		list(stdout, group->sub, group->name);
		printf("\n'loopfast %s NAME --help' shows its options.\n", group->name);
	} else {
		printf("usage: loopfast [--json] COMMAND [ARGS...]\n"
		       "       loopfast --help | --version\n\ncommands:\n");
		list(stdout, cmds, NULL);
		printf("\n'loopfast COMMAND --help' shows its options; see loopfast(1).\n");
	}
	return 0;
}

/* "a, b or c": the names of tab's commands. */
static const char *names(const struct cmd *tab, char *buf, size_t len)
{
	size_t n = 0, k = 0;

	while (tab[n].name)
		n++;
	buf[0] = '\0';
	for (; k < n; k++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", k == 0 ? "" : k + 1 < n ? ", " : " or ",
			 tab[k].name);
	return buf;
}

/* Runs the command argv[0] names in tab (the commands of group, or the
 * top level when group is NULL); a group dispatches its argv[1] in turn. */
static int dispatch(const struct cmd *tab, const struct cmd *group, int argc, char **argv)
{
	char all[128];

	for (const struct cmd *c = tab; c->name; c++) {
		if (strcmp(c->name, argv[0]))
			continue;
		if (!c->sub)
			return c->fn(argc, argv);
		if (argc < 2)
			return lf_cli_error("%s needs one of: %s (try 'loopfast %s --help')", c->name,
					    names(c->sub, all, sizeof(all)), c->name);
		if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
			return usage(c);
		return dispatch(c->sub, c, argc - 1, argv + 1);
	}
	if (group)
		return lf_cli_error("unknown %s command '%s' (one of: %s)", group->name, argv[0],
				    names(tab, all, sizeof(all)));
	return lf_cli_error("unknown command '%s' (try 'loopfast --help')", argv[0]);
}

int main(int argc, char **argv)
{
	char all[128];
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--json"))
			lf_cli_json = true;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return usage(NULL);
		else if (!strcmp(argv[i], "--version"))
			return printf("loopfast %d.%d.%d\n", LF_VERSION_MAJOR, LF_VERSION_MINOR, LF_VERSION_PATCH) < 0;
		else
			return lf_cli_error("unknown option '%s' (try 'loopfast --help')", argv[i]);
	}
	if (i == argc)
		return lf_cli_error("no command given: %s (try 'loopfast --help')", names(cmds, all, sizeof(all)));
	return dispatch(cmds, NULL, argc - i, argv + i);
}
