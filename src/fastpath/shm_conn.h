/* The shared-memory tier's private header: the connection's state, which
 * shm.c (state, the switch, poll, FIONREAD) and shm_io.c (reads, writes,
 * waits) share. Nothing else includes it: the rest of the library sees
 * shm.h. */
#ifndef LF_SHM_CONN_H
#define LF_SHM_CONN_H

#include "ring.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum { UNDECIDED, ON, OFF, BROKEN };
#define LF_SHM_SPENT 64
#define LF_SHM_ANSWER_NS 100000000ull /* a peer's answer: a leave's (shm_leave.c), a just-connected client's before a pass (shm_pass.c) */
enum { W_COPY = 1, W_IDLE = 2 }; /* a ring's wbusy (shm_mem.c) */

struct lf_shm_conn {
	atomic_int refs;        /* first: fdtab.c counts the dups that share it */
	bool server;
	atomic_int state;
	/* lf__shm_forks when this process was last counted among the end's
	 * holders (the page's `others`): at its making or at each fork's
	 * prepare since; behind it (or LF_SHM_UNCOUNTED): not counted, and
	 * never alone again (lf__shm_alone). */
	atomic_uint forks_seen;
	atomic_bool let_go; /* this process is no longer among the end's holders (shm.c, holder_gone) */
	void *map;
	struct lf_ring rx, tx;
	pthread_mutex_t rxl, txl; /* one reader and one writer of the process at a time; never held across a wait */
	uint64_t stream_in;     /* server: stream bytes read before the ring */
	bool stream_done;       /* server: all of them */
	uint64_t stream_out;    /* client: stream bytes written before the switch */
	unsigned owed;          /* tokens given up waiting for (a stopped peer) */
	atomic_bool unsent;     /* a token the socket had no room for (the client's stream bytes fill it) */
	atomic_bool edges;      /* an epoll ET registration asks for an edge per push (rx's edges word) */
	atomic_bool full;       /* a non-blocking write found no room, and no write has pushed since (lf__shm_full) */
	/* The reader's last look at the socket that found nothing (under
	 * rxl): when, the waits and this thread's signals by then. A
	 * non-blocking read may answer EAGAIN without looking again while
	 * nothing can have come since (shm_io.c, quiet). */
	uint64_t looked_ns;
	unsigned looked_waits, looked_sig;
	const void *looked_thread;
	uint64_t polled_ns;     /* the end of a quiet non-blocking read's last look at its empty ring (under rxl; shm_spin.c, again) */
	uint64_t trimmed;       /* rx's position at its last give-back (shm_mem.c) */
	uint64_t trim_ns;       /* when (lf__sys_now_ns) */
	struct lf_shm_conn *limbo_next; /* gone, its ring still mapped for an epoll wait (shm.c, limbo) */
	struct lf_shm_conn *park_next;  /* taken off an entry that a call was using (shm.c, park) */
	struct lf_shm_conn *due_next, **due_prev; /* the process's due give-backs (due_prev NULL: not due) */
	unsigned due_looks;     /* empty-ring finds while due (under rxl; shm_mem.c) */
	uint64_t emptied;       /* reads that emptied rx since its last give-back (under rxl; shm_mem.c) */
	struct lf_linger { unsigned fails, skip, yfails, yskip; } linger_rx, linger_tx; /* lingers that found nothing in a row and those to skip; slow yields in a row and lingers to make without one (rx under rxl; shm_spin.c) */
	_Atomic uint32_t want;  /* tx's limit that SO_SNDBUF asks (0: not read yet; shm_mem.c) */
	/* The peer's fin word (in rx's half of the page) when a write last
	 * found the peer's end still there: each close of the peer's end
	 * changes the word after the kernel's close, and the next write
	 * looks at the socket (shm_io.c, peer_gone). */
	atomic_uint fin_seen;
	atomic_bool end_seen;   /* a read saw the end or an error: the next write looks */
	/* The memfd, kept open (hidden, close-on-exec) for the connection's
	 * life, so that an exec that keeps the socket can keep it too
	 * (shm_exec.c); -1 before the answer. ino: its inode, to know it again. */
	int mfd;
	unsigned long mfd_ino;
	/* The socket, kept open (hidden) by a close that came while a call
	 * of another thread used the connection, until the connection's last
	 * put (shm.c, drop); -1: none. ino: the socket's inode (attach). */
	int kept;
	unsigned long kept_ino;
	atomic_bool keeping;
	uint64_t urg_done;      /* rx's urgent mark (urg) whose byte was read past or read with MSG_OOB (under rxl) */
	/* rx's positions of urgent bytes read with MSG_OOB that reads have
	 * not reached yet, oldest first (under rxl; shm_io.c, mark_limit). */
	uint64_t spent[LF_SHM_SPENT];
	unsigned nspent;
	/* Leaving the tier (shm_leave.c): this end's writes go on the stream
	 * (it answered its reader's request); a request met on the socket
	 * and not answered yet; bells of pushes made and not yet rung (the
	 * stream's order: every token before the leave's byte). */
	atomic_bool tx_left, asked;
	atomic_uint ringing;
	/* A client forked before its answer (shm_answer.c): the board its
	 * processes share, and their pair of sockets for the memfd (hidden). */
	struct lf_shm_board *board;
	int bfd, box[2];
	unsigned long bfd_ino, box_ino[2];
};


