/* Unit tests of `loopfast bench latency`'s statistics, table and JSON
 * (bench/latency/latency_stats.c and latency_report.c are compiled in). */
#include "runner.h"
#include "latency.h"

#include <math.h>
#include <stdlib.h>

#define ASSERT_NEAR(a, b) do { double x_ = (a), y_ = (b); \
	if (!(fabs(x_ - y_) <= 1e-9 * (1 + fabs(y_)))) { \
		fprintf(stderr, "%s:%d: %s == %s: %.12g vs %.12g\n", __FILE__, __LINE__, #a, #b, x_, y_); abort(); } } while (0)
#define ASSERT_HAS(hay, needle) do { if (!strstr((hay), (needle))) { \
	fprintf(stderr, "%s:%d: \"%s\" not found in:\n%s\n", __FILE__, __LINE__, (needle), (hay)); abort(); } } while (0)

static void test_percentile_nearest_rank(void)
{
	double v[100];

	for (int i = 0; i < 100; i++)
		v[i] = i + 1;
	ASSERT_NEAR(lat_percentile(v, 100, 0), 1);
	ASSERT_NEAR(lat_percentile(v, 100, 50), 50);
	ASSERT_NEAR(lat_percentile(v, 100, 99), 99);
	ASSERT_NEAR(lat_percentile(v, 100, 99.9), 100);
	ASSERT_NEAR(lat_percentile(v, 100, 100), 100);
	ASSERT_NEAR(lat_percentile(v, 10, 50), 5);
	ASSERT_NEAR(lat_percentile(v, 10, 90), 9);
	ASSERT_NEAR(lat_percentile(v, 10, 91), 10);
	ASSERT_NEAR(lat_percentile(v, 1, 99.9), 1);
	ASSERT(isnan(lat_percentile(v, 0, 50)));
}

static void test_figures_known_data(void)
{
	double v[] = { 9, 4, 2, 5, 4, 7, 5, 4 }; /* mean 5, population stddev 2 */
	struct lat_figures f;

	lat_sort(v, 8);
	ASSERT_NEAR(v[0], 2);
	ASSERT_NEAR(v[7], 9);
	lat_figures_from(v, 8, &f);
	ASSERT_NEAR(f.mean, 5);
	ASSERT_NEAR(f.jitter, 2);
	ASSERT_NEAR(f.min, 2);
	ASSERT_NEAR(f.max, 9);
	ASSERT_NEAR(f.p50, 4);
	ASSERT_NEAR(f.p99, 9);
	ASSERT_NEAR(f.p999, 9);
}

static void test_median(void)
{
	double odd[] = { 3, 1, 2 }, even[] = { 4, 1, 3, 2 }, one[] = { 7 };

	ASSERT_NEAR(lat_median(odd, 3), 2);
	ASSERT_NEAR(lat_median(even, 4), 2.5);
	ASSERT_NEAR(lat_median(one, 1), 7);
	ASSERT(isnan(lat_median(one, 0)));
}

static void test_aggregate_over_repeats(void)
{
	struct lat_figures reps[3] = {
		{ .mean = 11, .p50 = 10, .p99 = 50, .rt_per_s = 1000, .cpu_per_rt = 3 },
		{ .mean = 31, .p50 = 30, .p99 = 70, .rt_per_s = 3000, .cpu_per_rt = 1 },
		{ .mean = 21, .p50 = 20, .p99 = 60, .rt_per_s = 2000, .cpu_per_rt = 2 },
	};
	struct lat_row row = { .nrep = 3, .rep = reps };

	lat_aggregate(&row);
	ASSERT_NEAR(row.med.p50, 20);
	ASSERT_NEAR(row.lo.p50, 10);
	ASSERT_NEAR(row.hi.p50, 30);
	ASSERT_NEAR(row.med.mean, 21);
	ASSERT_NEAR(row.med.p99, 60);
	ASSERT_NEAR(row.med.rt_per_s, 2000);
	ASSERT_NEAR(row.hi.cpu_per_rt, 3);
	/* The repeats themselves are left as they were. */
	ASSERT_NEAR(reps[0].p50, 10);
}

