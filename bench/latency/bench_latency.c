/* `loopfast bench latency`: the seeds' latency table, measured on Linux.
 *
 * Parses the options, runs every row (style x transport) once per repeat,
 * interleaving the rows so that a noisy moment of the machine spreads over
 * all of them, then prints the table, writes the JSON and runs the plot
 * script. See latency.h for the other files and
 * man/loopfast-bench-latency.1 for the method.
 */
#include "cmdline.h"
#include "latency.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: loopfast bench latency [--styles LIST] [--transports LIST] [--size BYTES]\n"
	"         [--count N] [--warmup N] [--repeat N] [--no-pin] [--timeout SEC]\n"
	"         [--spin-us N] [--no-spin-backoff] [--compare-sockperf] [--json FILE]\n"
	"         [--plot FILE.png]\n"
	"styles: block, epoll, spin, uring, uring-poll (default: all)\n"
	"transports: tcp, fastpath, fastpath-spin, uds, shm (default: all)\n";

/* The first two CPUs this process may run on; pinning is off with fewer. */
static void pick_cpus(struct lat_opts *o)
{
	cpu_set_t set;
	int n = 0;

	o->cpu[0] = o->cpu[1] = -1;
	if (!o->pin || sched_getaffinity(0, sizeof(set), &set) < 0) {
		o->pin = false;
		return;
	}
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &set))
			o->cpu[n++] = c;
	if (n < 2) {
		o->pin = false;
		o->cpu[0] = o->cpu[1] = -1;
	}
}

static char self_exe[PATH_MAX + 16];

static int parse_opts(int argc, char **argv, struct lat_opts *o)
{
	unsigned long long v;
	int err;

	*o = (struct lat_opts){
		.styles = (1u << LAT_NSTYLES) - 1, .transports = (1u << LAT_NTRANSPORTS) - 1,
		.size = 64, .count = 10000, .warmup = 1000, .repeat = 3, .pin = true,
		.timeout_s = 30, .spin_us = 50, .spin_backoff = true,
	};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val;
		char name[64];

		if (!strcmp(a, "--no-pin")) {
			o->pin = false;
			continue;
		}
		if (!strcmp(a, "--no-spin-backoff")) {
			o->spin_backoff = false;
			continue;
		}
		if (!strcmp(a, "--compare-sockperf")) {
			o->compare_sockperf = true;
			continue;
		}
		if ((err = lf_cli_next_opt(argc, argv, &i, usage_text, name, sizeof(name), &val)))
			return err;
		if (!strcmp(name, "--styles"))
			err = lf_cli_parse_list(name, "style", val, lat_style_names, LAT_NSTYLES, &o->styles);
		else if (!strcmp(name, "--transports"))
			err = lf_cli_parse_list(name, "transport", val, lat_transport_names, LAT_NTRANSPORTS, &o->transports);
		else if (!strcmp(name, "--size"))
			err = lf_cli_parse_uint(name, val, 8, LAT_MAX_SIZE, &v) ?: (o->size = v, 0);
		else if (!strcmp(name, "--count"))
			err = lf_cli_parse_uint(name, val, 1, LAT_MAX_COUNT, &v) ?: (o->count = (unsigned)v, 0);
		else if (!strcmp(name, "--warmup"))
			err = lf_cli_parse_uint(name, val, 0, LAT_MAX_COUNT, &v) ?: (o->warmup = (unsigned)v, 0);
		else if (!strcmp(name, "--repeat"))
			err = lf_cli_parse_uint(name, val, 1, LAT_MAX_REPEAT, &v) ?: (o->repeat = (unsigned)v, 0);
		else if (!strcmp(name, "--timeout"))
			err = lf_cli_parse_uint(name, val, 1, 3600, &v) ?: (o->timeout_s = (unsigned)v, 0);
		else if (!strcmp(name, "--spin-us"))
			err = lf_cli_parse_uint(name, val, 1, 1000000, &v) ?: (o->spin_us = (unsigned)v, 0);
		else if (!strcmp(name, "--json"))
			o->json_path = val, err = 0;
		else if (!strcmp(name, "--plot"))
			o->plot_path = val, err = 0;
		else
			return lf_cli_error("unknown option '%s' (try 'loopfast bench latency --help')", name);
		if (err)
			return err;
	}
	pick_cpus(o);
	snprintf(self_exe, sizeof(self_exe), "%s/loopfast", lf_cli_selfdir());
	o->self_exe = self_exe;
	return 0;
}

