/* `loopfast bench connect`: options and the interleaved runs. See
 * connect.h for the files and man/loopfast-bench-connect.1 for the method. */
#include "cmdline.h"
#include "connect.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: loopfast bench connect [--paths LIST] [--clients N[,N...]] [--time SEC]\n"
	"         [--warmup SEC] [--repeat N] [--json FILE] [--plot FILE.png]\n"
	"paths: tcp, fast, client-only, unix, tcp+flood, fast+flood (default: these), tcp+park, fast+park, seccomp\n"
	"clients: concurrent connections in flight (default: 1,10,100,1000)\n";

int cmd_bench_connect(int argc, char **argv)
{
	struct conn_opts o = { .paths = CONN_DEFAULT_PATHS, .nlevels = 4, .time_s = 1, .warmup_s = 0.2, .repeat = 3 };
	unsigned long long v, list[CONN_MAX_LEVELS] = { 1, 10, 100, 1000 }; /* --clients */

	for (int i = 1; i < argc; i++) {
		char a[64];
		const char *val;
		int err = lf_cli_next_opt(argc, argv, &i, usage_text, a, sizeof(a), &val);
		if (err)
			return err < 0 ? 0 : err;
		if (!strcmp(a, "--paths"))
			err = lf_cli_parse_list(a, "path", val, conn_path_names, CONN_NPATHS, &o.paths);
		else if (!strcmp(a, "--clients"))
			err = lf_cli_parse_uints(a, val, 1, CONN_MAX_CLIENTS, list, CONN_MAX_LEVELS, &o.nlevels);
		else if (!strcmp(a, "--time"))
			err = lf_cli_parse_seconds(a, val, 0.05, 600, &o.time_s);
		else if (!strcmp(a, "--warmup"))
			err = lf_cli_parse_seconds(a, val, 0, 60, &o.warmup_s);
		else if (!strcmp(a, "--repeat"))
			err = lf_cli_parse_uint(a, val, 1, CONN_MAX_REPEAT, &v) ?: (o.repeat = (unsigned)v, 0);
		else if (!strcmp(a, "--json"))
			o.json_path = val, err = 0;
		else if (!strcmp(a, "--plot"))
			o.plot_path = val, err = 0;
		else
			return lf_cli_error("unknown option '%s' (try 'loopfast bench connect --help')", a);
		if (err)
			return err;
	}
	for (unsigned k = 0; k < o.nlevels; k++)
		o.levels[k] = (unsigned)list[k];
	if (lf_cli_json && !o.json_path)
		o.json_path = "-"; /* `loopfast --json bench connect`: the JSON on stdout */
	if (o.plot_path && (!o.json_path || !strcmp(o.json_path, "-")))
		return lf_cli_error("--plot needs --json FILE (the plot is drawn from it)");

	struct conn_row rows[CONN_MAX_LEVELS * CONN_NPATHS];
	unsigned nrows = 0;
	for (unsigned l = 0; l < o.nlevels; l++)
		for (int p = 0; p < CONN_NPATHS; p++)
			if (o.paths & (1u << p))
				rows[nrows++] = (struct conn_row){ .path = p, .clients = o.levels[l] };
	bool progress = !lf_cli_json && isatty(2);
	/* Repeats outermost: a noisy moment of the machine hits every row. */
	for (unsigned rep = 0; rep < o.repeat; rep++) {
		for (unsigned k = 0; k < nrows; k++) {
			struct conn_row *row = &rows[k];
			if (progress)
				fprintf(stderr, "\rrepeat %u/%u: %-12s %4u clients   ", rep + 1, o.repeat,
					conn_path_names[row->path], row->clients);
			conn_run(row->path, row->clients, &o, &row->runs[row->n++]);
		}
	}
	if (progress)
		fprintf(stderr, "\r%60s\r", "");
	conn_report(rows, nrows, &o);
	if (o.json_path && conn_write_json(rows, nrows, &o))
		return 2;
	if (o.plot_path && lf_cli_run_script("connect/plot_connect.py", o.json_path, o.plot_path))
		return 1;
	for (unsigned k = 0; k < nrows; k++)
		for (unsigned i = 0; i < rows[k].n; i++)
			if (rows[k].runs[i].err)
				return 1; /* the table says which run failed, and why */
	return 0;
}
