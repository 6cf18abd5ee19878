/* `loopfast bench latency`: shared types of the ping-pong latency benchmark.
 *
 * Files: bench_latency.c (options, the run loop, plot), latency_run.c (the two
 * processes, connection set-up, timeouts), latency_io.c (socket and shm
 * completion styles), latency_uring.c (io_uring styles), latency_stats.c
 * (statistics), latency_report.c (table, JSON, machine info),
 * latency_sockperf.c (the sockperf cross-check).
 */
#ifndef LF_LATENCY_H
#define LF_LATENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum lat_style { LAT_BLOCK, LAT_EPOLL, LAT_SPIN, LAT_URING, LAT_URING_POLL, LAT_NSTYLES };
enum lat_transport { LAT_TCP, LAT_FASTPATH, LAT_FASTPATH_SPIN, LAT_UDS, LAT_SHM, LAT_FASTPATH_SHM, LAT_FASTPATH_SHM_SPIN,
		    LAT_NTRANSPORTS };

extern const char *const lat_style_names[LAT_NSTYLES];
extern const char *const lat_transport_names[LAT_NTRANSPORTS];

/* Returns NULL if the style runs on the transport, else why it does not
 * (a row that makes no sense, not one that failed). */
const char *lat_combo_na(enum lat_style s, enum lat_transport t);

#define LAT_MAX_SIZE (1u << 20)
#define LAT_MAX_COUNT 10000000u
#define LAT_REASON_LEN 256
#define LAT_SP_SECONDS 2   /* sockperf -t, per repeat */
#define LAT_MAX_REPEAT 100
#define LAT_POOL_MAX 100000 /* samples per row kept for the CDF */

struct lat_opts {
	unsigned styles;     /* bit mask of enum lat_style */
	unsigned transports; /* bit mask of enum lat_transport */
	size_t size;
	unsigned count, warmup, repeat;
	bool pin;
	int cpu[2];          /* sender, echoer; -1 when not pinned */
	unsigned timeout_s;  /* per run of a row */
	unsigned spin_us;    /* for fastpath-spin */
	bool spin_backoff;   /* false: LOOPFAST_SPIN_BACKOFF=0 for fastpath-spin */
	bool compare_sockperf;
	const char *json_path, *plot_path;
	const char *self_exe;  /* this loopfast binary, for `loopfast run` */
};

/* The figures of one run (or the medians over repeats). Microseconds. */
struct lat_figures {
	double mean, p50, p99, p999, max, min, jitter;
	double rt_per_s;     /* measured round trips / elapsed wall time */
	double cpu_per_rt;   /* user+sys CPU of both processes / round trips */
};

/* What the two processes of one run report back (in shared memory). */
struct lat_side {
	int status;                  /* 0 ok, 1 unavailable, 2 failed */
	char reason[LAT_REASON_LEN];
	char note[LAT_REASON_LEN];   /* e.g. an io_uring flag that was not available */
	double cpu_s;                /* user+sys over the measured phase */
	double wall_s;               /* wall time of the measured phase */
};

enum lat_status { LAT_OK, LAT_UNAVAILABLE, LAT_FAILED };

struct lat_row {
	enum lat_style style;
	enum lat_transport transport;
	enum lat_status status;
	char reason[LAT_REASON_LEN];
	char note[LAT_REASON_LEN];
	unsigned nrep;               /* repeats that ran */
	struct lat_figures *rep;     /* [repeat] */
	struct lat_figures med, lo, hi; /* median, min and max over repeats */
	double lat_red_pct, jit_red_pct; /* against the base row: mean, jitter */
	double p50_red_pct;          /* the same for the median (JSON only) */
	/* Against the uds row of the same style, repeat by repeat (the rows of
	 * one repeat run back to back): median, min and max of the ratios of
	 * p50 and of p99; NAN without such a row. */
	double uds_p50[3], uds_p99[3];
	/* Against the shm row of the same style (the floor: a bare ring),
	 * p50 repeat by repeat, as above; NAN without one. */
	double floor_p50[3];
	double *pool;                /* samples of all repeats for the CDF (µs), at most LAT_POOL_MAX */
	size_t npool;
	double cdf[64][2];           /* (percentile, µs) for the plot */
	unsigned ncdf;
};