static int write_json(const char *path, const struct lat_report *rep)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return lf_cli_error("--json: cannot write %s: %s", path, strerror(errno));
	lat_print_json(f, rep);
	if (fclose(f))
		return lf_cli_error("--json: cannot write %s: %s", path, strerror(errno));
	return 0;
}

/* Runs one repeat of one row and adds its figures and samples. The CDF
 * pool keeps every k-th sample so that it holds at most LAT_POOL_MAX of all
 * repeats together (all of them at the defaults). */
static void run_one(const struct lat_opts *o, struct lat_row *w, uint64_t *ns, double *us)
{
	struct lat_side side[2];
	char reason[LAT_REASON_LEN], note[LAT_REASON_LEN];
	int st = lat_run_row(o, w->style, w->transport, ns, side, reason, note);
	size_t total = (size_t)o->count * o->repeat, step = (total + LAT_POOL_MAX - 1) / LAT_POOL_MAX;

	if (note[0] && !w->note[0])
		snprintf(w->note, sizeof(w->note), "%s", note);
	if (st != LAT_OK) {
		w->status = (enum lat_status)st;
		snprintf(w->reason, sizeof(w->reason), "%s", reason);
		return;
	}
	for (unsigned i = 0; i < o->count; i++)
		us[i] = (double)ns[i] / 1000.0;
	struct lat_figures *f = &w->rep[w->nrep++];

	for (size_t i = 0; i < o->count && w->npool < LAT_POOL_MAX; i += step)
		w->pool[w->npool++] = us[i];
	lat_sort(us, o->count);
	lat_figures_from(us, o->count, f);
	f->rt_per_s = side[0].wall_s > 0 ? o->count / side[0].wall_s : 0;
	f->cpu_per_rt = (side[0].cpu_s + side[1].cpu_s) * 1e6 / o->count;
}

/* The rows asked for, in style order and transport order within a style;
 * sets *dropped when a combination that makes no sense was left out. */
static int build_rows(const struct lat_opts *o, struct lat_report *rep, bool *dropped)
{
	size_t total = (size_t)o->count * o->repeat;

	rep->rows = calloc(LAT_NSTYLES * LAT_NTRANSPORTS, sizeof(*rep->rows));
	if (!rep->rows)
		return lf_cli_error("out of memory");
	for (int s = 0; s < LAT_NSTYLES; s++)
		for (int t = 0; t < LAT_NTRANSPORTS; t++) {
			if (!(o->styles & (1u << s)) || !(o->transports & (1u << t)))
				continue;
			if (lat_combo_na(s, t)) {
				*dropped = true;
				continue;
			}
			struct lat_row *w = &rep->rows[rep->nrows++];

			*w = (struct lat_row){ .style = s, .transport = t };
			w->rep = calloc(o->repeat, sizeof(*w->rep));
			w->pool = malloc((total < LAT_POOL_MAX ? total : LAT_POOL_MAX) * sizeof(double));
			if (!w->rep || !w->pool)
				return lf_cli_error("out of memory");
		}
	if (!rep->nrows)
		return lf_cli_error("no row to run: shm runs with style spin only, fastpath-spin with block and epoll only");
	return 0;
}

