/* The latency benchmark's output: the table (like seed 000's), the JSON
 * document (schema "loopfast-bench-latency/1", described in
 * man/loopfast-bench-latency.1) and the machine description.
 */
#include "latency.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

const char *const lat_style_names[LAT_NSTYLES] = { "block", "epoll", "spin", "uring", "uring-poll" };
const char *const lat_transport_names[LAT_NTRANSPORTS] = { "tcp", "fastpath", "fastpath-spin", "uds", "shm",
							   "fastpath-shm", "fastpath-shm-spin" };

const char *lat_combo_na(enum lat_style s, enum lat_transport t)
{
	if (t == LAT_SHM && s != LAT_SPIN)
		return "shm has no kernel wake-up to wait on: it runs with style spin only";
	if ((t == LAT_FASTPATH_SPIN || t == LAT_FASTPATH_SHM_SPIN) && s != LAT_BLOCK && s != LAT_EPOLL)
		return "loopfast spins inside read/recv/epoll_wait: fastpath-spin runs with styles block and epoll only";
	if (t == LAT_FASTPATH_SHM && (s == LAT_URING || s == LAT_URING_POLL))
		return "io_uring bypasses the interposer: the shm tier's rings are not for it (docs/shm.md)";
	return NULL;
}

void lat_machine_info(struct lat_machine *m)
{
	struct utsname u;
	char line[512];
	FILE *f;
	time_t now = time(NULL);
	struct tm tm;

	memset(m, 0, sizeof(*m));
	strcpy(m->cpu_model, "unknown");
	f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !colon)
			continue;
		colon += 1 + (colon[1] == ' ');
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(m->cpu_model, sizeof(m->cpu_model), "%s", colon);
		break;
	}
	if (f)
		fclose(f);
	m->cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (uname(&u) == 0)
		snprintf(m->kernel, sizeof(m->kernel), "%s %s %s", u.sysname, u.release, u.machine);
	if (getloadavg(m->loadavg, 3) < 0)
		m->loadavg[0] = m->loadavg[1] = m->loadavg[2] = NAN;
	gmtime_r(&now, &tm);
	strftime(m->started, sizeof(m->started), "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Microseconds with three significant-ish digits: 0.118, 6.52, 57.3, 412. */
static const char *us(char *buf, double v)
{
	if (isnan(v))
		return strcpy(buf, "-");
	if (v < 1)
		sprintf(buf, "%.3f", v);
	else if (v < 10)
		sprintf(buf, "%.2f", v);
	else if (v < 1000)
		sprintf(buf, "%.1f", v);
	else
		sprintf(buf, "%.0f", v);
	return buf;
}

static const char *rate(char *buf, double v)
{
	long long n = llround(v);

	if (isnan(v))
		return strcpy(buf, "-");
	if (n >= 1000000)
		sprintf(buf, "%lld,%03lld,%03lld", n / 1000000, n / 1000 % 1000, n % 1000);
	else if (n >= 1000)
		sprintf(buf, "%lld,%03lld", n / 1000, n % 1000);
	else
		sprintf(buf, "%lld", n);
	return buf;
}

static const char *pct(char *buf, double v)
{
	if (isnan(v))
		return strcpy(buf, "-");
	sprintf(buf, "%.0f%%", v);
	return buf;
}

void lat_print_table(FILE *f, const struct lat_report *rep)
{
	const struct lat_opts *o = rep->opts;
	const struct lat_machine *m = &rep->machine;
	char a[32], b[32], c[32], d[32], e[32], g[32], h[32], i_[32], j[32], k[32], l[32], n[32];

	fprintf(f, "loopfast bench latency: %zu-byte ping-pong between two processes, %u round trips"
		   " after %u of warm-up, %u repeat%s%s\n", o->size, o->count, o->warmup, o->repeat,
		o->repeat > 1 ? "s (each figure the median over repeats)" : "", "");
	if (o->pin && o->cpu[0] >= 0)
		fprintf(f, "sender on CPU %d, echoer on CPU %d; ", o->cpu[0], o->cpu[1]);
	else
		fprintf(f, "not pinned; ");
	fprintf(f, "%s, %d CPUs, %s; load %.2f\n", m->cpu_model, m->cpus, m->kernel, m->loadavg[0]);
	fprintf(f, "round-trip times in microseconds; jitter = standard deviation; CPU/RT = CPU time of both processes per round trip\n\n");
	fprintf(f, "%-11s %-14s %8s %8s %-15s %8s %8s %8s %8s %10s %8s %8s %8s\n", "style", "transport", "mean",
		"p50", "p50 range", "p99", "p99.9", "max", "jitter", "RT/s", "lat.red", "jit.red", "CPU/RT");
	for (unsigned r = 0; r < rep->nrows; r++) {
		const struct lat_row *w = &rep->rows[r];
		char range[40];

		fprintf(f, "%-11s %-14s ", lat_style_names[w->style], lat_transport_names[w->transport]);
		if (w->status != LAT_OK) {
			fprintf(f, "%s: %s\n", w->status == LAT_UNAVAILABLE ? "unavailable" : "failed", w->reason);
			continue;
		}
		if (w->nrep > 1)
			snprintf(range, sizeof(range), "%s-%s", us(a, w->lo.p50), us(b, w->hi.p50));
		else
			strcpy(range, "-");
		fprintf(f, "%8s %8s %-15s %8s %8s %8s %8s %10s %8s %8s %8s\n", us(c, w->med.mean), us(d, w->med.p50),
			range, us(e, w->med.p99), us(g, w->med.p999), us(h, w->med.max), us(i_, w->med.jitter),
			rate(j, w->med.rt_per_s), pct(k, w->lat_red_pct), pct(l, w->jit_red_pct),
			us(n, w->med.cpu_per_rt));
	}
	for (unsigned r = 0; r < rep->nrows; r++)
		if (rep->rows[r].transport == LAT_FASTPATH_SPIN) {
			fprintf(f, "\nfastpath-spin: lf_set_spin(fd, %u) on both ends, loopfast's spin back-off %s.", o->spin_us,
				o->spin_backoff ? "on (its default; --no-spin-backoff turns it off)" : "off (--no-spin-backoff)");
			break;
		}
	if (rep->base >= 0)
		fprintf(f, "\nlat.red / jit.red: reduction of the mean round trip / of the jitter against %s %s%s.\n",
			lat_style_names[rep->rows[rep->base].style], lat_transport_names[rep->rows[rep->base].transport],
			rep->base ? " (the first row that ran)" : " (the first row)");
	bool head = false;
	for (unsigned r = 0; r < rep->nrows; r++) {
		const struct lat_row *w = &rep->rows[r];

		if (!(w->uds_p50[0] > 0)) /* NAN: no uds row to compare with */
			continue;
		if (!head)
			fprintf(f, "\nagainst uds (the same style), repeat by repeat: median ratio [min-max over %u repeat%s]\n",
				w->nrep, w->nrep == 1 ? "" : "s");
		head = true;
		fprintf(f, "%-11s %-14s p50 %.2f [%.2f-%.2f]  p99 %.2f [%.2f-%.2f]\n", lat_style_names[w->style],
			lat_transport_names[w->transport], w->uds_p50[0], w->uds_p50[1], w->uds_p50[2], w->uds_p99[0],
			w->uds_p99[1], w->uds_p99[2]);
	}
	head = false;
	for (unsigned r = 0; r < rep->nrows; r++) {
		const struct lat_row *w = &rep->rows[r];

		if (!(w->floor_p50[0] > 0)) /* NAN: no shm row to compare with */
			continue;
		if (!head)
			fprintf(f, "\nagainst shm (the floor, the same style), repeat by repeat: p50 median ratio [min-max over %u repeat%s]\n",
				w->nrep, w->nrep == 1 ? "" : "s");
		head = true;
		fprintf(f, "%-11s %-14s p50 %.2f [%.2f-%.2f]\n", lat_style_names[w->style], lat_transport_names[w->transport],
			w->floor_p50[0], w->floor_p50[1], w->floor_p50[2]);
	}
	for (unsigned r = 0; r < rep->nrows; r++) {
		const struct lat_row *w = &rep->rows[r];

		if (w->note[0])
			fprintf(f, "note: %s %s: %s\n", lat_style_names[w->style], lat_transport_names[w->transport], w->note);
	}
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	if (isnan(v) || isinf(v))
		fputs("null", f);
	else
		fprintf(f, "%.6g", v);
}

/* {median, min, max} of ratios over repeats. */
static void json_ratios(FILE *f, const double v[3])
{
	const char *name[] = { "median", "min", "max" };

	for (int i = 0; i < 3; i++) {
		fprintf(f, "%s\"%s\": ", i ? ", " : "{", name[i]);
		json_num(f, v[i]);
	}
	fputc('}', f);
}

static void json_figures(FILE *f, const struct lat_figures *x)
{
	const struct { const char *key; double v; } fig[] = {
		{ "mean_us", x->mean }, { "p50_us", x->p50 }, { "p99_us", x->p99 },
		{ "p999_us", x->p999 }, { "max_us", x->max }, { "min_us", x->min },
		{ "jitter_us", x->jitter }, { "round_trips_per_s", x->rt_per_s },
		{ "cpu_us_per_round_trip", x->cpu_per_rt },
	};

	for (unsigned i = 0; i < sizeof(fig) / sizeof(fig[0]); i++) {
		fprintf(f, "%s\"%s\": ", i ? ", " : "{", fig[i].key);
		json_num(f, fig[i].v);
	}
	fputc('}', f);
}

static void json_list(FILE *f, unsigned mask, const char *const *names, unsigned n)
{
	bool first = true;

	fputc('[', f);
	for (unsigned i = 0; i < n; i++)
		if (mask & (1u << i)) {
			fputs(first ? "" : ", ", f);
			json_str(f, names[i]);
			first = false;
		}
	fputc(']', f);
}

static const char *status_name(enum lat_status s)
{
	return s == LAT_OK ? "ok" : s == LAT_UNAVAILABLE ? "unavailable" : "failed";
}

static void json_row(FILE *f, const struct lat_row *w)
{
	fprintf(f, "    {\"style\": \"%s\", \"transport\": \"%s\", \"status\": \"%s\"",
		lat_style_names[w->style], lat_transport_names[w->transport], status_name(w->status));
	if (w->status != LAT_OK) {
		fprintf(f, ", \"reason\": ");
		json_str(f, w->reason);
	}
	if (w->note[0]) {
		fprintf(f, ", \"note\": ");
		json_str(f, w->note);
	}
	if (w->status == LAT_OK) {
		fprintf(f, ",\n     \"median\": ");
		json_figures(f, &w->med);
		fprintf(f, ",\n     \"min_over_repeats\": ");
		json_figures(f, &w->lo);
		fprintf(f, ",\n     \"max_over_repeats\": ");
		json_figures(f, &w->hi);
		fprintf(f, ",\n     \"latency_reduction_pct\": ");
		json_num(f, w->lat_red_pct);
		fprintf(f, ", \"jitter_reduction_pct\": ");
		json_num(f, w->jit_red_pct);
		fprintf(f, ", \"p50_reduction_pct\": ");
		json_num(f, w->p50_red_pct);
		if (w->uds_p50[0] > 0) {
			fprintf(f, ",\n     \"vs_uds\": {\"p50\": ");
			json_ratios(f, w->uds_p50);
			fprintf(f, ", \"p99\": ");
			json_ratios(f, w->uds_p99);
			fprintf(f, "}");
		}
		if (w->floor_p50[0] > 0) {
			fprintf(f, ",\n     \"vs_floor\": {\"p50\": ");
			json_ratios(f, w->floor_p50);
			fprintf(f, "}");
		}
		fprintf(f, ",\n     \"repeats\": [");
		for (unsigned i = 0; i < w->nrep; i++) {
			fputs(i ? ",\n       " : "\n       ", f);
			json_figures(f, &w->rep[i]);
		}
		fprintf(f, "],\n     \"cdf\": [");
		for (unsigned i = 0; i < w->ncdf; i++) {
			fprintf(f, "%s[", i ? ", " : "");
			json_num(f, w->cdf[i][0]);
			fputs(", ", f);
			json_num(f, w->cdf[i][1]);
			fputc(']', f);
		}
		fputc(']', f);
	}
	fputc('}', f);
}

void lat_print_json(FILE *f, const struct lat_report *rep)
{
	const struct lat_opts *o = rep->opts;
	const struct lat_machine *m = &rep->machine;

	fprintf(f, "{\n  \"schema\": \"loopfast-bench-latency/1\",\n  \"started\": ");
	json_str(f, m->started);
	fprintf(f, ",\n  \"machine\": {\"cpu_model\": ");
	json_str(f, m->cpu_model);
	fprintf(f, ", \"cpus\": %d, \"kernel\": ", m->cpus);
	json_str(f, m->kernel);
	fprintf(f, ", \"loadavg\": [");
	for (int i = 0; i < 3; i++) {
		fputs(i ? ", " : "", f);
		json_num(f, m->loadavg[i]);
	}
	fprintf(f, "]},\n  \"options\": {\"styles\": ");
	json_list(f, o->styles, lat_style_names, LAT_NSTYLES);
	fprintf(f, ", \"transports\": ");
	json_list(f, o->transports, lat_transport_names, LAT_NTRANSPORTS);
	fprintf(f, ", \"size\": %zu, \"count\": %u, \"warmup\": %u, \"repeat\": %u, \"pin\": %s, "
		   "\"cpus\": [%d, %d], \"timeout_s\": %u, \"spin_us\": %u, \"spin_backoff\": %s, \"compare_sockperf\": %s},\n",
		o->size, o->count, o->warmup, o->repeat, o->pin ? "true" : "false", o->cpu[0], o->cpu[1],
		o->timeout_s, o->spin_us, o->spin_backoff ? "true" : "false", o->compare_sockperf ? "true" : "false");
	fprintf(f, "  \"units\": {\"time\": \"microseconds, round trip\", \"percentiles\": \"nearest rank\", "
		   "\"jitter\": \"population standard deviation\", \"cpu\": \"user+sys of sender and echoer per round trip\"},\n");
	fprintf(f, "  \"base\": ");
	if (rep->base >= 0)
		fprintf(f, "{\"style\": \"%s\", \"transport\": \"%s\"}", lat_style_names[rep->rows[rep->base].style],
			lat_transport_names[rep->rows[rep->base].transport]);
	else
		fputs("null", f);
	fprintf(f, ",\n  \"rows\": [\n");
	for (unsigned r = 0; r < rep->nrows; r++) {
		json_row(f, &rep->rows[r]);
		fputs(r + 1 < rep->nrows ? ",\n" : "\n", f);
	}
	fprintf(f, "  ],\n  \"sockperf\": [");
	for (unsigned i = 0; i < rep->nsp; i++) {
		const struct lat_sockperf *s = &rep->sp[i];

		fprintf(f, "%s\n    {\"transport\": \"%s\", \"status\": \"%s\", \"command\": ", i ? "," : "",
			s->transport, status_name(s->status));
		json_str(f, s->command);
		if (s->status != LAT_OK) {
			fprintf(f, ", \"reason\": ");
			json_str(f, s->reason);
		} else {
			fprintf(f, ", \"repeats\": %u, \"p50_rtt_us\": ", s->nrep);
			json_num(f, s->p50);
			fprintf(f, ", \"p50_rtt_us_range\": [");
			json_num(f, s->p50_lo);
			fputs(", ", f);
			json_num(f, s->p50_hi);
			fputc(']', f);
			fprintf(f, ", \"mean_rtt_us\": ");
			json_num(f, s->mean);
			fprintf(f, ", \"p99_rtt_us\": ");
			json_num(f, s->p99);
		}
		if (s->ours) {
			fprintf(f, ", \"ours\": {\"style\": \"%s\", \"transport\": \"%s\", \"p50_us\": ",
				lat_style_names[s->ours->style], lat_transport_names[s->ours->transport]);
			json_num(f, s->ours->med.p50);
			fputc('}', f);
		}
		fputc('}', f);
	}
	fprintf(f, "%s]\n}\n", rep->nsp ? "\n  " : "");
}

void lat_sockperf_print(FILE *f, const struct lat_report *rep)
{
	char a[32], b[32], range[72];

	fprintf(f, "\nsockperf cross-check (ping-pong --full-rtt, %zu bytes, %d s per repeat, right after each repeat's block rows;"
		   " both ends block in recvfrom, so compared with our block rows)\n",
		rep->opts->size < 14 ? 14 : rep->opts->size, LAT_SP_SECONDS);
	fprintf(f, "%-17s %14s %-15s %14s %14s %8s\n", "transport", "sockperf p50", "p50 range", "sockperf p99",
		"ours p50", "ratio");
	for (unsigned i = 0; i < rep->nsp; i++) {
		const struct lat_sockperf *s = &rep->sp[i];

		if (s->status != LAT_OK) {
			fprintf(f, "%-17s %s: %s\n", s->transport, s->status == LAT_UNAVAILABLE ? "unavailable" : "failed",
				s->reason);
			continue;
		}
		if (s->nrep > 1)
			snprintf(range, sizeof(range), "%s-%s", us(a, s->p50_lo), us(b, s->p50_hi));
		else
			strcpy(range, "-");
		fprintf(f, "%-17s %11s us %-15s %11s us ", s->transport, us(a, s->p50), range, us(b, s->p99));
		if (s->ours)
			fprintf(f, "%11s us %8.2f\n", us(a, s->ours->med.p50), s->p50 / s->ours->med.p50);
		else
			fprintf(f, "%14s %8s\n", "(not run)", "-");
	}
	fprintf(f, "ratio = sockperf p50 / ours p50 (round trips; sockperf without --full-rtt would print half);"
		   " fastpath = sockperf over TCP with both ends under `loopfast run`; fastpath-shm-spin = under `loopfast run"
		   " --tier shm --spin-us %u`, against our block row of that transport\n", rep->opts->spin_us);
}