/* shm.c */
struct lf_shm_conn *lf__shm_conn_of(int fd);              /* fd's state, NULL: not on the tier */
/* fd's state held until lf__shm_done(fd), which must follow on the same
 * fd: a close of fd by another thread meanwhile leaves it to the put
 * (NULL: not on the tier, nothing held). */
struct lf_shm_conn *lf__shm_use(int fd);
void lf__shm_done(int fd);
long lf__shm_avail(const struct lf_shm_conn *c);          /* bytes in rx now (LF_RING_BAD: garbage) */
void lf__shm_decide(struct lf_shm_conn *c, int fd);       /* the client takes the answer if it came */
bool lf__shm_decide_by(struct lf_shm_conn *c, int fd, uint64_t end); /* ... waiting for it until end (false: not come) */
int lf__shm_broken(struct lf_shm_conn *c, int fd);        /* resets the connection: -1, ECONNRESET */
struct lf_shm_conn *lf__shm_conn_new(bool server);        /* refs 1, no map; NULL: no memory */
void *lf__shm_map(int mfd, uint32_t *area);               /* a checked map of a tier memfd, NULL: not one */
void lf__shm_keep_memfd(struct lf_shm_conn *c, int mfd);  /* c holds mfd from now on (hidden) */
bool lf__shm_ours(int fd, unsigned long ino);              /* fd is open and names that inode */
bool lf__shm_keep(int fd, int *home, unsigned long *ino); /* fd hidden at *home, its inode at *ino (false: closed) */
void lf__shm_unkeep(int *home, unsigned long ino);        /* closed, if *home still names that inode; -1 */

/* shm_answer.c: the answer, and the board of a client forked before it */
void lf__shm_board_make(struct lf_shm_conn *c);           /* a fork's prepare */
void lf__shm_board_free(struct lf_shm_conn *c);           /* the process's last put */
void lf__shm_board_holder(struct lf_shm_conn *c, bool more); /* one process with the board more or fewer */
bool lf__shm_board_alone(const struct lf_shm_conn *c);    /* no board, or no other process has it */
bool lf__shm_board_adopt(struct lf_shm_conn *c, int bfd, unsigned long bino, const int box[2],
			 const unsigned long boxino[2]); /* an exec's */
/* Under txl: 1 while no process has taken the answer yet (the board then
 * locked until lf__shm_board_leave; no board: 1), 0 once one has, -1 when
 * another process holds the board (1 ms: look again later). dirty: this
 * process is inside a change (a take, a stream write) that a death would
 * leave half done. And the stream's count. */
