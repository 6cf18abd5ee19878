/* The shared-memory tier (shm.c, docs/shm.md): the calls the rest of the
 * fast path makes. Each data-path call returns true when it handled the
 * call (its answer in *ret and errno), false when the caller goes on as
 * on the Unix stream (the connection is not, or no longer, on the tier). */
#ifndef LF_SHM_H
#define LF_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

struct lf_shm_conn;
struct pollfd;

/* LOOPFAST_TIER=shm: every socket of the process asks for the tier. */
extern bool lf__shm_global;
/* Some socket of the process asked for the tier, or holds it. */
extern bool lf__shm_used;

/* Waits the process made (poll, select, epoll): what may have told it
 * that a socket is readable, or at its end. A non-blocking read on the
 * tier that finds its ring empty looks at the socket after each
 * (shm_io.c). Counted after the wait returns. */
extern atomic_uint lf__shm_waits;
/* Rings whose pages go back once the process has waited a while
 * (shm_mem.c): while any is due, waits are cut to lf__shm_mem_slice and
 * lf__shm_mem_sweep runs after each slice. */
extern atomic_int lf__shm_due;
/* The highest descriptor that was ever a tier socket (close_range). */
extern int lf__shm_fd_hi;
/* Clients of the process still waiting for the server's answer (epoll's
 * answers are looked at meanwhile: lf__shm_epoll_fix). */
extern atomic_int lf__shm_undecided;
/* Connections of the process whose non-blocking writer found no room
 * and has not pushed since (epoll's EPOLLOUT is looked at meanwhile:
 * lf__shm_epoll_fix, lf__shm_epoll_unpark). */
extern atomic_int lf__shm_full;
struct epoll_event;
int lf__shm_epoll_fix(int epfd, struct epoll_event *ev, int n);
/* Before an epoll wait returns: the registrations lf__shm_epoll_fix made
 * edge-triggered during it are level-triggered again (this thread's). */
void lf__shm_epoll_unpark(void);
extern __thread int lf__shm_parked;
extern __thread bool lf__shm_closing_range; /* interpose.c's close_range_around: no socket kept (shm.c, keep_socket) */
extern __thread bool lf__shm_parked_trim; /* one of them for a give-back: looked at again each millisecond (wait.c) */
/* An epoll wait that spins looks at the rings of the set's tier sockets
 * registered level-triggered for EPOLLIN (shm.c): lf__shm_watch holds up
 * to LF_WATCH_MAX of them (0: none, nothing held), lf__shm_watch_ready
 * adds the events of those with bytes to read to the kernel's k events
 * (returns how many there are then), lf__shm_unwatch lets go
 * (sleeping: the wait goes on in the kernel). */
#define LF_WATCH_MAX 16
extern atomic_uint lf__shm_watchable; /* moves when a socket may have become one to watch */
struct lf_shm_watch {
	struct lf_shm_conn *c;
	int fd;
	unsigned gen; /* the socket's epgen when its registration was read */
	uint32_t events;
	bool pri; /* urgent data asked for too: the ring answers only while its writer never sent any */
	uint64_t data;
};
int lf__shm_watch(int epfd, struct lf_shm_watch *w);
int lf__shm_watch_ready(const struct lf_shm_watch *w, int n, struct epoll_event *ev, int k, int max);
/* The same for a poll or ppoll that spins: the entries of fds polled for
 * POLLIN alone that are tier sockets. */
int lf__shm_watch_poll(const struct pollfd *fds, unsigned long n, struct lf_shm_watch *w);
int lf__shm_watch_ready_poll(const struct lf_shm_watch *w, int n, struct pollfd *fds, int k);
void lf__shm_unwatch(const struct lf_shm_watch *w, int n, bool sleeping);
void lf__shm_mem_sweep(void);
int64_t lf__shm_mem_slice(int64_t left_ns); /* -1: no end */
static inline void lf__shm_waited(void)
{
	if (lf__shm_used)
		atomic_fetch_add_explicit(&lf__shm_waits, 1, memory_order_release);
}
/* The end of fd is closing (close, SHUT_WR): the peer's reader looks at
 * the socket from now on rather than answer from its ring alone. */
void lf__shm_fin(int fd);
/* close(): a reference to fd's tier state taken before the fd's entry
 * goes (NULL: not on the tier), and given back after the kernel's close,
 * where the process's last one tells the peer (shm.c, conn_put). */
struct lf_shm_conn *lf__shm_hold(int fd);
void lf__shm_closed(struct lf_shm_conn *c);

/* setsockopt SO_SNDBUF or SO_SNDBUFFORCE succeeded on fd: its ring
 * follows (shm_mem.c). */
void lf__shm_sndbuf(int fd);

/* Client, before its hello: does fd ask for the tier? */
bool lf__shm_wants(int fd);
/* Descriptors 0 to 2 are stdio's: glibc's stdin, stdout and stderr (and
 * fdopen's FILEs) read and write through glibc's own calls, past the
 * interposer. A socket made there never asks for the tier or offers it;
 * a tier socket leaves the tier before it becomes one or an fdopen's
 * (shm_leave.c): false, errno EOPNOTSUPP, when it cannot leave now (the
 * connection as it was, as a refused pass). */