static void test_compare_against_first_row_that_ran(void)
{
	struct lat_row rows[3] = {
		{ .status = LAT_UNAVAILABLE },
		{ .status = LAT_OK, .med = { .mean = 100, .jitter = 10, .p50 = 80 } },
		{ .status = LAT_OK, .med = { .mean = 25, .jitter = 1, .p50 = 40 } },
	};
	struct lat_report rep = { .rows = rows, .nrows = 3 };

	lat_compare(&rep);
	ASSERT_EQ(rep.base, 1);
	ASSERT_NEAR(rows[1].lat_red_pct, 0);
	ASSERT_NEAR(rows[2].lat_red_pct, 75);
	ASSERT_NEAR(rows[2].jit_red_pct, 90);
	ASSERT_NEAR(rows[2].p50_red_pct, 50);
	ASSERT(isnan(rows[0].lat_red_pct));
}

static void test_cdf_monotone(void)
{
	double pool[1000];
	struct lat_row row = { .pool = pool, .npool = 1000 };

	for (int i = 0; i < 1000; i++)
		pool[i] = (i * 7919) % 1000 + 1; /* 1..1000, shuffled */
	lat_cdf(&row);
	ASSERT_GT(row.ncdf, 20);
	ASSERT_NEAR(row.cdf[0][0], 0);
	ASSERT_NEAR(row.cdf[0][1], 1);
	ASSERT_NEAR(row.cdf[row.ncdf - 1][0], 100);
	ASSERT_NEAR(row.cdf[row.ncdf - 1][1], 1000);
	for (unsigned i = 1; i < row.ncdf; i++) {
		ASSERT(row.cdf[i][0] > row.cdf[i - 1][0]);
		ASSERT(row.cdf[i][1] >= row.cdf[i - 1][1]);
	}
}

/* A report with one measured row, one unavailable row and a sockperf
 * result, as the benchmark would build it. */
static struct lat_opts opts = {
	.styles = 1u << LAT_BLOCK, .transports = (1u << LAT_TCP) | (1u << LAT_FASTPATH),
	.size = 64, .count = 1000, .warmup = 100, .repeat = 2, .pin = true, .cpu = { 0, 1 },
	.timeout_s = 30, .spin_us = 50,
};
static struct lat_figures reps[2] = {
	{ .mean = 57.25, .p50 = 56.5, .p99 = 90.125, .p999 = 150, .max = 4000, .min = 40, .jitter = 12.5,
	  .rt_per_s = 17467, .cpu_per_rt = 35.5 },
	{ .mean = 58.75, .p50 = 57.5, .p99 = 91, .p999 = 160, .max = 5000, .min = 41, .jitter = 13.5,
	  .rt_per_s = 17000, .cpu_per_rt = 36.5 },
};
static struct lat_row rows[2];
static struct lat_report rep;

static void make_report(void)
{
	static double pool[4] = { 40, 56, 58, 5000 };

	rows[0] = (struct lat_row){ .style = LAT_BLOCK, .transport = LAT_TCP, .status = LAT_OK, .nrep = 2,
				    .rep = reps, .pool = pool, .npool = 4 };
	rows[1] = (struct lat_row){ .style = LAT_BLOCK, .transport = LAT_FASTPATH, .status = LAT_UNAVAILABLE };
	strcpy(rows[1].reason, "lf_enable_fast_path(listener): \"Operation\" not supported");
	rep = (struct lat_report){ .opts = &opts, .rows = rows, .nrows = 2 };
	strcpy(rep.machine.cpu_model, "Test CPU");
	rep.machine.cpus = 2;
	strcpy(rep.machine.kernel, "Linux 6.0 x86_64");
	strcpy(rep.machine.started, "2026-01-01T00:00:00Z");
	lat_aggregate(&rows[0]);
	lat_cdf(&rows[0]);
	lat_compare(&rep);
	rep.nsp = 2;
	rep.sp[0] = (struct lat_sockperf){ .transport = "tcp", .status = LAT_OK, .nrep = 2, .rep_p50 = { 61, 59 },
					   .rep_p99 = { 95, 96 }, .rep_mean = { 62, 60 } };
	strcpy(rep.sp[0].command, "sockperf ping-pong --tcp");
	rep.sp[1] = (struct lat_sockperf){ .transport = "unix", .status = LAT_UNAVAILABLE };
	strcpy(rep.sp[1].reason, "sockperf: '-i' Invalid address: /tmp/x.sock");
	lat_sockperf_finish(&rep);
}