int lf__shm_board_enter(struct lf_shm_conn *c);
void lf__shm_board_dirty(struct lf_shm_conn *c, bool dirty);
void lf__shm_board_leave(struct lf_shm_conn *c);
uint64_t *lf__shm_stream_out(struct lf_shm_conn *c);
/* Who holds an end (docs/shm.md): forks counted (even; odd while a
 * fork's prepare counts the holders), and whether this process is the
 * only one that holds c's end (another may read or write its rings). */
extern atomic_uint lf__shm_forks;
#define LF_SHM_UNCOUNTED UINT32_MAX
bool lf__shm_alone(struct lf_shm_conn *c);
void lf__shm_holder(struct lf_shm_conn *c, bool more); /* one holder more or fewer for c's end (on the tier) */
void lf__shm_set_state(struct lf_shm_conn *c, int st); /* every change of c->state */
void lf__shm_set_full(struct lf_shm_conn *c, bool full); /* c->full, counted in lf__shm_full */
extern atomic_int lf__shm_live;                           /* tier connections the process holds */

/* shm_exec.c: one tier socket's record (the exec's, and a passed
 * socket's: shm_pass.c) and its adoption. fd and mfd: numbers in the
 * process that adopts (mfd -1: none). */
enum { LF_SHM_REC_DONE = 1, LF_SHM_REC_UNSENT = 2, LF_SHM_REC_EDGES = 4, LF_SHM_REC_FORKED = 8, LF_SHM_REC_TX_LEFT = 16,
       LF_SHM_REC_COUNTED = 32 /* the new image is a counted holder (exec only) */ };
struct lf_shm_rec {
	int fd, mfd;
	unsigned long ino, mino;
	char kind;                  /* 's' server, 'c' client, 'u' a client waiting for the answer (mfd: its board's, or -1) */
	unsigned long long count;   /* server: stream_in; 'u': stream_out */
	unsigned flags, owed;
	int box[2];                 /* 'u' with a board: its pair (shm_answer.c) */
	unsigned long boxino[2];
};
/* The connections adopted so far, by their socket's inode: the dups of a
 * socket share one. */
struct lf_shm_seen {
	unsigned long ino;
	struct lf_shm_conn *c;
};
/* fd's record (its memfd if still ours, else -1); false: not on the tier or gone. */
bool lf__shm_exec_rec(int fd, struct lf_shm_conn *c, struct lf_shm_rec *r);
/* One record: the socket back on the tier (sharing the state of an
 * earlier record of the same socket: a dup), or shut down both ways when
 * it does not check out (the socket's inode, the memfd's name, inode and
 * seals: lf__shm_map). Returns whether it took the memfd (kept it for the
 * connection, or closed it): a memfd it did not take is not a ring of
 * this connection, or is held already. */
bool lf__shm_exec_adopt_one(const struct lf_shm_rec *r, struct lf_shm_seen *seen, size_t *nseen);

/* shm_io.c */
void lf__shm_io_flush(struct lf_shm_conn *c, int fd);     /* sends a token the socket had no room for */
/* Under rxl, with the ring's stream part done: takes the edge bytes at the
 * head of the socket and peeks the byte after them into *next (1), or
 * returns what recv says (0: the end; -1: errno, EAGAIN when none). */
ssize_t lf__shm_io_skip_edges(struct lf_shm_conn *c, int fd, char *next);
/* After a look at the socket that returned r: the end or an error makes
 * the next write look at the socket (peer_closed: the peer may have gone
 * without a close that moved fin: exit, kill -9); keep: the look was the
 * tier's own (a peek, a token read), and a reset it took (ECONNRESET) is
 * kept for the application's next call, as TCP reports it (bell.c's
 * lf__err_keep). */
void lf__shm_io_end_seen(struct lf_shm_conn *c, int fd, ssize_t r, bool keep);
/* With the ring empty, takes the tokens of bytes already read (stale or
 * owed): before the last close (the kernel would reset the peer for
 * them) and in poll (they would say POLLIN). */
void lf__shm_io_spent(struct lf_shm_conn *c, int fd);
/* Of a bytes in rx, those not read with MSG_OOB already (FIONREAD: as
 * AF_UNIX, whose urgent byte read so counts no more). Takes rxl. */
