/* Process-wide services that know no connection, used by the negotiation
 * and the data path: sock_diag queries (diag.c), the counts `loopfast
 * status` shows (stats.c), LOOPFAST_EXCLUDE (exclude.c), the signal
 * counters (signals.c) and the fork handlers' registration (fork.c). Above
 * the fd table; the protocol's endpoints are src/protocol's. */
#ifndef LF_PROCESS_H
#define LF_PROCESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "protocol.h" /* the protocol: version, names, marks (src/protocol) */

/* ---- diag.c: sock_diag lookups (unprivileged, one netlink round trip) */

struct lf_diag_sock {
	int family;        /* of the socket */
	struct lf_ep ep;   /* its local address (v4-mapped turned into v4) */
	uint32_t uid;      /* owner (the creator's fsuid), as the kernel reports it */
	uint32_t inode;    /* 0 for a socket no process holds any more */
	uint8_t state;     /* TCP state */
};

/* The TCP listener the kernel would hand a connection from `from` to `dst`
 * to (exact address before wildcard, dual-stack included): 0, -ENOENT or
 * -errno. */
int lf__diag_listener(const struct lf_ep *dst, const struct lf_ep *from, struct lf_diag_sock *out);
/* The TCP socket whose local end is `local` and remote end `remote`
 * (established or closing; TIME_WAIT entries report uid 0 and inode 0):
 * 0, -ENOENT or -errno. */
int lf__diag_socket(const struct lf_ep *local, const struct lf_ep *remote, struct lf_diag_sock *out);
void lf__diag_ready(void);
/* Is a TCP socket bound to ep, owned by uid, that neither listens nor
 * connects (a client between its bind and its connect)? 1 yes, 0 no or a
 * kernel that cannot say (before Linux 6.7), -errno. A dump of the
 * kernel's whole bind table: about 0.3 ms, to be asked rarely. */
int lf__diag_bound(const struct lf_ep *ep, uint32_t uid);
/* After a look-up: whether socket fd is in the network namespace that
 * look-up saw. A process can make sockets in other namespaces (unshare,
 * setns), and a loopback connect there must not be negotiated here: the
 * listener found and the rendezvous reached would be another
 * namespace's. True when the kernel cannot tell (before Linux 5.14). */
bool lf__diag_same_netns(int fd);
/* Whether a Unix stream socket listens on the abstract name: 1, 0, or
 * -errno (one system call; nothing reaches the name's owner). */
int lf__diag_rendezvous(const struct sockaddr_un *name, socklen_t len);

/* ---- stats.c: per-process counts that `loopfast status` shows */

/* What happened to one connection. The client side counts the fast-path
 * connections it made and why the others took plain TCP; the server side
 * counts the connections it claimed and the hellos it refused. */
enum lf_event {
	LF_EV_FAST_CLIENT,       /* a connection switched to the fast path (client) */
	LF_EV_FAST_SERVER,       /* ... (server, claimed) */
	LF_EV_NOT_LOOPBACK,      /* destination not a loopback address */
	LF_EV_NO_LISTENER,       /* sock_diag found no listener for the destination */
	LF_EV_NO_RENDEZVOUS,     /* the listener has no rendezvous: peer not opted in */
	LF_EV_NOT_OWNER,         /* the rendezvous is not the listener owner's (squatted) */
	LF_EV_BUSY,              /* the rendezvous is full (flooded, or a burst) */
	LF_EV_FAILED,            /* the hello could not be set up (bind, fds, memory) */
	LF_EV_EXCLUDED,          /* LOOPFAST_EXCLUDE names the destination or listener */
	LF_EV_PLAIN_PEER,        /* server: the client queued no hello (not opted in) */
	LF_EV_UNVOUCHED,         /* server: a hello the kernel did not vouch for was dropped */
	LF_EV_DROPPED,           /* server: a hello was dropped (its uid over its share) */
	LF_EV_ORPHANED,          /* client: the server closed the TCP connection unclaimed (EOF given) */
	LF_NEVENTS
};
void lf__count(enum lf_event ev);
/* The page, as `loopfast status` reads it through /proc/PID/fd (a memfd
 * named "loopfast-stats"): counts indexed by enum lf_event. New events are
 * only ever added at the end; a reader takes as many counts as the page
 * holds. */
#define LF_STATS_MAGIC 0x5453464cu /* "LFST" */
#define LF_STATS_VERSION 1
#define LF_STATS_NAME "loopfast-stats"
struct lf_stats {
	uint32_t magic, version;
	atomic_ullong count[LF_NEVENTS];
};

/* ---- exclude.c: LOOPFAST_EXCLUDE, listeners and destinations kept on plain TCP */

#define LF_EXCLUDE_MAX 64
struct lf_exclude_err {
	int nbad;          /* bad entries (ignored) */
	char entry[64];    /* the first of them */
	const char *why;   /* what is wrong with it */
};
/* Parses a comma-separated list of PORT, ADDR:PORT, [ADDR6]:PORT,
 * localhost:PORT into out[] (an entry of family AF_UNSPEC matches every
 * address). Returns the number of endpoints; bad entries are skipped and
 * reported in *err. Pure: the CLI and the unit test call it. */
int lf__exclude_parse(const char *list, struct lf_ep *out, int max, struct lf_exclude_err *err);
/* Whether ep (a destination, or a listener's address) matches tab[0..n). */
bool lf__exclude_match(const struct lf_ep *tab, int n, const struct lf_ep *ep);
/* Reads LOOPFAST_EXCLUDE once (later calls do nothing); a bad entry is
 * said on one line of stderr and ignored. */
void lf__exclude_init(void);
/* Whether LOOPFAST_EXCLUDE keeps ep on plain TCP. Keeps errno. */
bool lf__excluded(const struct lf_ep *ep);

/* ---- signals.c: handlers wrapped so that loopfast's own waits end as the application's would */

extern bool lf__spin_used; /* some socket may spin: wrap signal handlers */
/* Sets lf__spin_used; the first time, wraps the handlers already installed
 * (signals.c). */
void lf__signals_wrap(void);
/* Handlers that ran on this thread (signals.c), and those of them without
 * SA_RESTART. Per thread: a signal handled on another thread interrupts no
 * call of this one, as with TCP. Initial-exec: read in signal handlers. */
#define LF_SIG_TLS __thread __attribute__((tls_model("initial-exec")))
extern LF_SIG_TLS atomic_uint lf__sig_seen;
extern LF_SIG_TLS atomic_uint lf__sig_interrupt;

/* ---- fork.c: every fork handler, registered in one place */

/* Registers the handlers below once (pthread_atfork), in fork.c's fixed
 * order; called by each subsystem before it first holds what a fork must
 * handle (a lock, a descriptor, a cached pid). */
void lf__fork_init(void);
void lf__bell_fork_prepare(void);
void lf__shm_fork_prepare(void);
void lf__shm_fork_after(void); /* both sides of a fork: counted */
void lf__shm_spin_fork_child(void);
void lf__shm_epoll_fork_child(void);
void lf__shm_mem_fork_prepare(void);
void lf__shm_mem_fork_after(void);
void lf__sopt_fork_prepare(void);
void lf__sopt_fork_parent(void);
void lf__sopt_fork_child(void);
void lf__diag_fork_prepare(void);
void lf__diag_fork_parent(void);
void lf__diag_fork_child(void);
void lf__stats_fork_child(void);
void lf__connect_fork_child(void);

#endif