static char *render(void (*fn)(FILE *, const struct lat_report *))
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ASSERT(f != NULL);
	fn(f, &rep);
	fclose(f);
	return buf;
}

/* Each row against the uds row and the shm row (the floor) of its style,
 * repeat by repeat: the median and range of the ratios, not the ratio of
 * the medians; a style without such a row, and the row itself, get none. */
static void test_compare_uds_per_repeat(void)
{
	struct lat_figures fp[3] = { { .p50 = 10, .p99 = 100 }, { .p50 = 30, .p99 = 90 }, { .p50 = 20, .p99 = 400 } };
	struct lat_figures ux[3] = { { .p50 = 10, .p99 = 50 }, { .p50 = 20, .p99 = 100 }, { .p50 = 40, .p99 = 200 } };
	struct lat_figures tc[3] = { { .p50 = 1 }, { .p50 = 1 }, { .p50 = 1 } };
	struct lat_figures fl[3] = { { .p50 = 0.2 }, { .p50 = 0.8 }, { .p50 = 0.25 } };
	struct lat_figures ts[3] = { { .p50 = 0.3 }, { .p50 = 0.9 }, { .p50 = 0.3 } };
	struct lat_row row3[5] = {
		{ .style = LAT_BLOCK, .transport = LAT_FASTPATH, .status = LAT_OK, .nrep = 3, .rep = fp },
		{ .style = LAT_EPOLL, .transport = LAT_TCP, .status = LAT_OK, .nrep = 3, .rep = tc },
		{ .style = LAT_BLOCK, .transport = LAT_UDS, .status = LAT_OK, .nrep = 3, .rep = ux },
		{ .style = LAT_SPIN, .transport = LAT_SHM, .status = LAT_OK, .nrep = 3, .rep = fl },
		{ .style = LAT_SPIN, .transport = LAT_FASTPATH_SHM, .status = LAT_OK, .nrep = 3, .rep = ts },
	};
	struct lat_report r3 = { .opts = &opts, .rows = row3, .nrows = 5 };

	lat_compare_repeats(&r3);
	/* Against the floor: 1.5, 1.125, 1.2 (the ratio of the medians would be 1.2 too, of the means 1.20) */
	ASSERT_NEAR(row3[4].floor_p50[0], 1.2);
	ASSERT_NEAR(row3[4].floor_p50[1], 1.125);
	ASSERT_NEAR(row3[4].floor_p50[2], 1.5);
	ASSERT(isnan(row3[3].floor_p50[0])); /* the floor itself */
	ASSERT(isnan(row3[0].floor_p50[0])); /* no shm row of its style */
	ASSERT(isnan(row3[4].uds_p50[0]));
	/* p50: 1, 1.5, 0.5; p99: 2, 0.9, 2 (the ratio of the medians would be 1 and 1) */
	ASSERT_NEAR(row3[0].uds_p50[0], 1);
	ASSERT_NEAR(row3[0].uds_p50[1], 0.5);
	ASSERT_NEAR(row3[0].uds_p50[2], 1.5);
	ASSERT_NEAR(row3[0].uds_p99[0], 2);
	ASSERT_NEAR(row3[0].uds_p99[1], 0.9);
	ASSERT_NEAR(row3[0].uds_p99[2], 2);
	ASSERT(isnan(row3[1].uds_p99[0]));
	ASSERT(isnan(row3[2].uds_p99[0]));
	ASSERT_NEAR(fp[1].p50, 30); /* the repeats are left as they were */
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ASSERT(f != NULL);
	lat_print_table(f, &r3);
	lat_print_json(f, &r3);
	fclose(f);
	ASSERT_HAS(buf, "against uds (the same style), repeat by repeat: median ratio [min-max over 3 repeats]");
	ASSERT_HAS(buf, "block       fastpath       p50 1.00 [0.50-1.50]  p99 2.00 [0.90-2.00]");
	ASSERT_HAS(buf, "\"vs_uds\": {\"p50\": {\"median\": 1, \"min\": 0.5, \"max\": 1.5}, "
			"\"p99\": {\"median\": 2, \"min\": 0.9, \"max\": 2}}");
	ASSERT(!strstr(buf, "epoll       tcp            p50"));
	ASSERT_HAS(buf, "against shm (the floor, the same style), repeat by repeat: p50 median ratio [min-max over 3 repeats]\n"
			"spin        fastpath-shm   p50 1.20 [1.12-1.50]\n");
	ASSERT_HAS(buf, "\"vs_floor\": {\"p50\": {\"median\": 1.2, \"min\": 1.125, \"max\": 1.5}}");
	free(buf);
}