long lf__shm_io_unread(struct lf_shm_conn *c, long a);

/* shm_leave.c (docs/shm.md, "Leaving the tier") */
bool lf__shm_leave(struct lf_shm_conn *c, int fd);        /* fd's connection onto its Unix stream, both ways (false: not now, or reset) */
void lf__shm_io_answer(struct lf_shm_conn *c, int fd);    /* the reader asked: this end's writes leave, its unread bytes copied onto the stream */
int lf__shm_io_met_leave(struct lf_shm_conn *c, int fd);  /* under rxl, the ring empty: the writer's LF_BYTE_LEFT is next: 0 (OFF now), -1 (reset) */
bool lf__shm_leave_met(struct lf_shm_conn *c, int fd);     /* the ring read to its end: a request and the peer's LF_BYTE_LEFT next on the stream taken (true: OFF now). Takes rxl */

/* shm_spin.c (docs/shm.md, "Spinning") */
void lf__shm_wake_writer(struct lf_shm_conn *c);          /* the reader: a writer that waits for room or a give-back's end looks again (shm_io.c) */
bool lf__shm_spin_quiet(const struct lf_shm_conn *c, uint64_t now); /* under rxl: nothing can have come since the last look */
bool lf__shm_spin_again(struct lf_shm_conn *c, uint64_t now); /* under rxl, quiet: a polling reader's look at its ring before EAGAIN (true: bytes came, or garbage) */
void lf__shm_spin_looked(struct lf_shm_conn *c, unsigned waits); /* under rxl: a look found nothing (waits: as before it) */
void lf__shm_spin_wake(struct lf_shm_conn *c, uint64_t now); /* the reader polls its ring (now: lf__sys_now_ns) */
uint64_t lf__shm_spin_busy(struct lf_shm_conn *c);        /* a writer: its reader, if polling, polls again soon (its clock, or 0) */
void lf__shm_spin_sleep(struct lf_shm_conn *c);           /* the reader is about to sleep: writers ring, not wait */
void lf__shm_spin(struct lf_shm_conn *c, int fd);         /* a blocking read's spin on its ring (--spin-us) */
void lf__shm_spin_taking(struct lf_shm_conn *c, uint64_t t); /* the reader, under rxl: this read takes every byte up to t */
bool lf__shm_spin_handed_off(struct lf_shm_conn *c, uint64_t t, uint64_t now); /* the writer: the reader takes every byte up to t (now: its clock, or 0) */
bool lf__shm_spin_linger(struct lf_shm_conn *c); /* the reader, under rxl, having emptied rx: more bytes came (keep the token) */
bool lf__shm_spin_room(struct lf_shm_conn *c);   /* a blocking writer, its ring full: room came (or garbage) */
void lf__shm_spin_room_light(void); /* reader: between its store of head and its load of want_space */
void lf__shm_spin_room_heavy(void); /* writer: between its store of want_space and its load of head (or trim) */
/* shm_mem.c: the rings' memory (docs/shm.md, "Memory") */
bool lf__shm_mem_enter(struct lf_shm_conn *c, int fd); /* writer, under txl, before a copy into tx (false: not now) */
bool lf__shm_mem_wait(struct lf_shm_conn *c);           /* writer, without txl, after a false: true once it may look again */
void lf__shm_mem_exit(struct lf_shm_conn *c);          /* writer, after it published the copy */
void lf__shm_mem_idle(struct lf_shm_conn *c);          /* reader, under rxl, its ring found empty: give pages back (or later) */
void lf__shm_mem_forget(struct lf_shm_conn *c);        /* c is about to be freed: off the due list */
uint32_t lf__shm_mem_want(int sndbuf);                  /* the bytes a ring may hold for a socket's SO_SNDBUF */
void lf__shm_mem_sndbuf(struct lf_shm_conn *c, int fd); /* reads fd's SO_SNDBUF into c->want */
long lf__shm_mem_room(struct lf_shm_conn *c, int fd, size_t len); /* writer, under txl, tx synced: its room for len bytes, grown to SO_SNDBUF (fd < 0: no getsockopt) */

#endif
