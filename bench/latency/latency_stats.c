/* Statistics of the latency benchmark: percentiles, mean, jitter, the
 * median over repeats and the comparison against the base row.
 *
 * Percentiles use the nearest-rank method: the p-th percentile of n sorted
 * samples is the smallest sample with at least p% of the samples at or below
 * it (index ceil(p/100 * n) - 1). It is always a measured value, never an
 * interpolation. Jitter is the population standard deviation.
 */
#include "latency.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

void lat_sort(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

double lat_percentile(const double *sorted, size_t n, double pct)
{
	if (n == 0)
		return NAN;
	if (pct <= 0)
		return sorted[0];
	double rank = ceil(pct / 100.0 * (double)n - 1e-9);
	size_t i = rank < 1 ? 0 : (size_t)rank - 1;

	return sorted[i < n ? i : n - 1];
}

/* Fills the distribution figures; rt_per_s and cpu_per_rt are left alone
 * (they come from the processes' clocks, not from the samples). */
void lat_figures_from(const double *sorted, size_t n, struct lat_figures *f)
{
	double sum = 0, sq = 0, mean;

	for (size_t i = 0; i < n; i++)
		sum += sorted[i];
	mean = n ? sum / (double)n : NAN;
	for (size_t i = 0; i < n; i++)
		sq += (sorted[i] - mean) * (sorted[i] - mean);
	f->mean = mean;
	f->jitter = n ? sqrt(sq / (double)n) : NAN;
	f->min = n ? sorted[0] : NAN;
	f->max = n ? sorted[n - 1] : NAN;
	f->p50 = lat_percentile(sorted, n, 50);
	f->p99 = lat_percentile(sorted, n, 99);
	f->p999 = lat_percentile(sorted, n, 99.9);
}

/* Median of v (reordered); the mean of the two middle values when n is even. */
double lat_median(double *v, size_t n)
{
	if (n == 0)
		return NAN;
	lat_sort(v, n);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define FIELDS(X) X(mean) X(p50) X(p99) X(p999) X(max) X(min) X(jitter) X(rt_per_s) X(cpu_per_rt)

/* Each figure of the row becomes the median over its repeats; lo and hi
 * keep the spread (min and max over repeats). */
void lat_aggregate(struct lat_row *row)
{
	double v[row->nrep ? row->nrep : 1];
	unsigned n = row->nrep;

#define AGG(name) \
	for (unsigned i = 0; i < n; i++) \
		v[i] = row->rep[i].name; \
	row->med.name = lat_median(v, n); \
	row->lo.name = n ? v[0] : NAN; \
	row->hi.name = n ? v[n - 1] : NAN;
	FIELDS(AGG)
#undef AGG
}

/* Relative latency (mean, as in seed 000) and jitter reduction of every
 * row against the base: the first row that has figures. The median's
 * reduction is kept too: on a noisy machine the mean follows the tail. */
void lat_compare(struct lat_report *rep)
{
	rep->base = -1;
	for (unsigned i = 0; i < rep->nrows; i++)
		if (rep->rows[i].status == LAT_OK) {
			rep->base = (int)i;
			break;
		}
	for (unsigned i = 0; i < rep->nrows; i++) {
		struct lat_row *r = &rep->rows[i];

		r->lat_red_pct = r->jit_red_pct = r->p50_red_pct = NAN;
		if (rep->base < 0 || r->status != LAT_OK)
			continue;
		const struct lat_row *b = &rep->rows[rep->base];
		r->lat_red_pct = 100.0 * (1.0 - r->med.mean / b->med.mean);
		r->jit_red_pct = 100.0 * (1.0 - r->med.jitter / b->med.jitter);
		r->p50_red_pct = 100.0 * (1.0 - r->med.p50 / b->med.p50);
	}
}

/* The median, min and max over repeats of a/b (a and b: the same figure
 * of two rows, measured in the same repeats). */
static void ratio_over_repeats(const struct lat_row *a, const struct lat_row *b, size_t off, double out[3])
{
	unsigned n = a->nrep < b->nrep ? a->nrep : b->nrep;
	double v[n ? n : 1];

	out[0] = out[1] = out[2] = NAN;
	for (unsigned i = 0; i < n; i++)
		v[i] = *(const double *)((const char *)&a->rep[i] + off) / *(const double *)((const char *)&b->rep[i] + off);
	if (!n)
		return;
	out[0] = lat_median(v, n); /* sorts v */
	out[1] = v[0];
	out[2] = v[n - 1];
}

/* The row of the same style and transport t that ran, or NULL. */
static const struct lat_row *row_of(const struct lat_report *rep, enum lat_style s, enum lat_transport t)
{
	const struct lat_row *u = NULL;

	for (unsigned j = 0; j < rep->nrows; j++)
		if (rep->rows[j].style == s && rep->rows[j].transport == t && rep->rows[j].status == LAT_OK)
			u = &rep->rows[j];
	return u;
}

/* Every row against the uds row of its style (the kernel's own Unix
 * socket, which the fast path's blocking rows are to match) and against
 * the shm row of its style (the floor, which the tier's spinning row is
 * to approach: issue 23 asks for 1.3x). Repeat by repeat, because the
 * floor itself moves with where the machine's two vCPUs run: 0.10, 0.22
 * and 0.80 us on one day (docs/shm.md). */
void lat_compare_repeats(struct lat_report *rep)
{
	for (unsigned i = 0; i < rep->nrows; i++) {
		struct lat_row *r = &rep->rows[i];
		const struct lat_row *u = row_of(rep, r->style, LAT_UDS), *s = row_of(rep, r->style, LAT_SHM);

		r->uds_p50[0] = r->uds_p50[1] = r->uds_p50[2] = NAN;
		r->uds_p99[0] = r->uds_p99[1] = r->uds_p99[2] = NAN;
		r->floor_p50[0] = r->floor_p50[1] = r->floor_p50[2] = NAN;
		if (r->status != LAT_OK)
			continue;
		if (u && u != r) {
			ratio_over_repeats(r, u, offsetof(struct lat_figures, p50), r->uds_p50);
			ratio_over_repeats(r, u, offsetof(struct lat_figures, p99), r->uds_p99);
		}
		if (s && s != r)
			ratio_over_repeats(r, s, offsetof(struct lat_figures, p50), r->floor_p50);
	}
}

/* A CDF of the pooled samples at fixed percentiles, dense in the tail. */
void lat_cdf(struct lat_row *row)
{
	static const double pts[] = { 0, 0.5, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 35, 40,
		45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 92.5, 95, 97, 98, 99, 99.5, 99.8,
		99.9, 99.95, 99.99, 100 };

	lat_sort(row->pool, row->npool);
	row->ncdf = 0;
	if (!row->npool)
		return;
	for (size_t i = 0; i < sizeof(pts) / sizeof(pts[0]); i++) {
		row->cdf[row->ncdf][0] = pts[i];
		row->cdf[row->ncdf][1] = pts[i] >= 100 ? row->pool[row->npool - 1]
						       : lat_percentile(row->pool, row->npool, pts[i]);
		row->ncdf++;
	}
}
