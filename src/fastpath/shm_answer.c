/* The client's answer (docs/shm.md, "The answer"), and a fork before it.
 *
 * The server's answer is one byte on the stream ("Y" with the memfd, or
 * "N"), and the client's writes before it go on the stream, counted, so
 * that the switch can tell the server how many (`pre`). In one process
 * the connection's write lock (txl) orders the take of the answer and
 * those writes. A fork before the answer makes two processes that may
 * each take it, or write on the stream while the other switches: the one
 * that took it went onto the rings, the other read the stream for an
 * answer that was gone and wrote on a stream the server no longer read
 * past `pre` (the server reset the connection).
 *
 * So a fork's prepare gives each client still waiting for its answer a
 * board that the processes the fork makes share (a memfd mapped shared:
 * every later fork shares it, and an exec carries it): a robust process-shared mutex that orders
 * the take and the stream writes of all of them as txl does one
 * process's, the stream's count, and the outcome. The process that takes
 * the answer posts the memfd on a datagram socket pair that only they
 * hold (made with the board); the others, at their next call, peek it
 * (a peek of SCM_RIGHTS gives the peeker its own descriptor) and map the
 * same rings. The mutex is held across non-blocking system calls only;
 * a holder killed inside makes the connection reset (the count or the
 * answer may be half done), never a hang (EOWNERDEAD). */
#include "internal.h"
#include "shm.h"
#include "shm_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#define BOARD "loopfast-board"

struct lf_shm_board {
	pthread_mutex_t m;   /* robust, process-shared */
	int state;           /* UNDECIDED until a process took the answer; then its outcome */
	bool dirty;          /* a holder is inside a take or a stream write */
	atomic_uint holders; /* the processes that hold the end and the board (docs/shm.md, "Who holds an end") */
	uint64_t stream_out; /* the stream bytes all the processes wrote before the switch */
};

/* c goes onto the rings mapped at c->map (area bytes each way), whose
 * memfd it keeps; pre (the client that took the answer): the count of its
 * stream bytes before the switch, for the server. */
static void rings_on(struct lf_shm_conn *c, uint32_t area, int mfd, const uint64_t *pre)
{
	lf__ring_views(c->map, area, false, &c->rx, &c->tx);
	if (pre) {
		atomic_store_explicit(&c->tx.h->pre, *pre, memory_order_relaxed);
		atomic_store_explicit(&c->tx.h->switched, 1, memory_order_release);
	}
	lf__shm_set_state(c, ON);
	if (atomic_load(&c->edges)) /* an ET registration came before the answer */
		atomic_store(&c->rx.h->edges, 1);
	lf__shm_keep_memfd(c, mfd);
}

/* Takes the answer if it has come: c's state changes (ON: mapped). pre:
 * the stream bytes written before it. Under txl (and the board's lock). */
static void take(struct lf_shm_conn *c, int fd, uint64_t pre)
{
	char v = 0;
	struct iovec iov = { &v, 1 };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	if (c->board && lf__sys_recvfrom(fd, &v, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL) < 0 &&
	    (errno == EAGAIN || errno == EINTR))
		return; /* nothing yet: a holder killed here changed nothing (the board stays clean) */
	lf__shm_board_dirty(c, true);
	ssize_t r = lf__sys_recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	int mfd = -1, extra = 0;
	uint32_t area = 0;
	for (struct cmsghdr *h = r > 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int x;
			memcpy(&x, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
			if (mfd < 0)
				mfd = x;
			else
				lf__sys_close(x), extra++;
		}
	}
	lf__sys_no_rights(fd);
	if (r <= 0) {
		/* The end, or an error, before any answer: the Unix stream's. */
		if (r < 0)
			__atomic_store_n(&lf__fd(fd)->pend_err, errno, __ATOMIC_RELEASE);
		lf__shm_set_state(c, OFF);
	} else if (v == 'N' && mfd < 0) {
		lf__shm_set_state(c, OFF);
	} else if (v == 'Y' && mfd >= 0 && !extra && !(m.msg_flags & MSG_CTRUNC) && (c->map = lf__shm_map(mfd, &area))) {
		rings_on(c, area, mfd, &pre);
		return;
	} else {
		if (lf__debug_on)
			lf__debug("fd %d: a bad shm answer from the server: reset", fd);
		lf__shm_broken(c, fd);
	}
	if (mfd >= 0)
		lf__sys_close(mfd);
}

/* The board's pair, i, is still at its number (a raw close_range may
 * have closed it, and the number have been reused). */
static bool box_ours(const struct lf_shm_conn *c, int i)
{
	return lf__shm_ours(c->box[i], c->box_ino[i]);
}