static void test_table(void)
{
	make_report();
	char *t = render(lat_print_table);

	ASSERT_HAS(t, "64-byte ping-pong");
	ASSERT_HAS(t, "2 repeats (each figure the median over repeats)");
	ASSERT_HAS(t, "sender on CPU 0, echoer on CPU 1");
	ASSERT_HAS(t, "Test CPU, 2 CPUs, Linux 6.0 x86_64");
	ASSERT_HAS(t, "microseconds");
	ASSERT_HAS(t, "style       transport          mean      p50 p50 range            p99    p99.9      max"
		      "   jitter       RT/s  lat.red  jit.red   CPU/RT");
	/* medians of two repeats; the p50 spread; thousands separators */
	ASSERT_HAS(t, "block       tcp                58.0     57.0 56.5-57.5           90.6    155.0     4500"
		      "     13.0     17,234       0%       0%     36.0");
	ASSERT_HAS(t, "block       fastpath       unavailable: lf_enable_fast_path(listener): \"Operation\" not supported");
	ASSERT_HAS(t, "against block tcp (the first row)");
	free(t);
}

static void test_table_sockperf(void)
{
	make_report();
	char *t = render(lat_sockperf_print);

	ASSERT_HAS(t, "transport           sockperf p50 p50 range         sockperf p99       ours p50    ratio");
	ASSERT_HAS(t, "tcp                      60.0 us 59.0-61.0              95.5 us        57.0 us     1.05");
	ASSERT_HAS(t, "unix              unavailable: sockperf: '-i' Invalid address");
	free(t);
}

/* Checks that s is one well-formed JSON value (strings, numbers, literals,
 * arrays, objects); returns the end or NULL. */
static const char *json_value(const char *s);

static const char *ws(const char *s)
{
	while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
		s++;
	return s;
}

static const char *json_string(const char *s)
{
	if (*s++ != '"')
		return NULL;
	for (; *s && *s != '"'; s++) {
		if ((unsigned char)*s < 0x20)
			return NULL;
		if (*s == '\\' && !*++s)
			return NULL;
	}
	return *s == '"' ? s + 1 : NULL;
}

static const char *json_value(const char *s)
{
	s = ws(s);
	if (*s == '"')
		return json_string(s);
	if (*s == '{' || *s == '[') {
		char close = *s == '{' ? '}' : ']';

		s = ws(s + 1);
		if (*s == close)
			return s + 1;
		for (;;) {
			if (close == '}') {
				if (!(s = json_string(ws(s))))
					return NULL;
				s = ws(s);
				if (*s++ != ':')
					return NULL;
			}
			if (!(s = json_value(s)))
				return NULL;
			s = ws(s);
			if (*s == close)
				return s + 1;
			if (*s++ != ',')
				return NULL;
		}
	}
	if (!strncmp(s, "null", 4) || !strncmp(s, "true", 4))
		return s + 4;
	if (!strncmp(s, "false", 5))
		return s + 5;
	char *end;

	strtod(s, &end);
	return end > s && strncmp(s, "nan", 3) && strncmp(s, "inf", 3) ? end : NULL;
}

