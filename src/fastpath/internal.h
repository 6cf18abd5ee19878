/* Internal interfaces of libloopfast. Non-static internal symbols carry the
 * lf__ prefix; nothing here is exported (see loopfast.map). */
#ifndef LF_INTERNAL_H
#define LF_INTERNAL_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "protocol.h" /* the protocol: version, names, marks (src/protocol) */
#include "shm.h"      /* the shared-memory tier (shm.c) */

#define LF_EXPORT __attribute__((visibility("default")))

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
/* Whether a Unix stream socket listens on the abstract name: 1, 0, or
 * -errno (one system call; nothing reaches the name's owner). */
int lf__diag_rendezvous(const struct sockaddr_un *name, socklen_t len);

/* ---- sys.c: raw system calls that bypass any interposer (ours included) */

#include "sys.h"

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
	LF_F_SHUT_RD = 1u << 9,   /* fast-path socket after shutdown(SHUT_RD), kept as TCP does */
	LF_F_SHUT_WR = 1u << 10,  /* fast-path socket after shutdown(SHUT_WR) (for TCP_INFO) */
	LF_F_RESET = 1u << 11,    /* fast-path socket whose peer was seen to reset it (for TCP_INFO) */
	LF_F_UNCONFIRMED = 1u << 12, /* client fast-path socket whose claim is not seen yet (bell.c) */
	LF_F_SHM = 1u << 13,      /* fast-path socket with shm tier state (shm.c; .shm) */
	LF_F_TIER = 1u << 14,     /* socket or listener that asked for the shm tier */
};

/* Options the application set that the Unix socket cannot hold, as TCP
 * read them back (sockopt.c): packed records of {int16 level, int16 opt,
 * uint8 len, value}, about 28 int-valued ones per socket. */
#define LF_OPTBYTES 256

/* A listener's shared page (a memfd, mapped by every process that accepts
 * on the listener): listener.c makes, checks and maps it and holds its
 * lock; stash.c keeps the stash's index, shares and poison ring in it.
 * Its layout is the protocol's: a change bumps LF_PROTO_VERSION. */
#define LF_STASH_BUCKETS 65536 /* counters: each hello counts in two */
#define LF_STASH_UIDS 256
#define LF_STASH_POISON 256
struct lf_shm {
	uint32_t magic;                      /* LF_PAGE_MAGIC */
	uint32_t version;                    /* LF_PROTO_VERSION */
	pthread_mutex_t lock;
	uint32_t marks;                      /* the creator turned TCP_SAVE_SYN on */
	uint32_t total;                      /* hellos in the stash */
	uint32_t poison_next;
	uint32_t cap;                        /* hellos the stash's buffer holds (its creator measured) */
	struct { uint32_t uid, count; } uids[LF_STASH_UIDS];
	struct { struct lf_ep client; uint32_t uid; } poison[LF_STASH_POISON];
	uint16_t bucket[LF_STASH_BUCKETS];   /* stashed hellos per slot of their client endpoint (two each) */
	uint32_t keyed;                      /* key is set (under the lock, at the first put) */
	uint64_t key[2];                     /* the buckets' hash key: no peer can aim at a bucket */
};

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
	int reserve;         /* a descriptor released for a claim, for the fd limit */
	uint64_t drained_ns; /* when a plain accept last drained the rendezvous (claim.c) */
	atomic_bool inheritable; /* its descriptors stay open across exec */
};

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
	int bell;                   /* LF_F_UNCONFIRMED: the hidden TCP socket (bell.c) */
	uint16_t bell_gen;          /* which bell of this fd an epoll event is for */
	int pend_err;               /* pending connect that failed: its error, for SO_ERROR */
	uint8_t opt[LF_OPTBYTES];   /* options the Unix socket cannot hold, as set */
	uint32_t optset;            /* bytes of opt[] in use */
	uint32_t sockset;           /* which carried SOL_SOCKET options were set */
	struct lf_epreg ep[LF_EPOLL_MAX]; /* epoll registrations of an opted-in socket */
	struct lf_shm_conn *shm;    /* LF_F_SHM: the tier's state (its first member counts references) */
};

/* LOOPFAST_DEBUG=1: say on stderr why a connection took plain TCP. */
extern bool lf__debug_on;
void lf__debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

extern bool lf__global_optin; /* LOOPFAST_ENABLE=1: opt in every TCP socket */
extern unsigned lf__global_spin_us;

/* The entry of fd, NULL when fd is out of range. Inline: every interposed
 * call asks it, and on the data path it is the whole cost of the call for
 * a socket loopfast has nothing to do with (the table is mapped on first
 * use, by lf__fd_map). */
