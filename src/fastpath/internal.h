/* Internal interfaces of libloopfast. Non-static internal symbols carry the
 * lf__ prefix; nothing here is exported (see loopfast.map). */
#ifndef LF_INTERNAL_H
#define LF_INTERNAL_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define LF_EXPORT __attribute__((visibility("default")))

/* ---- addrmap.c: loopback addresses and the abstract names that encode them */

/* A TCP endpoint, always kept in its own family (v4-mapped v6 addresses are
 * turned into plain v4 by lf__ep_from_sockaddr). */
struct lf_ep {
	int family; /* AF_INET or AF_INET6 */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	} addr;
	uint16_t port; /* host order */
};

#define LF_NAME_PREFIX "loopfast/2/"
#define LF_NAME_MAX 108

bool lf__ep_from_sockaddr(struct lf_ep *ep, const struct sockaddr *sa, socklen_t len);
/* Writes ep as a sockaddr of the given family (v4 in v6 as v4-mapped). */
socklen_t lf__ep_to_sockaddr(const struct lf_ep *ep, int family, struct sockaddr_storage *ss);
bool lf__ep_is_loopback(const struct lf_ep *ep);
bool lf__ep_is_any(const struct lf_ep *ep);
bool lf__ep_equal(const struct lf_ep *a, const struct lf_ep *b);
int lf__ep_format(const struct lf_ep *ep, char *buf, size_t len); /* "127.0.0.1:80", "[::1]:80" */

/* The abstract names of the protocol (see docs/security.md):
 *   rendezvous of a TCP listener   "\0loopfast/2/L/<fam>/<listener inode>"
 *   stash of that listener         "\0loopfast/2/S/<fam>/<listener inode>"
 *   client end of a connection     "\0loopfast/2/C/<fam>/<caddr>/<cport>/<saddr>/<sport>/<nonce>"
 * where fam is the family of the listener, or of the client's TCP socket, and the nonce (the TCP
 * socket's inode) keeps the name unique when the kernel reuses an
 * ephemeral port. Each returns the sockaddr length. */
socklen_t lf__name_listener(struct sockaddr_un *sun, int family, unsigned long ino);
socklen_t lf__name_stash(struct sockaddr_un *sun, int family, unsigned long ino);
socklen_t lf__name_client(struct sockaddr_un *sun, int family, const struct lf_ep *c,
			  const struct lf_ep *s, unsigned long nonce);
enum lf_name_kind { LF_NAME_NONE, LF_NAME_LISTENER, LF_NAME_CLIENT };
/* Parses an abstract name (never trusts it: any process can bind any free
 * name). Both kinds fill *family (of the listener, or of the client's TCP
 * socket); a listener name fills *ino; a client name fills the client
 * endpoint in *a and the server endpoint in *b. */
enum lf_name_kind lf__name_parse(const struct sockaddr_un *sun, socklen_t len, unsigned long *ino, int *family,
				 struct lf_ep *a, struct lf_ep *b);

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

/* ---- sys: raw system calls that bypass any interposer (ours included) */

int lf__sys_close(int fd);
int lf__sys_socket(int domain, int type, int proto);
int lf__sys_listen(int fd, int backlog);
int lf__sys_connect(int fd, const struct sockaddr *sa, socklen_t len);
int lf__sys_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
int lf__sys_dup3(int oldfd, int newfd, int flags);
int lf__sys_fcntl(int fd, int cmd, long arg);
int lf__sys_getsockname(int fd, struct sockaddr *sa, socklen_t *len);
int lf__sys_getpeername(int fd, struct sockaddr *sa, socklen_t *len);
int lf__sys_getsockopt(int fd, int level, int opt, void *val, socklen_t *len);
int lf__sys_setsockopt(int fd, int level, int opt, const void *val, socklen_t len);
int lf__sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int lf__sys_poll1(int fd, short events, int timeout_ms); /* revents, 0 on timeout, -1 on error */
ssize_t lf__sys_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *sa, socklen_t sl);
ssize_t lf__sys_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *sl);

/* ---- fdtab.c: per-fd state, an array indexed by fd */

#define LF_FD_MAX 65536

