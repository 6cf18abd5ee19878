/* `loopfast bench connect`: connection setup rate (the TCP_CRR form:
 * connect, 1-byte request, 1-byte response, close) between a server
 * process and a client process, for plain TCP, the fast path (both ends
 * opted in), the fast path with only the client opted in, a Unix socket
 * reference, and (when asked) both ends under `loopfast run`'s seccomp
 * supervisor, at several numbers of concurrent clients.
 * bench_connect.c parses options and runs the rows; connect_run.c holds
 * the server, the client and the flooder; connect_report.c the table, the
 * JSON and the plot. */
#ifndef LF_BENCH_CONNECT_H
#define LF_BENCH_CONNECT_H

#include <stdbool.h>
#include <stdint.h>

enum { CONN_TCP, CONN_FAST, CONN_CLIENT_ONLY, CONN_UNIX, CONN_TCP_FLOOD, CONN_FAST_FLOOD, CONN_TCP_PARK, CONN_FAST_PARK,
       CONN_TCP_UNIX, CONN_SECCOMP, CONN_NPATHS };
#define CONN_DEFAULT_PATHS ((1u << CONN_TCP_PARK) - 1) /* the +park, tcp+unix and seccomp rows only when asked */
#define CONN_FLOODED(p) ((p) == CONN_TCP_FLOOD || (p) == CONN_FAST_FLOOD)
#define CONN_PARKED(p) ((p) == CONN_TCP_PARK || (p) == CONN_FAST_PARK)
#define CONN_FAST_SERVER(p) ((p) == CONN_FAST || (p) == CONN_FAST_FLOOD || (p) == CONN_FAST_PARK)
#define CONN_OPTED_IN(p) ((p) == CONN_CLIENT_ONLY || CONN_FAST_SERVER(p))
extern const char *const conn_path_names[CONN_NPATHS];

#define CONN_MAX_CLIENTS 4096
#define CONN_MAX_LEVELS 16
#define CONN_MAX_REPEAT 20

/* What one run measured. */
struct conn_result {
	double rate;          /* completed connections per second */
	uint64_t done;        /* connections completed in the timed window */
	uint64_t errors;      /* connections that failed (connect, I/O or bad byte) */
	uint64_t sampled;     /* connections whose path was checked */
	uint64_t fast;        /* ... of which were on the fast path (both ends) */
	uint64_t flood;       /* junk hellos the flooder queued (flood rows), connections the parker made (park rows) */
	uint64_t accepted;    /* connections the server accepted in the whole run */
	uint64_t server_cpu_us; /* the server's CPU time (user + system) in the whole run */
	int err;              /* -errno when the run itself failed */
};

struct conn_opts {
	unsigned paths;                 /* bit mask of CONN_* */
	unsigned levels[CONN_MAX_LEVELS]; /* concurrent clients per level */
	unsigned nlevels;
	double time_s, warmup_s;
	unsigned repeat;
	const char *json_path, *plot_path;
};

/* One run: a server process and a client process (each the child of its
 * own supervisor in the seccomp row, opting nothing in: the supervisor
 * negotiates for both; and, for the flood rows,
 * a flooder of another uid when run as root; for the park rows, a parker
 * of another uid), all children of the caller. The flooder runs in both
 * flood rows, so that tcp+flood measures what its CPU use alone costs
 * plain TCP; the parker likewise. */
int conn_run(int path, unsigned clients, const struct conn_opts *o, struct conn_result *r);

struct conn_row {
	int path;
	unsigned clients;
	unsigned n;
	struct conn_result runs[CONN_MAX_REPEAT];
};

void conn_report(const struct conn_row *rows, unsigned nrows, const struct conn_opts *o);
int conn_write_json(const struct conn_row *rows, unsigned nrows, const struct conn_opts *o);

#endif