extern struct lf_fd *lf__fdtab;
struct lf_fd *lf__fd_map(int fd);
static inline struct lf_fd *lf__fd(int fd)
{
	struct lf_fd *t = __atomic_load_n(&lf__fdtab, __ATOMIC_ACQUIRE);

	if (__builtin_expect(t != NULL, 1) && (unsigned)fd < LF_FD_MAX)
		return &t[fd];
	return lf__fd_map(fd);
}
/* The same for a look that changes nothing: NULL also while no fd has any
 * state (the table is not mapped yet), which such a look takes as nothing
 * to do. It calls nothing, so that the data path's wrappers need no stack
 * frame before they hand the call on. */
static inline struct lf_fd *lf__fd_peek(int fd)
{
	struct lf_fd *t = __atomic_load_n(&lf__fdtab, __ATOMIC_ACQUIRE);

	return t && (unsigned)fd < LF_FD_MAX ? &t[fd] : NULL;
}
/* Forgets everything about fd (it was closed): first what the layers
 * above registered for the state it holds. */
void lf__fd_reset(int fd);
/* Registered by the layer that sets `flag` (one bit) on an entry, before
 * it first does: what lf__fd_reset calls, with the entry still in place,
 * for an entry that has it (connect.c: LF_F_PENDING, bell.c:
 * LF_F_UNCONFIRMED), in the order of the bits. put: drops the entry's
 * reference to its listener (listener.c). */
void lf__fd_on_drop(unsigned flag, void (*drop)(int fd));
void lf__fd_on_put(void (*put)(struct lf_listener *l));
void lf__fd_copy(int from, int to); /* fd "to" became a dup of "from" */
extern const int lf__carried[];               /* SOL_SOCKET options carried over */
extern const int lf__ncarried;
uint32_t lf__carried_bit(int opt);            /* its bit in lf_fd.sockset */
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
/* Sets lf__spin_used; the first time, wraps the handlers already installed
 * (signals.c). */
void lf__signals_wrap(void);
/* SOL_LOOPFAST options (api.c): 0 or -errno. */
int lf__api_setopt(int fd, int opt, const void *val, socklen_t len);
int lf__api_getopt(int fd, int opt, void *val, socklen_t *len);
/* Handlers that ran on this thread (signals.c), and those of them without
 * SA_RESTART. Per thread: a signal handled on another thread interrupts no
 * call of this one, as with TCP. Initial-exec: read in signal handlers. */
#define LF_SIG_TLS __thread __attribute__((tls_model("initial-exec")))
extern LF_SIG_TLS atomic_uint lf__sig_seen;
extern LF_SIG_TLS atomic_uint lf__sig_interrupt;
uint64_t lf__now_ns(void);           /* CLOCK_MONOTONIC */
/* A fast-path socket with a spin budget. */
static inline bool lf__may_spin(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);
	return f && f->spin_us && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST);
}

/* A socket with shm tier state (shm.c): its data calls go there first. */
static inline bool lf__shm_on(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);
	return f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHM);
}

/* After shutdown(SHUT_RD) (kept by interpose.c, not told to the Unix
 * socket) TCP still returns what is queued, and 0 where it would wait. */
static inline bool lf__shut_rd(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);
	return f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHUT_RD);
}
enum { LF_SPIN_DONE, LF_SPIN_BLOCK };
/* Receives without blocking until data, an error, a signal or the end of
 * the budget. LF_SPIN_DONE: *ret (and errno) is the answer. */
int lf__spin_recvmsg(int fd, struct msghdr *m, int flags, ssize_t *ret);
/* The spin of a wait: calls try() (a zero-timeout wait) until it reports
 * something, a signal arrives, the caller's timeout (ns, <0 = none) or the
 * budget ends. Returns LF_SPIN_DONE with *ret set, or LF_SPIN_BLOCK with the
 * remaining timeout in *left_ns. */
struct lf_waiter {
	int (*try)(void *arg);
	void *arg;
};
int lf__spin_wait(struct lf_fd *f, const struct lf_waiter *w, int64_t timeout_ns, int64_t *left_ns, int *ret);

/* ---- sockopt.c: every socket option has a defined answer on the fast path */

/* True when getsockopt/setsockopt of this SOL_SOCKET option must not go to
 * a fast-path socket's Unix socket (the answer would not be TCP's). */
bool lf__sopt_claimed(int level, int opt);
/* The answer for a fast-path socket of TCP family `family`: 0 or -errno. */
int lf__sopt_get(int fd, int family, int level, int opt, void *val, socklen_t *len);
int lf__sopt_set(int fd, int family, int level, int opt, const void *val, socklen_t len);
/* A set that succeeded on a real TCP socket (before connect, or on a
 * listener): remembered so that the fast path answers the same after
 * connect/accept; an option the fast path cannot keep pins the socket to
 * plain TCP. */