static void test_json_schema(void)
{
	make_report();
	char *j = render(lat_print_json);
	const char *end = json_value(j);

	ASSERT(end != NULL);
	ASSERT_EQ(*ws(end), '\0');
	ASSERT_HAS(j, "\"schema\": \"loopfast-bench-latency/1\"");
	ASSERT_HAS(j, "\"machine\": {\"cpu_model\": \"Test CPU\", \"cpus\": 2, \"kernel\": \"Linux 6.0 x86_64\"");
	ASSERT_HAS(j, "\"options\": {\"styles\": [\"block\"], \"transports\": [\"tcp\", \"fastpath\"], \"size\": 64,"
		      " \"count\": 1000, \"warmup\": 100, \"repeat\": 2, \"pin\": true");
	ASSERT_HAS(j, "\"base\": {\"style\": \"block\", \"transport\": \"tcp\"}");
	ASSERT_HAS(j, "\"style\": \"block\", \"transport\": \"tcp\", \"status\": \"ok\"");
	ASSERT_HAS(j, "\"median\": {\"mean_us\": 58, \"p50_us\": 57, \"p99_us\": 90.5625, \"p999_us\": 155, "
		      "\"max_us\": 4500, \"min_us\": 40.5, \"jitter_us\": 13, \"round_trips_per_s\": 17233.5, "
		      "\"cpu_us_per_round_trip\": 36}");
	ASSERT_HAS(j, "\"min_over_repeats\": {\"mean_us\": 57.25, \"p50_us\": 56.5");
	ASSERT_HAS(j, "\"max_over_repeats\": {\"mean_us\": 58.75, \"p50_us\": 57.5");
	ASSERT_HAS(j, "\"latency_reduction_pct\": 0, \"jitter_reduction_pct\": 0, \"p50_reduction_pct\": 0");
	ASSERT_HAS(j, "\"repeats\": [");
	ASSERT_HAS(j, "\"cdf\": [[0, 40], ");
	ASSERT_HAS(j, "[100, 5000]]");
	ASSERT_HAS(j, "\"status\": \"unavailable\", \"reason\": \"lf_enable_fast_path(listener): \\\"Operation\\\" not supported\"");
	ASSERT_HAS(j, "\"transport\": \"tcp\", \"status\": \"ok\", \"command\": \"sockperf ping-pong --tcp\", \"repeats\": 2, \"p50_rtt_us\": 60, \"p50_rtt_us_range\": [59, 61], \"mean_rtt_us\": 61, \"p99_rtt_us\": 95.5");
	ASSERT_HAS(j, "\"ours\": {\"style\": \"block\", \"transport\": \"tcp\", \"p50_us\": 57}");
	ASSERT_HAS(j, "\"transport\": \"unix\", \"status\": \"unavailable\"");
	free(j);
}

static void test_json_nan_is_null(void)
{
	make_report();
	rep.machine.loadavg[0] = NAN;
	rows[0].lat_red_pct = NAN;
	char *j = render(lat_print_json);

	ASSERT(json_value(j) != NULL);
	ASSERT_HAS(j, "\"loadavg\": [null, 0, 0]");
	ASSERT_HAS(j, "\"latency_reduction_pct\": null");
	free(j);
}

static void test_combos(void)
{
	ASSERT(lat_combo_na(LAT_SPIN, LAT_SHM) == NULL);
	ASSERT(lat_combo_na(LAT_BLOCK, LAT_SHM) != NULL);
	ASSERT(lat_combo_na(LAT_URING_POLL, LAT_SHM) != NULL);
	ASSERT(lat_combo_na(LAT_BLOCK, LAT_FASTPATH_SPIN) == NULL);
	ASSERT(lat_combo_na(LAT_EPOLL, LAT_FASTPATH_SPIN) == NULL);
	ASSERT(lat_combo_na(LAT_SPIN, LAT_FASTPATH_SPIN) != NULL);
	for (int s = 0; s < LAT_NSTYLES; s++)
		for (int t = LAT_TCP; t <= LAT_UDS; t++)
			if (t != LAT_FASTPATH_SPIN)
				ASSERT(lat_combo_na(s, t) == NULL);
}

int main(int argc, char **argv)
{
	static const struct lf_test tests[] = {
		{ "percentile_nearest_rank", test_percentile_nearest_rank, 0 },
		{ "figures_known_data", test_figures_known_data, 0 },
		{ "median", test_median, 0 },
		{ "aggregate_over_repeats", test_aggregate_over_repeats, 0 },
		{ "compare_against_first_row_that_ran", test_compare_against_first_row_that_ran, 0 },
		{ "compare_uds_per_repeat", test_compare_uds_per_repeat, 0 },
		{ "cdf_monotone", test_cdf_monotone, 0 },
		{ "table", test_table, 0 },
		{ "table_sockperf", test_table_sockperf, 0 },
		{ "json_schema", test_json_schema, 0 },
		{ "json_nan_is_null", test_json_nan_is_null, 0 },
		{ "combos", test_combos, 0 },
		{ NULL, NULL, 0 },
	};

	return lf_test_main(tests, argc, argv);
}