#define LF_SHM_STDIO_MAX 2
bool lf__shm_leave_for_stdio(int fd);
/* Server, at the claim of the hello unx (listener lfd; asked: its name
 * asks for the tier, else nothing is sent and NULL returned):
 * sends the answer on unx, before any byte of the application's: "Y" and a
 * sealed memfd when the listener asked too and the application's
 * descriptor fd is not stdio's, else "N". Returns the
 * connection's state to attach (NULL: the Unix stream), or sets *fail
 * when no answer could be sent (the caller resets the connection). */
struct lf_shm_conn *lf__shm_offer(int unx, int lfd, int fd, bool asked, bool *fail);
/* After the switch: fd (the client's, asked = its hello's name asked; or
 * the server's, with what lf__shm_offer returned) is on the tier. */
void lf__shm_attach_client(int fd);
void lf__shm_attach(int fd, struct lf_shm_conn *c);
void lf__shm_put(struct lf_shm_conn *c); /* one not attached after all (NULL: nothing) */

bool lf__shm_recv(int fd, struct msghdr *m, int flags, ssize_t *ret);
/* MSG_TRUNC's scratch (shm_io.c): up to max pieces that all name one
 * 64 KiB buffer, for up to `bytes` discarded bytes; *n the pieces, the
 * return the bytes they name. */
size_t lf__scratch_iov(struct iovec *v, size_t max, size_t bytes, size_t *n);
bool lf__shm_send(int fd, const struct msghdr *m, int flags, ssize_t *ret);
/* epoll_ctl with EPOLLET on a tier socket: from now on the peer's writer
 * sends an edge byte for every push, as TCP gives an edge per write. */
void lf__shm_want_edges(int fd);
/* FIONREAD / SIOCINQ: the bytes readable. */
bool lf__shm_inq(int fd, int *out);
/* SIOCATMARK: whether the reader is at the urgent mark (shm_io.c). */
bool lf__shm_atmark(int fd, int *out);
/* poll/ppoll over sets that hold tier sockets: wait() is the wait without
 * the tier (wait.c); POLLIN and POLLOUT are then made the ring's. */
int lf__shm_poll(struct pollfd *fds, unsigned long n, long long timeout_ns, const void *mask,
		 int (*wait)(struct pollfd *, unsigned long, long long, const void *));
/* The bytes a write would put in the ring now without waiting; -1: the
 * writes go on the Unix stream (not, or not yet, on the tier). */
long lf__shm_room(int fd);
/* sendmsg's ancillary data passes a socket on the tier, or one waiting
 * for the server's answer (SCM_RIGHTS). */
bool lf__shm_in_rights(const struct msghdr *m);
/* Passing tier sockets (shm_pass.c, docs/shm.md "Passing the socket"):
 * sendmsg on a socket that is not a fast-path one, with ancillary data:
 * the tier sockets it passes go with their rings to a receiver that runs
 * loopfast, else -1 EOPNOTSUPP. recvmsg and recvmmsg with a control
 * buffer on such a socket: the rings that came are adopted, and the
 * application gets its own descriptors as the kernel would give them. */
ssize_t lf__shm_pass_sendmsg(int fd, const struct msghdr *m, int flags);
ssize_t lf__shm_pass_recvmsg(int fd, struct msghdr *m, int flags);
int lf__shm_pass_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts);
/* SOL_LOOPFAST LOOPFAST_TIER and lf_set_tier (api.c). get: LF_TIER_SHM
 * while the connection holds the rings (a client waits for the server's
 * answer: -EAGAIN when non-blocking, -EINTR), or, not connected yet, if
 * it asked for them. */
int lf__shm_set_tier(int fd, int tier);
int lf__shm_get_tier(int fd);

/* exec (shm_exec.c): the tier sockets that stay open across an exec keep
 * their rings. Before it, in the exec wrappers: room is what
 * lf__shm_exec_room says (0: no tier connection, nothing to do);
 * prepare writes "LOOPFAST_SHM_EXEC=..." into buf for the new environment
 * ("" when no tier socket stays open) and lists in undo the memfds it made
 * inheritable; undo gives them close-on-exec back after an exec that
 * failed. Allocation-free (vfork children exec). adopt: the new image's,
 * at start-up. */
#define LF_SHM_EXEC_FDS 128
size_t lf__shm_exec_room(void);
void lf__shm_exec_prepare(char *buf, size_t room, int *undo, size_t *nu);
/* counted: the record lf__shm_exec_counted counted, taken back (or NULL) */
void lf__shm_exec_undo(const int *undo, size_t nu, const char *counted);
/* The exec's program will not load this library (static, set-id): the
 * recorded sockets are shut down instead (docs/shm.md). */
void lf__shm_exec_shut(const char *rec);
/* The exec carries the recorded sockets to a program that loads this
 * library: in a vfork child (another process than the one that counted
 * itself), each recorded end gains a holder (docs/shm.md, "Who holds an
 * end"): the parent holds it too. more false: the exec failed, taken back. */
void lf__shm_exec_counted(const char *rec, bool more);
void lf__shm_exec_adopt(void);

#endif