void lf__sopt_note(int fd, int level, int opt, const void *val, socklen_t len);
/* True when fd is a fast-path socket (asked of the kernel); fills family. */
bool lf__fast_family(int fd, int *family);

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

/* Linux 6.16's switch that makes a Unix socket refuse descriptors
 * (SCM_RIGHTS; the sender gets EPERM). Set off on every Unix socket of the
 * fast path, as TCP carries none; older kernels refuse the option, and
 * recvmsg (io.c) closes what arrives instead. */
#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif
void lf__no_rights(int unx);

/* ---- bell.c: a client's TCP socket kept until the claim is seen */

extern atomic_int lf__unconfirmed; /* connections of this process still unconfirmed */
extern bool lf__bells_used;        /* this process ever kept a bell (epoll tags) */
extern bool lf__bell_resets;       /* a bell of this process saw a reset (waits add POLLERR) */
/* Takes the error fd reports once (pend_err), atomically: 0 if none. */
int lf__err_take(int fd);
/* After the client's switch: bell (a hidden dup of the TCP socket) is
 * watched for fd, also in the epoll sets fd is registered in. */
void lf__bell_keep(int fd, int bell);
void lf__bell_drop(int fd);
/* The claim's mark: the server writes it on the TCP connection before
 * closing it; the client's bell takes only the mark for the claim. */
void lf__bell_mark(int tcp);
/* Is the claim's mark queued on this TCP socket (peeked)? A server's
 * close under memory pressure can follow it with a reset, which a pending
 * connect would otherwise take for TCP's error. */
bool lf__bell_marked(int tcp);
/* Looks at fd's bell without waiting: true while the claim is not seen; a
 * server that closed the TCP connection unclaimed shuts fd down. */
bool lf__bell_check(int fd);
/* A blocking call on an unconfirmed fd: waits for `events` on fd or for
 * its bell, with signals as the blocking call. 0, or -1 (EINTR). */
int lf__bell_wait(int fd, short events);
/* poll/select with the bells of the unconfirmed sockets in the set added
 * (*handled false: nothing unconfirmed, the caller waits as usual). */
int lf__bell_poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask, bool *handled);
int lf__bell_select(int n, fd_set *r, fd_set *w, fd_set *e, int64_t timeout_ns, const sigset_t *mask,
		    bool *handled);
void lf__bell_epoll_add(int epfd, int fd);
/* A bell's epoll event: "LFBL" in the high half of its data; in the low
 * half the bell's generation (a registration can outlive its bell: a
 * forked child may hold the same file) and the fd (fast-path sockets are
 * below 65536). */
#define LF_BELL_TAG 0x4c46424c00000000ull
static inline bool lf__bell_tagged(const struct epoll_event *ev, int n)
{
	for (int i = 0; i < n; i++)
		if ((ev[i].data.u64 & 0xffffffff00000000ull) == LF_BELL_TAG)
			return true;
	return false;
}
/* Takes the bells' events out of what epoll_wait returned; the new count. */
int lf__bell_epoll_filter(struct epoll_event *ev, int n);
/* Adds POLLERR / EPOLLERR to what a wait returned for sockets whose reset
 * is not read yet. */
void lf__bell_err_poll(struct pollfd *fds, nfds_t n);
void lf__bell_err_epoll(int epfd, struct epoll_event *ev, int n);
/* After a fork with a bell kept, an epoll set and its bells' one-shot
 * events are shared with another process, which may take an event it
 * cannot act on (it closed its copy of the socket): while such a bell is
 * kept (lf__bell_slicing), epoll waits are cut in slices of
 * LF_BELL_SLICE_MS, after each of which lf__bell_sweep looks at every
 * bell of the process directly. */
#define LF_BELL_SLICE_MS 50
bool lf__bell_slicing(void);
void lf__bell_sweep(void);

/* ---- listener.c: rendezvous and shared page of a listener */

/* Sets up (or adopts, after exec or in another process) the rendezvous of
 * a listening socket. 0 (fast path served), or -errno (plain TCP only). */
int lf__listen_optin(int fd);
/* Before the kernel's listen(): opts in a socket bound to its port (true),
 * so that its rendezvous exists before its listener; false: unbound, opt
 * it in after. lf__listen_undo: listen() failed, back to `flags`. */
bool lf__listen_early(int fd);
void lf__listen_undo(int fd, unsigned flags);
void lf__listener_put(struct lf_listener *l);
/* At start-up: rendezvous for the listening sockets the process inherited. */
void lf__adopt_inherited(void);
/* The preload's exec wrappers (src/preload/exec.c): their next
 * definitions, looked up at start-up. */