enum {
	LF_F_OPTIN = 1u << 0,     /* opted in, not yet connected or listening */
	LF_F_FAST = 1u << 1,      /* a fast-path connection (Unix stream) */
	LF_F_HIDDEN = 1u << 2,    /* one of loopfast's own descriptors */
	LF_F_NOFAST = 1u << 3,    /* listener that cannot serve the fast path */
	LF_F_INPROGRESS = 1u << 4, /* fast path reported EINPROGRESS to connect */
	LF_F_NONBLOCK = 1u << 5,  /* fast-path socket in non-blocking mode */
	LF_F_RCVTIMEO = 1u << 6,  /* fast-path socket with a receive timeout */
	LF_F_TCP = 1u << 7,       /* a TCP socket (family in .family) */
	LF_F_PENDING = 1u << 8,   /* a TCP connect in progress with a hello queued (connect.c) */
};

/* Options of the TCP level (and IP level) that a Unix socket does not have:
 * remembered so that getsockopt returns what setsockopt set. */
enum { LF_OPT_NODELAY, LF_OPT_KEEPIDLE, LF_OPT_KEEPINTVL, LF_OPT_KEEPCNT, LF_OPT_MAXSEG,
       LF_OPT_USER_TIMEOUT, LF_OPT_QUICKACK, LF_OPT_CORK, LF_OPT_NOTSENT_LOWAT, LF_OPT_TOS,
       LF_OPT_TTL, LF_OPT_V6ONLY, LF_OPT_TCLASS, LF_NOPT };

struct lf_shm;

/* A TCP listener with a rendezvous. Shared between the fds that dup each
 * other in one process; every process that accepts on the listener has
 * its own copy, and they share the kernel objects (rendezvous, stash) and
 * the shared page. */
struct lf_listener {
	atomic_int refs;
	int family;          /* of the TCP listener */
	unsigned long ino;   /* its inode: names the rendezvous and the stash */
	struct lf_ep ep;     /* its address (wildcard or loopback) and port */
	int rdv;             /* the rendezvous: abstract Unix stream listener */
	int chan;            /* the stash: datagram socket connected to itself */
	int shmfd;           /* memfd: claim lock and stash index */
	struct lf_shm *shm;  /* its mapping */
	int reserve[2];      /* descriptors released for a claim at the fd limit */
	bool marks;          /* TCP_SAVE_SYN is ours: the SYN says whether a hello was queued */
};

/* The MSS a fast-path client advertises in its SYN: says "my hello is
 * queued". The doorbell never carries data, so its MSS costs nothing;
 * firewall rules that clamp the MSS lower it, never to this. */
#define LF_HELLO_MSS 89

#define LF_EPOLL_MAX 2
struct lf_epreg {
	int epfd1; /* epoll fd + 1; 0 when unused */
	struct epoll_event ev;
};

struct lf_fd {
	atomic_uint flags;
	int family;                 /* TCP family of a fast-path socket */
	unsigned spin_us;           /* busy-poll budget (0 = off); for an epoll fd: its members' */
	unsigned spin_fail;         /* consecutive spins that ended in a block */
	unsigned spin_skip;         /* calls left without spinning (back-off) */
	int spin_members;           /* epoll fd: registered fast-path sockets that spin */
	int pending_members;        /* epoll fd: registered sockets with a connect pending */
	struct lf_listener *lst;    /* for listeners with a rendezvous */
	int *home;                  /* for hidden fds: where their number is kept */
	int pend;                   /* pending connect (LF_F_PENDING): the hidden Unix socket */
	int pend_err;               /* pending connect that failed: its error, for SO_ERROR */
	int opt[LF_NOPT];           /* TCP/IP-level values the application set */
	uint32_t optset;            /* which opt[] were set (others: defaults) */
	uint32_t sockset;           /* which carried SOL_SOCKET options were set */
	struct lf_epreg ep[LF_EPOLL_MAX]; /* epoll registrations of an opted-in socket */
};

/* LOOPFAST_DEBUG=1: say on stderr why a connection took plain TCP. */
extern bool lf__debug_on;
void lf__debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

extern bool lf__global_optin; /* LOOPFAST_ENABLE=1: opt in every TCP socket */
extern unsigned lf__global_spin_us;

struct lf_fd *lf__fd(int fd); /* NULL when fd is out of range */
void lf__fd_reset(int fd);    /* forget everything about fd (it was closed) */
void lf__fd_copy(int from, int to); /* fd "to" became a dup of "from" */
/* Options: setsockopt records what the application sets on any socket,
 * so that the fast path carries exactly that over, and answers TCP-level
 * getsockopt on a Unix socket. */
