/* `loopfast bench connect`: the table and the JSON of the runs. Each row is
 * the median connection rate over the repeats with its spread, the ratio to
 * plain TCP at the same number of clients (measured in the same run), and
 * for every TCP row the share of sampled connections (both ends) that
 * really took the fast path, as the kernel shows them. */
#include "cmdline.h"
#include "connect.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct summary {
	double median, min, max, fast_share;
	uint64_t errors, flood, accepted, server_cpu_us;
	int err;
};

static struct summary summarize(const struct conn_row *row)
{
	double v[CONN_MAX_REPEAT];
	struct summary s = { .fast_share = -1 };
	unsigned n = 0;
	uint64_t sampled = 0, fast = 0;

	for (unsigned i = 0; i < row->n; i++) {
		const struct conn_result *r = &row->runs[i];
		if (r->err) {
			s.err = r->err;
			continue;
		}
		v[n++] = r->rate;
		sampled += r->sampled;
		fast += r->fast;
		s.errors += r->errors;
		s.flood += r->flood;
		s.accepted += r->accepted;
		s.server_cpu_us += r->server_cpu_us;
	}
	if (!n)
		return s;
	qsort(v, n, sizeof(v[0]), cmp_double);
	s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	s.min = v[0];
	s.max = v[n - 1];
	if (sampled)
		s.fast_share = (double)fast / (double)sampled;
	return s;
}

static double tcp_median(const struct conn_row *rows, unsigned nrows, unsigned clients)
{
	for (unsigned i = 0; i < nrows; i++)
		if (rows[i].path == CONN_TCP && rows[i].clients == clients)
			return summarize(&rows[i]).median;
	return 0;
}

/* The same path without the flood: what a flood row is compared with. */
static double unflooded_median(const struct conn_row *rows, unsigned nrows, const struct conn_row *r)
{
	int want = CONN_FAST_SERVER(r->path) ? CONN_FAST : CONN_TCP;
	for (unsigned i = 0; i < nrows; i++)
		if (rows[i].path == want && rows[i].clients == r->clients)
			return summarize(&rows[i]).median;
	return 0;
}

void conn_report(const struct conn_row *rows, unsigned nrows, const struct conn_opts *o)
{
	FILE *f = lf_cli_json ? stderr : stdout;

	fprintf(f, "loopfast bench connect: connect, 1-byte request, 1-byte response, close; %g s per run after "
		   "%g s of warm-up, %u repeats (median, min-max)\n\n", o->time_s, o->warmup_s, o->repeat);
	fprintf(f, "%7s  %-12s %10s %-23s %7s %6s %7s\n", "clients", "path", "conn/s", " (min-max)", "x tcp",
		"fast", "errors");
	for (unsigned i = 0; i < nrows; i++) {
		struct summary s = summarize(&rows[i]);
		double base = tcp_median(rows, nrows, rows[i].clients);
		char range[32], ratio[16] = "-", share[16] = "-";
		if (s.err && !s.median) {
			fprintf(f, "%7u  %-12s failed: %s\n", rows[i].clients, conn_path_names[rows[i].path],
				strerror(-s.err));
			continue;
		}
		snprintf(range, sizeof(range), " (%.0f-%.0f)", s.min, s.max);
		if (base > 0)
			snprintf(ratio, sizeof(ratio), "%.2f", s.median / base);
		if (s.fast_share >= 0)
			snprintf(share, sizeof(share), "%.0f%%", 100 * s.fast_share);
		fprintf(f, "%7u  %-12s %10.0f %-23s %7s %6s %7llu", rows[i].clients, conn_path_names[rows[i].path],
			s.median, range, ratio, share, (unsigned long long)s.errors);
		bool attacked = CONN_FLOODED(rows[i].path) || CONN_PARKED(rows[i].path);
		double quiet = attacked ? unflooded_median(rows, nrows, &rows[i]) : 0;
		if (quiet > 0)
			fprintf(f, "  %.2f of unflooded", s.median / quiet);
		if (s.flood)
			fprintf(f, CONN_PARKED(rows[i].path) ? "  (%llu marked connections)" : "  (%llu junk hellos)",
				(unsigned long long)s.flood);
		if (s.accepted && rows[i].path != CONN_UNIX)
			fprintf(f, "  server %.0f us CPU/accept", (double)s.server_cpu_us / (double)s.accepted);
		fputc('\n', f);
	}
	fprintf(f, "\nfast: share of sampled connections (1 in 8, client and server ends) that took the fast path, "
		   "from kernel state; "
		   "client-only: the client opted in, the server did not (plain TCP expected); +flood: another uid "
		   "floods the rendezvous with junk hellos from a CPU of its own (tcp+flood: what that CPU use costs "
		   "plain TCP); +park: another uid parks hellos in one stash bucket of protocol 3's hash and makes "
		   "1000 connections a second marked as having a hello, reset at once (issue 19); tcp+unix: a TCP "
		   "handshake, closed, then the bytes over a Unix connection (the floor of a fast path that keeps the "
		   "SYN); server us CPU/accept: "
		   "the server's CPU time over the connections it accepted, the attacker's included\n");
}

int conn_write_json(const struct conn_row *rows, unsigned nrows, const struct conn_opts *o)
{
	bool out = !strcmp(o->json_path, "-");
	FILE *f = out ? stdout : fopen(o->json_path, "w");
	struct utsname u;

	if (!f)
		return lf_cli_error("--json: cannot write %s: %s", o->json_path, strerror(errno));
	uname(&u);
	fprintf(f, "{\n  \"benchmark\": \"connect\",\n  \"kernel\": \"%s\",\n  \"config\": {\"time_s\": %g, "
		   "\"warmup_s\": %g, \"repeat\": %u},\n  \"rows\": [\n", u.release, o->time_s, o->warmup_s, o->repeat);
	for (unsigned i = 0; i < nrows; i++) {
		const struct conn_row *r = &rows[i];
		struct summary s = summarize(r);
		double base = tcp_median(rows, nrows, r->clients);
		fprintf(f, "    {\"path\": \"%s\", \"clients\": %u, \"median\": %.1f, \"min\": %.1f, \"max\": %.1f, "
			   "\"vs_tcp\": %.4f, \"vs_unflooded\": %.4f, \"fast_share\": %.4f, \"errors\": %llu, "
			   "\"junk_hellos\": %llu, \"server_cpu_us_per_accept\": %.1f, \"runs\": [",
			conn_path_names[r->path], r->clients, s.median, s.min, s.max, base > 0 ? s.median / base : 0,
			CONN_FLOODED(r->path) && unflooded_median(rows, nrows, r) > 0 ? s.median / unflooded_median(rows, nrows, r) : 0,
			s.fast_share, (unsigned long long)s.errors, (unsigned long long)s.flood,
			s.accepted ? (double)s.server_cpu_us / (double)s.accepted : 0);
		for (unsigned k = 0; k < r->n; k++)
			fprintf(f, "%s%.1f", k ? ", " : "", r->runs[k].rate);
		fprintf(f, "]}%s\n", i + 1 < nrows ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	if (!out && fclose(f))
		return lf_cli_error("--json: writing %s: %s", o->json_path, strerror(errno));
	return 0;
}