struct lat_sockperf {
	const char *transport;       /* "tcp", "unix", "fastpath" or "fastpath-shm-spin" */
	enum lat_status status;
	char reason[LAT_REASON_LEN];
	char command[512];
	double p50, mean, p99;       /* round trip (--full-rtt), µs: medians over repeats */
	double p50_lo, p50_hi;       /* p50 range over repeats */
	unsigned nrep;
	double rep_p50[LAT_MAX_REPEAT], rep_p99[LAT_MAX_REPEAT], rep_mean[LAT_MAX_REPEAT];
	const struct lat_row *ours;  /* the row it is compared with, or NULL */
};

struct lat_machine {
	char cpu_model[128];
	int cpus;
	char kernel[256];
	double loadavg[3];
	char started[32];
};

struct lat_report {
	const struct lat_opts *opts;
	struct lat_machine machine;
	struct lat_row *rows;
	unsigned nrows;
	int base;                    /* index of the row others are compared to, -1 if none */
	struct lat_sockperf sp[4];     /* tcp, unix, fastpath (loopfast run), fastpath-shm-spin (--tier shm --spin-us) */
	unsigned nsp;
};

/* latency_stats.c */
void lat_sort(double *v, size_t n);
double lat_percentile(const double *sorted, size_t n, double pct);
void lat_figures_from(const double *sorted, size_t n, struct lat_figures *f);
double lat_median(double *v, size_t n);
void lat_aggregate(struct lat_row *row);
void lat_compare(struct lat_report *rep);
void lat_compare_repeats(struct lat_report *rep);
void lat_cdf(struct lat_row *row);

/* latency_run.c: runs one repeat of a row. Fills samples (ns, count of
 * them), the two sides' reports (sender, echoer), the reason a row did not
 * run and a note; returns enum lat_status. */
int lat_run_row(const struct lat_opts *o, enum lat_style s, enum lat_transport t,
		uint64_t *samples, struct lat_side side[2], char *reason, char *note);

/* latency_report.c */
void lat_machine_info(struct lat_machine *m);
void lat_print_table(FILE *f, const struct lat_report *rep);
void lat_print_json(FILE *f, const struct lat_report *rep);
void lat_sockperf_print(FILE *f, const struct lat_report *rep);

/* latency_sockperf.c: init once, run once per repeat (after the rows),
 * finish after the rows' figures are final. */
void lat_sockperf_init(struct lat_report *rep);
void lat_sockperf_run(const struct lat_opts *o, struct lat_report *rep);
void lat_sockperf_finish(struct lat_report *rep);

/* Channel between the two processes and the style that drives it. */
struct lat_shm_ring;
struct lat_chan {
	int fd;                      /* socket, -1 for shm */
	struct lat_shm_ring *tx, *rx;/* shm only */
	size_t size;
};

struct lat_ops {
	/* Per-process set-up after the connection exists; may fill note. */
	int (*init)(void **ctx, struct lat_chan *c, char *reason, char *note);
	int (*send)(void *ctx, const void *buf, size_t len);
	int (*recv)(void *ctx, void *buf, size_t len);
	void (*fini)(void *ctx);
	/* Optional: buffers of size bytes the style wants messages built in
	 * (registered buffers); NULL means any memory will do. */
	void (*bufs)(void *ctx, void **tx, void **rx);
};

/* latency_io.c / latency_uring.c: the ops of a style on a transport. */
const struct lat_ops *lat_socket_ops(enum lat_style s);
const struct lat_ops *lat_uring_ops(bool poll);
const struct lat_ops *lat_shm_ops(void);
size_t lat_shm_bytes(size_t size);
void lat_shm_setup(void *mem, size_t size, struct lat_shm_ring **a, struct lat_shm_ring **b);

#endif