void lf__exec_init(void);
/* Makes a listener's own descriptors follow the listener across exec. */
void lf__listener_cloexec(struct lf_listener *l, bool cloexec);
/* How many rendezvous of this process are left open across exec (their
 * listener is): a program exec'd from here inherits them, and must then
 * claim their hellos (src/preload/exec.c). */
extern atomic_int lf__rendezvous_inheritable;
/* Are the listener's saved SYNs loopfast's to read (hello marks)? */
bool lf__listener_marks(const struct lf_listener *l);
/* The program set TCP_SAVE_SYN on listener fd: its saved SYNs are its own. */
void lf__listener_app_saves_syn(int fd);
/* Holds (hold=true) or releases the listener's spare descriptor. */
void lf__listener_reserve(struct lf_listener *l, bool hold);
/* Claim lock of the listener (robust, shared by every process that
 * accepts on it; only ever held across non-blocking calls). */
void lf__listener_lock(struct lf_listener *l);
void lf__listener_unlock(struct lf_listener *l);
/* Whether a connection to `server` reaches this listener: its own
 * address, or for a wildcard listener one the kernel would hand to it
 * (sock_diag). A hello may name a connection of its sender's to a
 * listener of its own on the same port elsewhere on loopback. */
bool lf__listener_serves(const struct lf_listener *l, const struct lf_ep *server);

/* ---- stash.c: hellos taken from the rendezvous by one accept for another */

/* A new stash (its datagram socket `chan`, the page m): sizes its buffer
 * and sets how many hellos it holds (m->cap). */
void lf__stash_init(struct lf_shm *m, int chan);
/* Under the listener's lock. put: 0, or -ENOSPC when the stash is full
 * or, for a hello the kernel has not vouched for, its sender's uid is over
 * its share (the caller drops the hello). `server` is the server end its
 * name gives. take: the fd of a stashed hello for `client` (its sender's
 * uid in *uid), or -1; the hellos it passes over that nobody will claim
 * are dropped. */
int lf__stash_put(struct lf_listener *l, int fd, const struct lf_ep *client, const struct lf_ep *server, uint32_t uid,
		  bool vouched);
int lf__stash_take(struct lf_listener *l, const struct lf_ep *client, uint32_t *uid);
/* Does the stash hold any hello (a take may receive one)? Under the lock. */
bool lf__stash_holds(const struct lf_listener *l);
/* A hello whose client has closed it with nothing left to read: nobody
 * will ever want it (its client died before its connect, or gave the
 * connect up). One that still carries data is a client that wrote and
 * closed: its connection is served. */
bool lf__stash_hello_dead(int fd);
/* False when the stash surely holds no hello for `client` (no lock; test-stash's view of the index). */
bool lf__stash_might_hold(struct lf_listener *l, const struct lf_ep *client);
/* Remembers / asks whether a hello of uid for `client` was dropped while
 * its client may already have committed (the accept then resets the TCP
 * connection if its client is of that uid, so that both ends see it fail
 * rather than split). */
void lf__stash_poison(struct lf_listener *l, const struct lf_ep *client, uint32_t uid);
bool lf__stash_poisoned(struct lf_listener *l, const struct lf_ep *client, uint32_t *uid);

/* ---- claim.c: the server side of the negotiation */

/* After accept returned newfd on lfd (sa: its peer's address, as accept
 * reported it): switch it to the fast path when its client negotiated it.
 * Returns 0, or -ECONNABORTED when the connection was reset because its
 * hello was lost (the caller then accepts again). */
int lf__accept_claim(int lfd, int newfd, int flags, const struct sockaddr *sa, socklen_t salen);

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
 * the options src recorded, and marks fd as a fast-path socket. Which end
 * switches: the server, whose TCP socket goes with the claim's mark and a
 * FIN, or the client, which keeps its TCP socket as the bell (bell.c). */
enum lf_switch { LF_SW_SERVER, LF_SW_CLIENT };
int lf__switch_fd(int unx, int fd, int family, const struct lf_fd *src, bool nonblock, bool cloexec,
		  enum lf_switch side);

/* ---- fork.c: every fork handler, registered in one place */

/* Registers the handlers below once (pthread_atfork), in fork.c's fixed
 * order; called by each subsystem before it first holds what a fork must
 * handle (a lock, a descriptor, a cached pid). */
void lf__fork_init(void);
void lf__bell_fork_prepare(void);
void lf__sopt_fork_prepare(void);
void lf__sopt_fork_parent(void);
void lf__sopt_fork_child(void);
void lf__diag_fork_prepare(void);
void lf__diag_fork_parent(void);
void lf__diag_fork_child(void);
void lf__stats_fork_child(void);
void lf__connect_fork_child(void);

#endif