int lf__opt_index(int level, int opt);       /* -1 for unknown */
int lf__opt_value(const struct lf_fd *f, int idx);
void lf__opt_record(int fd, int level, int opt, const void *val, socklen_t len);
extern const int lf__carried[];               /* SOL_SOCKET options carried over */
extern const int lf__ncarried;
/* Moves one of loopfast's own descriptors out of the way of the
 * application's numbering, marks it hidden and records where its number is
 * kept (*home is updated if the application later takes the number).
 * Returns the new fd (also stored in *home). */
int lf__fd_hide(int fd, int *home);
/* Forgets a hidden fd (before loopfast closes it). */
void lf__fd_unhide(int fd);
/* The application is about to reuse a hidden fd's number: move it. */
void lf__fd_relocate(int fd);
/* A close-on-exec duplicate of fd among the hidden numbers, or -1. */
int lf__fd_dup_hidden(int fd);

/* ---- spin.c: user-space busy polling for fast-path sockets */

void lf__fd_nonblock(int fd, bool on);
void lf__fd_rcvtimeo(int fd, bool on);
void lf__epoll_member(int epfd, int fd, int op);
extern bool lf__spin_used; /* some socket may spin: wrap signal handlers */

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

/* ---- listener.c: rendezvous, stash and shared page of a listener */

/* Sets up (or adopts, after exec or in another process) the rendezvous of
 * a listening socket. 0 (fast path served), or -errno (plain TCP only). */
int lf__listen_optin(int fd);
void lf__listener_put(struct lf_listener *l);
/* At start-up: rendezvous for the listening sockets the process inherited. */
void lf__adopt_inherited(void);
/* Makes a listener's own descriptors follow the listener across exec. */
void lf__listener_cloexec(struct lf_listener *l, bool cloexec);
/* Holds (hold=true) or releases the listener's reserve descriptors. */
void lf__listener_reserve(struct lf_listener *l, bool hold);
/* Claim lock of the listener (robust, shared by every process that
 * accepts on it; only ever held across non-blocking calls). */
void lf__listener_lock(struct lf_listener *l);
void lf__listener_unlock(struct lf_listener *l);
/* The stash: hellos taken from the rendezvous by one accept for another.
 * Under the lock. put: 0, or -ENOSPC when the stash is full or, for a
 * hello the kernel has not vouched for, its sender's uid is over its share
 * (the caller drops the hello). take: the fd of a stashed hello for
 * `client` (its sender's uid in *uid), or -1. */
int lf__stash_put(struct lf_listener *l, int fd, const struct lf_ep *client, uint32_t uid, bool vouched);
int lf__stash_take(struct lf_listener *l, const struct lf_ep *client, uint32_t *uid);
/* Remembers / asks whether a hello of uid for `client` was dropped while
 * its client may already have committed (the accept then resets the TCP
 * connection if its client is of that uid, so that both ends see it fail
 * rather than split). */
void lf__stash_poison(struct lf_listener *l, const struct lf_ep *client, uint32_t uid);
bool lf__stash_poisoned(struct lf_listener *l, const struct lf_ep *client, uint32_t *uid);

/* ---- claim.c: the server side of the negotiation */

/* After accept returned newfd on lfd: switch it to the fast path when its
 * client negotiated it. Returns 0, or -ECONNABORTED when the connection
 * was reset because its hello was lost (the caller then accepts again). */
int lf__accept_claim(int lfd, int newfd, int flags);

/* ---- connect.c: the client side of the negotiation */

/* Returns 1 when it handled the connect (result in *ret and errno), 0
 * when the caller must do a plain connect. */
int lf__connect(int fd, const struct sockaddr *sa, socklen_t len, int *ret);
/* A connect on fd is pending with its hello queued: completes the switch
 * if the TCP handshake has finished (wait: blocking callers wait for it,
 * interruptibly). Returns 0, or -1 with errno (EINTR, EAGAIN). */
int lf__finalize(int fd, bool wait);
static inline bool lf__pending(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	return f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_PENDING);
}
/* Pending connects registered in an epoll set: finalizes those done. */
void lf__finalize_epoll(int epfd);
/* Forgets the pending state of fd (it is being closed). */
void lf__pending_drop(int fd);
/* True when fd is a fast-path socket; fills its TCP endpoints and family. */
bool lf__fast_endpoints(int fd, int *family, struct lf_ep *local, struct lf_ep *peer);
/* Puts the Unix socket unx in place of fd (same number and flags), carries
 * the options src recorded, and marks fd as a fast-path socket. The TCP
 * socket it replaces is closed, with a reset when `reset`. */
int lf__switch_fd(int unx, int fd, int family, const struct lf_fd *src, bool nonblock, bool cloexec, bool reset);

#endif
