/* Internal interfaces of libloopfast. Non-static internal symbols carry the
 * lf__ prefix; nothing here is exported (see loopfast.map). */
#ifndef LF_INTERNAL_H
#define LF_INTERNAL_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
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

/* The protocol's version. Every constant two loopfast processes must agree
 * on reads it: the abstract names (so that processes of two versions never
 * meet on the fast path: each finds no rendezvous of the other's), the
 * claim's mark, the stash's message magic, and the listener's shared page
 * (its memfd's name, and its header, checked before a page is adopted).
 * Any change to one of those bumps it. Protocol 3 is main bea563d; a build
 * may set another (-DLF_PROTO_VERSION=N: test_versions.py). */
#ifndef LF_PROTO_VERSION
#define LF_PROTO_VERSION 5
#endif
/* The oldest version whose rendezvous a listener looks for (listener.c:
 * a listener that another version's process serves is served as plain
 * TCP by this one). */
#define LF_PROTO_OLDEST 3
#define LF_STR_(x) #x
#define LF_STR(x) LF_STR_(x)
#define LF_NAME_PREFIX "loopfast/" LF_STR(LF_PROTO_VERSION) "/"
#define LF_NAME_MAX 108

bool lf__ep_from_sockaddr(struct lf_ep *ep, const struct sockaddr *sa, socklen_t len);
/* Writes ep as a sockaddr of the given family (v4 in v6 as v4-mapped). */
socklen_t lf__ep_to_sockaddr(const struct lf_ep *ep, int family, struct sockaddr_storage *ss);
bool lf__ep_is_loopback(const struct lf_ep *ep);
bool lf__ep_is_any(const struct lf_ep *ep);
bool lf__ep_equal(const struct lf_ep *a, const struct lf_ep *b);
int lf__ep_format(const struct lf_ep *ep, char *buf, size_t len); /* "127.0.0.1:80", "[::1]:80" */

/* The abstract names of the protocol (see docs/security.md):
 *   rendezvous of a TCP listener   "\0loopfast/<version>/L/<fam>/<listener inode>"
 *   stash of that listener         "\0loopfast/<version>/S/<fam>/<listener inode>"
 *   client end of a connection     "\0loopfast/<version>/C/<fam>/<caddr>/<cport>/<saddr>/<sport>/<nonce>"
 * where fam is the family of the listener, or of the client's TCP socket,
 * and the nonce (the client's pid and a counter) keeps the name unique when
 * the kernel reuses an ephemeral port. Each returns the sockaddr length. */
socklen_t lf__name_listener(struct sockaddr_un *sun, int family, unsigned long ino);
/* The rendezvous name protocol `version` gives the listener (the same
 * format since protocol 3). */
socklen_t lf__name_listener_of(struct sockaddr_un *sun, int version, int family, unsigned long ino);
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
};

/* Options the application set that the Unix socket cannot hold, as TCP
 * read them back (sockopt.c): packed records of {int16 level, int16 opt,
 * uint8 len, value}, about 28 int-valued ones per socket. */
#define LF_OPTBYTES 256

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
	int reserve;         /* a descriptor released for a claim, for the fd limit */
	uint64_t drained_ns; /* when a plain accept last drained the rendezvous (claim.c) */
	atomic_bool inheritable; /* its descriptors stay open across exec */
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
	int bell;                   /* LF_F_UNCONFIRMED: the hidden TCP socket (bell.c) */
	uint16_t bell_gen;          /* which bell of this fd an epoll event is for */
	int pend_err;               /* pending connect that failed: its error, for SO_ERROR */
	uint8_t opt[LF_OPTBYTES];   /* options the Unix socket cannot hold, as set */
	uint32_t optset;            /* bytes of opt[] in use */
	uint32_t sockset;           /* which carried SOL_SOCKET options were set */
	struct lf_epreg ep[LF_EPOLL_MAX]; /* epoll registrations of an opted-in socket */
};

/* LOOPFAST_DEBUG=1: say on stderr why a connection took plain TCP. */
extern bool lf__debug_on;
void lf__debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

extern bool lf__global_optin; /* LOOPFAST_ENABLE=1: opt in every TCP socket */
extern unsigned lf__global_spin_us;

struct lf_fd *lf__fd(int fd); /* NULL when fd is out of range */
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
bool lf__may_spin(int fd);           /* a fast-path socket with a spin budget */
bool lf__shut_rd(int fd);            /* the application shut its reading side */
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

/* ---- listener.c: rendezvous, stash and shared page of a listener */

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
/* The stash: hellos taken from the rendezvous by one accept for another.
 * Under the lock. put: 0, or -ENOSPC when the stash is full or, for a
 * hello the kernel has not vouched for, its sender's uid is over its share
 * (the caller drops the hello). `server` is the server end its name gives.
 * take: the fd of a stashed hello for `client` (its sender's uid in *uid),
 * or -1; the hellos it passes over that nobody will claim are dropped. */
int lf__stash_put(struct lf_listener *l, int fd, const struct lf_ep *client, const struct lf_ep *server, uint32_t uid,
		  bool vouched);
int lf__stash_take(struct lf_listener *l, const struct lf_ep *client, uint32_t *uid);
/* Does the stash hold any hello (a take may receive one)? Under the lock. */
bool lf__stash_holds(const struct lf_listener *l);
/* A hello whose client has closed it with nothing left to read: nobody
 * will ever want it (its client died before its connect, or gave the
 * connect up). One that still carries data is a client that wrote and
 * closed: its connection is served. */
bool lf__hello_dead(int fd);
/* Whether a connection to `server` reaches this listener: its own
 * address, or for a wildcard listener one the kernel would hand to it
 * (sock_diag). A hello may name a connection of its sender's to a
 * listener of its own on the same port elsewhere on loopback. */
bool lf__listener_serves(const struct lf_listener *l, const struct lf_ep *server);
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

/* ---- syn.c: the saved SYN's mark (peer input; fuzzed) */

/* 1: the SYN (IP header onwards, len bytes) carries MSS LF_HELLO_MSS; 0: it
 * does not; -1: too short or malformed to tell. */
int lf__syn_marked(const uint8_t *syn, size_t len);

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
