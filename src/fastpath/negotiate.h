/* The negotiation, both ends: a listener's rendezvous and shared page
 * (listener.c), the stash (stash.c), the server's claim (claim.c), the
 * client's connect (connect.c) and the bell it keeps until the claim is
 * seen (bell.c). Above the fd table and the process's services. */
#ifndef LF_NEGOTIATE_H
#define LF_NEGOTIATE_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>

#include "fdtab.h"
#include "process.h"

/* One message of len bytes with one descriptor, never waiting, no
 * SIGPIPE (stash.c): 0, or -1 when not all of it went. */
int lf__send_fd(int sock, const void *buf, size_t len, int fd);
/* A robust, process-shared mutex in shared memory (listener.c). */
void lf__mutex_init_shared(pthread_mutex_t *m);

/* ---- listener.c: rendezvous and shared page of a listener */

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

/* What a server knows of a hello it took: its sender's uid (SO_PEERCRED)
 * and whether its name asks for the shared-memory tier. */
struct lf_hello {
	uint32_t uid;
	bool shm;
};

/* A new stash (its datagram socket `chan`, the page m): sizes its buffer
 * and sets how many hellos it holds (m->cap). */
void lf__stash_init(struct lf_shm *m, int chan);
/* Under the listener's lock. put: 0, or -ENOSPC when the stash is full
 * or, for a hello the kernel has not vouched for, its sender's uid is over
 * its share (the caller drops the hello). `server` is the server end its
 * name gives. take: the fd of a stashed hello for `client` (what its
 * server knows of it in *h), or -1; the hellos it passes over that nobody will claim
 * are dropped. */
int lf__stash_put(struct lf_listener *l, int fd, const struct lf_ep *client, const struct lf_ep *server,
		  struct lf_hello h, bool vouched);
int lf__stash_take(struct lf_listener *l, const struct lf_ep *client, struct lf_hello *h);
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
bool lf__stash_poisoned(struct lf_listener *l, const struct lf_ep *client, const uint32_t *uid);

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

/* ---- bell.c: a client's TCP socket kept until the claim is seen */

extern atomic_int lf__unconfirmed; /* connections of this process still unconfirmed */
extern bool lf__bells_used;        /* this process ever kept a bell (epoll tags) */
extern bool lf__bell_resets;       /* a bell of this process saw a reset (waits add POLLERR) */
/* Takes the error fd reports once (pend_err), atomically: 0 if none. */
int lf__err_take(int fd);
/* The connection's reset error (ECONNRESET, EPIPE), which one of
 * loopfast's own looks at the socket took (a bell, the shm tier's peek):
 * kept, to be reported once as TCP reports it (the next read or write,
 * SO_ERROR; POLLERR until then; TCP_INFO's state CLOSE for good). */
void lf__err_keep(int fd, int err);
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

#endif
