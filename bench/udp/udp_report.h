/* `loopfast bench udp`: what the runs measured and how it is reported
 * (udp_report.c): the medians per design, the table, the JSON and the
 * plot. bench_udp.c parses the options, runs the servers and fills the
 * samples; the report reads them and calls nothing of bench_udp.c. */
#ifndef LF_UDP_REPORT_H
#define LF_UDP_REPORT_H

#include <stdbool.h>

enum { UDP_MODE_RATE = 1, UDP_MODE_DRAIN = 2 };

struct udp_opts {
	unsigned modes;       /* UDP_MODE_* bits */
	unsigned sizes[8], nsizes;
	bool designs[16];
	unsigned work, threads, repeat, generators;
	double seconds;
	unsigned long long count;
	const char *json, *plot;
};

struct udp_sample {
	int mode;
	unsigned size, design, threads, repeat;
	unsigned long long received, sent;
	long long drops;
	double seconds, rate, cpu_ns;
	bool marker;
	unsigned markers; /* end markers sent (a dropped one counts in lost) */
	int err;
};

/* The medians of the samples of one mode, size and design. */
struct udp_summary {
	int mode;
	unsigned size, design, threads, n;
	double rate, rate_min, rate_max, cpu_ns, drops, received, sent;
	bool all_markers;
	int err;
};

/* Returns "rate" or "drain". */
const char *udp_mode_name(int mode);
/* Groups the samples by mode, size and design, in the order they first
 * appear, into *nout summaries (out has room for ns). */
void udp_summarize(const struct udp_sample *s, unsigned ns, struct udp_summary *out,
		   unsigned *nout);
/* Prints the table: one block per mode and size, one line per design. */
void udp_print_table(const struct udp_opts *o, const struct udp_summary *m, unsigned nm);
/* Writes the summaries and every run as JSON to path ("-": stdout).
 * Returns 0 or -errno. */
int udp_write_json(const char *path, const struct udp_opts *o, const struct udp_sample *s,
		   unsigned ns, const struct udp_summary *m, unsigned nm);
/* Draws png from the JSON file with plot_udp.py. Returns 0, or the status
 * of lf_cli_error() after printing what failed. */
int udp_plot(const char *json, const char *png);

#endif
