/* `loopfast bench udp`: the report of the runs bench_udp.c made. Samples
 * of one mode, size and design become medians with their spread, printed
 * as a table with rates relative to epoll and recvmmsg, written as JSON
 * (summaries and every run), and plotted by plot_udp.py. */
#include "cmdline.h"
#include "udp_designs.h"
#include "udp_report.h"

#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

extern char **environ;

const char *udp_mode_name(int m)
{
	return m == UDP_MODE_RATE ? "rate" : "drain";
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void udp_summarize(const struct udp_sample *s, unsigned ns, struct udp_summary *out,
		   unsigned *nout)
{
	*nout = 0;
	for (unsigned i = 0; i < ns; i++) {
		unsigned k;
		for (k = 0; k < *nout; k++)
			if (out[k].mode == s[i].mode && out[k].size == s[i].size && out[k].design == s[i].design)
				break;
		if (k < *nout)
			continue;
		double rate[100] = { 0 }, cpu[100], drops[100], recv[100], sent[100];
		struct udp_summary *m = &out[(*nout)++];
		*m = (struct udp_summary){ .mode = s[i].mode, .size = s[i].size, .design = s[i].design,
				       .threads = s[i].threads, .all_markers = true };
		for (unsigned j = i; j < ns; j++) {
			if (s[j].mode != m->mode || s[j].size != m->size || s[j].design != m->design)
				continue;
			rate[m->n] = s[j].rate;
			cpu[m->n] = s[j].cpu_ns;
			drops[m->n] = (double)s[j].drops;
			recv[m->n] = (double)s[j].received;
			sent[m->n] = (double)s[j].sent;
			m->all_markers &= s[j].marker;
			if (s[j].err)
				m->err = s[j].err;
			m->n++;
		}
		m->rate_min = m->rate_max = rate[0];
		for (unsigned j = 1; j < m->n; j++) {
			if (rate[j] < m->rate_min)
				m->rate_min = rate[j];
			if (rate[j] > m->rate_max)
				m->rate_max = rate[j];
		}
		m->rate = median(rate, m->n);
		m->cpu_ns = median(cpu, m->n);
		m->drops = median(drops, m->n);
		m->received = median(recv, m->n);
		m->sent = median(sent, m->n);
	}
}

static double base_rate(const struct udp_summary *m, unsigned nm, int mode, unsigned size,
			const char *name)
{
	int d = udp_find_design(name);

	for (unsigned i = 0; i < nm; i++)
		if (m[i].mode == mode && m[i].size == size && (int)m[i].design == d)
			return m[i].rate;
	return 0;
}

void udp_print_table(const struct udp_opts *o, const struct udp_summary *m, unsigned nm)
{
	int last_mode = 0;
	unsigned last_size = 0;

	for (unsigned i = 0; i < nm; i++) {
		if (m[i].mode != last_mode || m[i].size != last_size) {
			last_mode = m[i].mode;
			last_size = m[i].size;
			printf("\nmode %s, %u-byte datagrams, work %u, ", udp_mode_name(last_mode), last_size, o->work);
			if (last_mode == UDP_MODE_DRAIN)
				printf("%llu queued", o->count);
			else
				printf("%.1f s flood from %u generator%s", o->seconds, o->generators,
				       o->generators > 1 ? "s" : "");
			printf(", median of %u\n", m[i].n);
			printf("%-14s %7s %12s %21s %10s %12s %8s %10s\n", "design", "threads", "datagrams/s",
			       "(min-max)", "lost", "CPU ns/dgram", "x epoll", "x recvmmsg");
		}
		double ep = base_rate(m, nm, m[i].mode, m[i].size, "epoll");
		double mm = base_rate(m, nm, m[i].mode, m[i].size, "recvmmsg");
		char spread[64], lost[32], r1[16] = "-", r2[16] = "-";
		snprintf(spread, sizeof(spread), "(%.0f-%.0f)", m[i].rate_min, m[i].rate_max);
		if (m[i].drops >= 0)
			snprintf(lost, sizeof(lost), "%.0f", m[i].drops);
		else
			snprintf(lost, sizeof(lost), "?");
		if (ep > 0)
			snprintf(r1, sizeof(r1), "%.2f", m[i].rate / ep);
		if (mm > 0)
			snprintf(r2, sizeof(r2), "%.2f", m[i].rate / mm);
		printf("%-14s %7u %12.0f %21s %10s %12.0f %8s %10s", udp_designs[m[i].design].name,
		       m[i].threads, m[i].rate, spread, lost, m[i].cpu_ns, r1, r2);
		if (m[i].err)
			printf("  error: %s", strerror(-m[i].err));
		else if (!m[i].all_markers)
			printf("  (end marker lost; stopped by timeout)");
		putchar('\n');
	}
}

int udp_write_json(const char *path, const struct udp_opts *o, const struct udp_sample *s,
		   unsigned ns, const struct udp_summary *m, unsigned nm)
{
	FILE *f = !strcmp(path, "-") ? stdout : fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "{\n  \"benchmark\": \"udp\",\n  \"config\": {\"work\": %u, \"threads\": %u, \"repeat\": %u, "
		   "\"generators\": %u, \"time_s\": %g, \"count\": %llu},\n  \"summary\": [\n",
		o->work, o->threads, o->repeat, o->generators, o->seconds, o->count);
	for (unsigned i = 0; i < nm; i++) {
		double ep = base_rate(m, nm, m[i].mode, m[i].size, "epoll");
		double mm = base_rate(m, nm, m[i].mode, m[i].size, "recvmmsg");
		fprintf(f, "    {\"mode\": \"%s\", \"size\": %u, \"design\": \"%s\", \"threads\": %u, \"runs\": %u, "
			   "\"rate\": %.0f, \"rate_min\": %.0f, \"rate_max\": %.0f, \"lost\": %.0f, "
			   "\"received\": %.0f, \"sent\": %.0f, \"cpu_ns_per_dgram\": %.1f, "
			   "\"vs_epoll\": %.3f, \"vs_recvmmsg\": %.3f, \"end_marker_seen\": %s, \"error\": %d}%s\n",
			udp_mode_name(m[i].mode), m[i].size, udp_designs[m[i].design].name, m[i].threads, m[i].n,
			m[i].rate, m[i].rate_min, m[i].rate_max, m[i].drops, m[i].received, m[i].sent,
			m[i].cpu_ns, ep > 0 ? m[i].rate / ep : 0, mm > 0 ? m[i].rate / mm : 0,
			m[i].all_markers ? "true" : "false", m[i].err, i + 1 < nm ? "," : "");
	}
	fprintf(f, "  ],\n  \"runs\": [\n");
	for (unsigned i = 0; i < ns; i++)
		fprintf(f, "    {\"mode\": \"%s\", \"size\": %u, \"design\": \"%s\", \"threads\": %u, \"repeat\": %u, "
			   "\"sent\": %llu, \"received\": %llu, \"lost\": %lld, \"seconds\": %.6f, \"rate\": %.0f, "
			   "\"cpu_ns_per_dgram\": %.1f, \"end_marker_seen\": %s, \"markers_sent\": %u, \"error\": %d}%s\n",
			udp_mode_name(s[i].mode), s[i].size, udp_designs[s[i].design].name, s[i].threads, s[i].repeat,
			s[i].sent, s[i].received, s[i].drops, s[i].seconds, s[i].rate, s[i].cpu_ns,
			s[i].marker ? "true" : "false", s[i].markers, s[i].err, i + 1 < ns ? "," : "");
	fprintf(f, "  ]\n}\n");
	if (f != stdout && fclose(f))
		return -errno;
	return 0;
}

/* The plot is drawn by bench/udp/plot_udp.py (matplotlib), found next to the
 * build tree or in an installed share/loopfast/bench/udp. */
int udp_plot(const char *json, const char *png)
{
	char script[PATH_MAX];
	pid_t pid;
	int st;

	if (lf_cli_find_script("udp/plot_udp.py", script, sizeof(script)) < 0)
		return lf_cli_error("bench udp: plot_udp.py not found next to %s; install loopfast or run from the build tree", lf_cli_selfdir());
	char *argv[] = { "python3", script, (char *)json, (char *)png, NULL };
	if (posix_spawnp(&pid, "python3", NULL, NULL, argv, environ))
		return lf_cli_error("bench udp: cannot run python3 for --plot");
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return lf_cli_error("bench udp: plotting to %s failed (needs python3 with matplotlib)", png);
	return 0;
}
