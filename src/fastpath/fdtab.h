/* The per-fd table (fdtab.c): what loopfast keeps for each descriptor,
 * an array indexed by fd with atomic entries, and which descriptors are
 * its own (hidden); also the settings read at start-up and the debug
 * output. The lowest layer above the raw calls: it calls nothing above
 * sys.h and knows a listener only by its address. What an entry's going
 * away must release is registered by the layer that set it. */
#ifndef LF_FDTAB_H
#define LF_FDTAB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

struct lf_listener; /* a listener's rendezvous and shared page (negotiate.h) */

#define LF_FD_MAX 65536

enum {
	LF_F_OPTIN = 1u << 0,     /* opted in, not yet connected or listening */
	LF_F_FAST = 1u << 1,      /* a fast-path connection (Unix stream) */
	LF_F_HIDDEN = 1u << 2,    /* one of loopfast's own descriptors */
	LF_F_NOFAST = 1u << 3,    /* listener that cannot serve the fast path */
	LF_F_INPROGRESS = 1u << 4, /* fast path reported EINPROGRESS to connect */
	LF_F_NONBLOCK = 1u << 5,  /* fast-path socket in non-blocking mode */
	LF_F_RCVTIMEO = 1u << 6,  /* fast-path socket with a receive timeout */
	LF_F_TCP = 1u << 7,       /* a TCP socket (connect reads its family from getsockname) */
	LF_F_PENDING = 1u << 8,   /* a TCP connect in progress with a hello queued (connect.c) */
	LF_F_SHUT_RD = 1u << 9,   /* fast-path socket after shutdown(SHUT_RD), kept as TCP does */
	LF_F_SHUT_WR = 1u << 10,  /* fast-path socket after shutdown(SHUT_WR) (for TCP_INFO) */
	LF_F_RESET = 1u << 11,    /* fast-path socket whose peer was seen to reset it (for TCP_INFO) */
	LF_F_UNCONFIRMED = 1u << 12, /* client fast-path socket whose claim is not seen yet (bell.c) */
	LF_F_PINNED = 1u << 13,   /* an option the fast path cannot keep was set: plain TCP for life (sockopt.c) */
	LF_F_SHM = 1u << 14,      /* fast-path socket with shm tier state (shm.c; .shm) */
	LF_F_TIER = 1u << 15,     /* socket or listener that asked for the shm tier */
	LF_F_UNIX = 1u << 16,     /* a Unix socket, as SO_DOMAIN said (io.c's recvmmsg asks once) */
	LF_F_SNDTIMEO = 1u << 17, /* fast-path socket with a send timeout (io.c's writes keep it the call's) */
};

/* Options the application set that the Unix socket cannot hold, as TCP
 * read them back (sockopt.c): packed records of {int16 level, int16 opt,
 * uint8 len, value}, about 28 int-valued ones per socket. */
#define LF_OPTBYTES 256

#define LF_EPOLL_MAX 2
struct lf_epreg {
	int epfd1;    /* epoll fd + 1; 0 when unused */
	unsigned set; /* that fd's epset when recorded: the set, not only its number */
	struct epoll_event ev;
	unsigned gen; /* counts the application's epoll_ctl calls on this set (shm.c, park) */
};

struct lf_shm_conn; /* shm.c */
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
	unsigned epgen;             /* counts the application's epoll_ctl calls, odd during one (shm.c, park) */
	unsigned eprest;            /* counts the restores of epoll waits (shm.c, lf__shm_epoll_unpark) */
	unsigned epset;             /* an epoll fd: which set (a serial given at its epoll_create; 0: unknown) */
	struct lf_shm_conn *shm;    /* LF_F_SHM: the tier's state (its first member counts references) */
	atomic_uint shm_busy;       /* calls of the process using shm through this entry (shm.c, lf__shm_use) */
	struct lf_shm_conn *shm_parked; /* taken off this entry while busy: put by the last of those calls */
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

/* A socket with shm tier state (shm.c): its data calls go there first. */
static inline bool lf__shm_on(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);
	return f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHM);
}

/* A fast-path socket's mode as the application sets it (interpose.c). */
void lf__fd_nonblock(int fd, bool on);
void lf__fd_rcvtimeo(int fd, bool on);
void lf__fd_sndtimeo(int fd, bool on);
/* LF_F_RCVTIMEO and LF_F_SNDTIMEO as the kernel holds fd's timeouts (for
 * a socket that became a fast-path one: a switch, an exec, a pass). */
unsigned lf__fd_timeouts(int fd);

/* After shutdown(SHUT_RD) (kept by interpose.c, not told to the Unix
 * socket) TCP still returns what is queued, and 0 where it would wait. */
static inline bool lf__fd_shut_rd(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);
	return f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHUT_RD);
}
/* Forgets everything about fd (it was closed): first what the layers
 * above registered for the state it holds. */
void lf__fd_reset(int fd);
bool lf__fd_used(int fd); /* the entry holds something (what lf__fd_reset would forget) */
/* fd's entry holds something and is not this process's to change: a
 * vfork child's close, dup2 or dup runs on its parent's table and rings
 * (shared memory), so it goes to the kernel alone (lf__sys_vfork_child). */
bool lf__fd_foreign(int fd);
/* Registered by the layer that sets `flag` (one bit) on an entry, before
 * it first does: what lf__fd_reset calls, with the entry still in place,
 * for an entry that has it (connect.c: LF_F_PENDING, bell.c:
 * LF_F_UNCONFIRMED), in the order of the bits. Registered by listener.c
 * before any entry holds a listener: get takes a reference for an entry
 * that a dup gave the listener (lf__fd_copy), put drops an entry's. */
void lf__fd_on_drop(unsigned flag, void (*drop)(int fd));
void lf__fd_on_listener(void (*get)(struct lf_listener *l), void (*put)(struct lf_listener *l));
void lf__fd_copy(int from, int to); /* fd "to" became a dup of "from" */
/* The tier's reference for a dup of fd (shm.c; NULL: none, or gone). */
void lf__fd_on_share(struct lf_shm_conn *(*share)(int fd));
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
void lf__fd_unhide_home(int fd, int *home); /* only while its entry says *home */
/* The application is about to reuse a hidden fd's number: move it. */
void lf__fd_relocate(int fd);
/* A close-on-exec duplicate of fd among the hidden numbers, or -1. */
int lf__fd_dup_hidden(int fd);

#endif