/* The rings another process of the board took: its memfd, peeked. */
static void adopt(struct lf_shm_conn *c, int fd, int st)
{
	char v;
	struct iovec iov = { &v, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	struct cmsghdr *h;
	int mfd = -1;
	uint32_t area = 0;

	if (st == OFF) {
		lf__shm_set_state(c, OFF);
		return;
	}
	if (st == ON && box_ours(c, 0) &&
	    lf__sys_recvmsg(c->box[0], &m, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC) == 1 && (h = CMSG_FIRSTHDR(&m)) &&
	    h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&mfd, CMSG_DATA(h), sizeof(int));
	if (mfd < 0 || !(c->map = lf__shm_map(mfd, &area))) {
		if (mfd >= 0)
			lf__sys_close(mfd);
		/* ON, and its memfd not to be had; or broken (a holder died
		 * inside the board: the answer or the count is half done): the
		 * stream is not the connection's any more */
		lf__shm_broken(c, fd);
		return;
	}
	rings_on(c, area, mfd, NULL);
}

/* Under txl: true while no process of the board has taken the answer
 * (the board then locked, for lf__shm_board_leave); false once one has
 * (nothing locked). No board: true. */
int lf__shm_board_enter(struct lf_shm_conn *c)
{
	struct lf_shm_board *b = c->board;
	struct timespec t;

	if (!b)
		return 1;
	/* Never waits long: a holder stopped inside (SIGSTOP, a debugger)
	 * must not hold the others' calls, which look again later (their
	 * callers wait on the socket, in slices). */
	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_nsec += 1000000;
	if (t.tv_nsec >= 1000000000)
		t.tv_sec++, t.tv_nsec -= 1000000000;
	int r = pthread_mutex_clocklock(&b->m, CLOCK_MONOTONIC, &t);
	if (r == EOWNERDEAD) { /* its holder died inside a change: the count or the answer is half done */
		if (b->dirty)
			b->state = BROKEN;
		b->dirty = false;
		pthread_mutex_consistent(&b->m);
	} else if (r) {
		return -1; /* busy (ETIMEDOUT) */
	}
	if (b->state == UNDECIDED)
		return 1;
	pthread_mutex_unlock(&b->m);
	return 0;
}

void lf__shm_board_dirty(struct lf_shm_conn *c, bool dirty)
{
	if (c->board)
		c->board->dirty = dirty;
}

void lf__shm_board_leave(struct lf_shm_conn *c)
{
	if (c->board) {
		c->board->dirty = false;
		pthread_mutex_unlock(&c->board->m);
	}
}

uint64_t *lf__shm_stream_out(struct lf_shm_conn *c)
{
	return c->board ? &c->board->stream_out : &c->stream_out;
}

/* The client takes the server's answer if it has come (never waits). */
void lf__shm_decide(struct lf_shm_conn *c, int fd)
{
	if (atomic_load(&c->state) != UNDECIDED)
		return;
	pthread_mutex_lock(&c->txl);
	int e0 = errno;
	int in = atomic_load(&c->state) != UNDECIDED ? -1 : lf__shm_board_enter(c);
	if (in == 0) {
		adopt(c, fd, c->board->state);
	} else if (in == 1) {
		take(c, fd, *lf__shm_stream_out(c));
		int st = atomic_load(&c->state);
		if (c->board && st == ON && !box_ours(c, 1) && atomic_load(&c->board->holders) == 1) {
			/* the pair is gone here (a raw close_range), and no other process holds the board */
		} else if (c->board && st == ON) { /* for the others: the memfd, on the board's pair */
			if (!box_ours(c, 1) || lf__send_fd(c->box[1], "Y", 1, c->mfd)) {
				lf__shm_broken(c, fd); /* the others could not map it */
				st = BROKEN;
			}
		}
		if (c->board && st != UNDECIDED)
			c->board->state = st;
		lf__shm_board_leave(c);
	}
	errno = e0;
	pthread_mutex_unlock(&c->txl);
}

/* The client waits for the server's answer until end (lf__sys_now_ns's
 * clock; a signal does not end the wait): false if it has not come. */
bool lf__shm_decide_by(struct lf_shm_conn *c, int fd, uint64_t end)
{
	for (lf__shm_decide(c, fd); atomic_load(&c->state) == UNDECIDED; lf__shm_decide(c, fd)) {
		int ms = lf__sys_ms_until(end);
		if (!ms)
			return false;
		lf__sys_poll1(fd, POLLIN, ms);
	}
	return true;
}

/* A fork's prepare: c, a client waiting for its answer, gets its board
 * (once). None (no memory, no descriptors): as before it, the processes
 * may each take the answer. */
void lf__shm_board_make(struct lf_shm_conn *c)
{
	/* A fork's prepare takes no lock it could wait for: a fork from a
	 * signal handler that interrupted this thread inside txl would wait
	 * for ever. Another thread holds txl only across non-blocking calls:
	 * a few tries; still held, the fork goes on without a board. */
	int tries = 0;
	while (pthread_mutex_trylock(&c->txl))
		if (++tries == 200)
			return;
		else
			sched_yield();
	if (c->board || c->server || atomic_load(&c->state) != UNDECIDED) {
		pthread_mutex_unlock(&c->txl);
		return;
	}
	int bfd = memfd_create(BOARD, MFD_CLOEXEC), sv[2];
	struct lf_shm_board *b = MAP_FAILED;
	if (bfd >= 0 && !ftruncate(bfd, sizeof(*b)))
		b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, bfd, 0);
	bool pair = false;
	if (b == MAP_FAILED || !lf__shm_keep(bfd, &c->bfd, &c->bfd_ino) ||
	    !(pair = !lf__sys_socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv)) ||
	    !lf__shm_keep(sv[0], &c->box[0], &c->box_ino[0]) || !lf__shm_keep(sv[1], &c->box[1], &c->box_ino[1])) {
		if (pair && c->box[0] < 0)
			lf__sys_close(sv[1]); /* the first keep failed (and closed sv[0]) */
		if (b == MAP_FAILED && bfd >= 0 && c->bfd != bfd)
			lf__sys_close(bfd);
		if (b != MAP_FAILED)
			munmap(b, sizeof(*b));
		lf__shm_board_free(c);
		pthread_mutex_unlock(&c->txl);
		return;
	}
	lf__mutex_init_shared(&b->m);
	b->state = UNDECIDED;
	b->stream_out = c->stream_out;
	atomic_init(&b->holders, 1); /* this process; the fork's prepare counts the child */
	c->board = b;
	pthread_mutex_unlock(&c->txl);
}