static void free_rows(struct lat_report *rep)
{
	for (unsigned r = 0; rep->rows && r < rep->nrows; r++) {
		free(rep->rows[r].rep);
		free(rep->rows[r].pool);
	}
	free(rep->rows);
}

/* Every repeat runs every row (and sockperf, if asked), then the figures. */
static int measure(const struct lat_opts *o, struct lat_report *rep)
{
	uint64_t *ns = malloc(o->count * sizeof(*ns));
	double *us = malloc(o->count * sizeof(*us));

	if (!ns || !us) {
		free(ns);
		free(us);
		return lf_cli_error("out of memory for %u samples", o->count);
	}
	lat_machine_info(&rep->machine);
	if (o->compare_sockperf)
		lat_sockperf_init(rep);
	/* sockperf runs right after the block rows it is compared with (they
	 * come first), so that both see the same moment of a noisy machine. */
	unsigned sp_after = rep->nrows - 1;

	for (unsigned r = 0; r < rep->nrows; r++)
		if (rep->rows[r].style == LAT_BLOCK)
			sp_after = r;
	for (unsigned k = 0; k < o->repeat; k++) {
		fprintf(stderr, "bench latency: repeat %u/%u, %u rows\n", k + 1, o->repeat, rep->nrows);
		for (unsigned r = 0; r < rep->nrows; r++) {
			if (rep->rows[r].status == LAT_OK)
				run_one(o, &rep->rows[r], ns, us);
			if (o->compare_sockperf && r == sp_after)
				lat_sockperf_run(o, rep);
		}
	}
	free(ns);
	free(us);
	for (unsigned r = 0; r < rep->nrows; r++) {
		struct lat_row *w = &rep->rows[r];

		if (w->status != LAT_OK)
			continue;
		lat_aggregate(w);
		lat_cdf(w);
		w->cdf[w->ncdf - 1][1] = w->hi.max; /* the true maximum, pool or not */
	}
	lat_compare(rep);
	lat_compare_repeats(rep);
	if (o->compare_sockperf)
		lat_sockperf_finish(rep);
	return 0;
}

static int output(const struct lat_opts *o, const struct lat_report *rep, bool dropped)
{
	int err;

	if (lf_cli_json) {
		lat_print_json(stdout, rep);
	} else {
		lat_print_table(stdout, rep);
		if (dropped)
			printf("not run (n/a): shm with styles other than spin, fastpath-spin with styles other than "
			       "block and epoll (see loopfast-bench-latency(1))\n");
		if (o->compare_sockperf)
			lat_sockperf_print(stdout, rep);
	}
	fflush(stdout);
	if (o->json_path && (err = write_json(o->json_path, rep)))
		return err;
	if (!o->plot_path)
		return 0;

	char tmp[] = "/tmp/loopfast-latency-XXXXXX.json";
	const char *json = o->json_path;

	if (!json) {
		int fd = mkstemps(tmp, 5);

		if (fd < 0)
			return lf_cli_error("--plot: cannot create a temporary file: %s", strerror(errno));
		close(fd);
		json = tmp;
		if ((err = write_json(tmp, rep))) {
			unlink(tmp);
			return err;
		}
	}
	err = lf_cli_run_script("latency/plot_latency.py", json, o->plot_path);
	if (json == tmp)
		unlink(tmp);
	return err;
}

int cmd_bench_latency(int argc, char **argv)
{
	struct lat_opts o;
	struct lat_report rep = { .opts = &o, .base = -1 };
	bool dropped = false;
	int err = parse_opts(argc, argv, &o);

	if (err)
		return err < 0 ? 0 : err;
	err = build_rows(&o, &rep, &dropped);
	if (!err)
		err = measure(&o, &rep);
	if (!err)
		err = output(&o, &rep, dropped);
	for (unsigned r = 0; !err && r < rep.nrows; r++)
		if (rep.rows[r].status == LAT_FAILED)
			err = 1;
	free_rows(&rep);
	return err;
}