/* The board an exec carried (shm_exec.c): bfd its memfd, box its pair,
 * with the inodes recorded; each checked (a memfd of the board's name and
 * size, two sockets). false: not taken (the caller closes what it gave). */
bool lf__shm_board_adopt(struct lf_shm_conn *c, int bfd, unsigned long bino, const int box[2],
			 const unsigned long boxino[2])
{
	char p[48], name[64];
	struct stat st;
	ssize_t l;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", bfd);
	if (bfd < 0 || (l = readlink(p, name, sizeof(name) - 1)) < 0 || fstat(bfd, &st) ||
	    (unsigned long)st.st_ino != bino || st.st_size != sizeof(*c->board))
		return false;
	name[l] = 0;
	if (strcmp(name, "/memfd:" BOARD " (deleted)"))
		return false;
	for (int i = 0; i < 2; i++)
		if (fstat(box[i], &st) || !S_ISSOCK(st.st_mode) || (unsigned long)st.st_ino != boxino[i])
			return false;
	void *b = mmap(NULL, sizeof(*c->board), PROT_READ | PROT_WRITE, MAP_SHARED, bfd, 0);
	if (b == MAP_FAILED)
		return false;
	c->board = b;
	lf__sys_fcntl(bfd, F_SETFD, FD_CLOEXEC); /* the exec made them inheritable */
	lf__sys_fcntl(box[0], F_SETFD, FD_CLOEXEC);
	lf__sys_fcntl(box[1], F_SETFD, FD_CLOEXEC);
	lf__shm_keep(bfd, &c->bfd, &c->bfd_ino);
	lf__shm_keep(box[0], &c->box[0], &c->box_ino[0]);
	lf__shm_keep(box[1], &c->box[1], &c->box_ino[1]);
	return true;
}

/* Who holds c's end, for one that has a board: the processes that hold
 * the board too (a fork's child, an exec's new image). Processes without
 * it (a pass's receiver, a program a vfork child exec'd) count in the
 * page's `others`, as for any connection. */
void lf__shm_board_holder(struct lf_shm_conn *c, bool more)
{
	if (more) {
		atomic_fetch_add(&c->board->holders, 1);
		return;
	}
	unsigned n = atomic_load(&c->board->holders);
	while (n && !atomic_compare_exchange_weak(&c->board->holders, &n, n - 1))
		;
}

bool lf__shm_board_alone(const struct lf_shm_conn *c)
{
	return !c->board || atomic_load(&c->board->holders) == 1;
}

/* The process's last put of c. */
void lf__shm_board_free(struct lf_shm_conn *c)
{
	lf__shm_unkeep(&c->bfd, c->bfd_ino);
	lf__shm_unkeep(&c->box[0], c->box_ino[0]);
	lf__shm_unkeep(&c->box[1], c->box_ino[1]);
	if (c->board)
		munmap(c->board, sizeof(*c->board));
	c->board = NULL;
}
