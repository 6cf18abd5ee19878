/* The shared-memory tier (docs/shm.md): a fast-path connection whose two
 * ends asked for it moves its bytes through two single-producer/single-
 * consumer rings (src/protocol/ring.c) in a sealed memfd that the server
 * made and sent at its claim; the Unix socket stays the connection's
 * identity, its doorbell and its end.
 *
 * This file holds the connection's state, the answer and the switch,
 * opting in, and what poll and FIONREAD see; shm_io.c reads and writes and
 * waits (the doorbell and room are described there); shm_conn.h is what
 * the two share.
 *
 * The answer: a client that asks binds its hello under a name of kind "T"
 * (protocol 6). The server's claim answers it before accept returns, so
 * before any byte of the server's: one byte on the stream, "Y" with the
 * memfd (SCM_RIGHTS; the client's socket takes descriptors only until it
 * has read this byte) or "N". The client reads the answer at its next call
 * on the socket; until then its writes go on the stream, and when it
 * switches it writes how many (`pre`) into the shared page before its
 * first ring byte, so the server reads exactly that many from the stream
 * before the ring (peeking first: it never takes a token for data). */
#include "internal.h"
#include "loopfast.h"
#include "shm.h"
#include "shm_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bool lf__shm_global;
bool lf__shm_used;
atomic_uint lf__shm_waits;
int lf__shm_fd_hi = -1;
atomic_int lf__shm_live;
atomic_int lf__shm_undecided;
atomic_int lf__shm_full;
atomic_uint lf__shm_forks;

/* Who holds an end (docs/shm.md): before a fork, each connection on the
 * tier that this process was counted for gains a holder in its page (the
 * child), and is counted again at the fork's new number. One that is not
 * on the tier yet, or not found here (being made or attached by another
 * thread), stays behind the number: never alone again, in the parent and
 * the child alike. */
void lf__shm_fork_prepare(void)
{
	unsigned s = atomic_fetch_add(&lf__shm_forks, 1); /* odd: none is alone meanwhile */
	int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED);

	for (int fd = 0; atomic_load(&lf__shm_live) && fd <= hi; fd++) {
		struct lf_shm_conn *c = lf__shm_use(fd);
		unsigned want = s;
		if (!c)
			continue;
		if (!c->board && atomic_load(&c->state) == UNDECIDED)
			lf__shm_board_make(c); /* the answer, for whichever process takes it (shm_answer.c) */
		if (c->board && atomic_compare_exchange_strong(&c->forks_seen, &want, s + 2))
			lf__shm_board_holder(c, true); /* the child has the board too */
		else if (!c->board && atomic_load(&c->state) == ON &&
			 atomic_compare_exchange_strong(&c->forks_seen, &want, s + 2))
			lf__shm_holder(c, true); /* once a connection: its dups find it counted */
		lf__shm_done(fd);
	}
}

void lf__shm_fork_after(void)
{
	atomic_fetch_add(&lf__shm_forks, 1);
}

bool lf__shm_alone(struct lf_shm_conn *c)
{
	unsigned s = atomic_load(&lf__shm_forks);

	return !(s & 1) && atomic_load(&c->forks_seen) == s && lf__shm_board_alone(c) &&
	       (atomic_load(&c->state) != ON || !atomic_load(&c->tx.h->others));
}

/* One holder more or fewer for c's end (on the tier); the page's word is
 * the peer's to write too: never below 0. */
void lf__shm_holder(struct lf_shm_conn *c, bool more)
{
	if (more) {
		atomic_fetch_add(&c->tx.h->others, 1);
		return;
	}
	unsigned n = atomic_load(&c->tx.h->others);
	while (n && !atomic_compare_exchange_weak(&c->tx.h->others, &n, n - 1))
		;
}

/* The process's last put of c, or its exit: one holder fewer, if it was
 * counted (once). */
static void holder_gone(struct lf_shm_conn *c)
{
	if (atomic_exchange(&c->let_go, true) || atomic_load(&c->forks_seen) != atomic_load(&lf__shm_forks))
		return; /* not counted */
	if (c->board)
		lf__shm_board_holder(c, false);
	else if (c->map && c->tx.h)
		lf__shm_holder(c, false);
}

/* exit(): the process lets go of the ends it holds, which the kernel's
 * closes would not tell, so that a forked child or an exec'd program
 * that exits (a shell's command, which inherits the shell's redirections)
 * leaves the others alone again: before, one such child made every later
 * pass, stdio dup or leave of its parent refused. Last, after the
 * program's atexit handlers (which may still use a socket). Not in a
 * vfork child (its parent's memory), nor at _exit or a kill (documented:
 * docs/shm.md, "Who holds an end"). */
__attribute__((destructor(101))) static void shm_exit(void)
{
	int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED);

	if (!lf__shm_used || lf__sys_vfork_child())
		return;
	for (int fd = 0; fd <= hi; fd++) {
		struct lf_shm_conn *c = lf__shm_use(fd);
		if (c) {
			holder_gone(c);
			lf__shm_done(fd);
		}
	}
}

/* What the rings hold now, as seen from this process without a lock: the
 * own position read from the page (a forked process may have moved it). */
long lf__shm_avail(const struct lf_shm_conn *c)
{
	struct lf_ring v = c->rx;
	lf__ring_sync(&v, true);
	return lf__ring_avail(&v);
}

/* ... and the room, grown if the ring is full and SO_SNDBUF was raised. */
static long space_now(struct lf_shm_conn *c)
{
	struct lf_ring v = c->tx;
	lf__ring_sync(&v, false);
	long s = lf__ring_space(&v);
	if (s == 0 && atomic_load_explicit(&c->want, memory_order_relaxed) > v.limit) {
		pthread_mutex_lock(&c->txl);
		lf__ring_sync(&c->tx, false);
		s = lf__shm_mem_room(c, -1, SIZE_MAX);
		pthread_mutex_unlock(&c->txl);
	}
	return s;
}

struct lf_shm_conn *lf__shm_conn_of(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);

	if (!f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHM))
		return NULL;
	return f->shm;
}

struct lf_shm_conn *lf__shm_conn_new(bool server)
{
	struct lf_shm_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->mfd = c->kept = c->bfd = c->box[0] = c->box[1] = -1;
	atomic_init(&c->refs, 1);
	atomic_init(&c->forks_seen, atomic_load(&lf__shm_forks)); /* odd: made during a fork, never alone */
	atomic_fetch_add(&lf__shm_live, 1);
	c->server = server;
	atomic_init(&c->state, server ? ON : UNDECIDED);
	if (!server)
		atomic_fetch_add(&lf__shm_undecided, 1);
	pthread_mutex_init(&c->rxl, NULL);
	pthread_mutex_init(&c->txl, NULL);
	return c;
}

/* Every change of a connection's state: the count of clients still
 * waiting for their answer (lf__shm_undecided) decides whether epoll's
 * answers are looked at (lf__shm_epoll_fix). */
void lf__shm_set_state(struct lf_shm_conn *c, int st)
{
	if (atomic_exchange(&c->state, st) == UNDECIDED && st != UNDECIDED)
		atomic_fetch_sub(&lf__shm_undecided, 1);
	if (st == ON)
		atomic_fetch_add(&lf__shm_watchable, 1); /* an epoll wait may watch it now */
}

void lf__shm_set_full(struct lf_shm_conn *c, bool full)
{
	if (atomic_exchange(&c->full, full) != full)
		atomic_fetch_add(&lf__shm_full, full ? 1 : -1);
}

/* The process's last descriptor of the connection is gone: its peer's
 * reader looks at the socket from now on (fin's bit 0), and its peer's
 * writer looks once (fin moves by 2): a write into the ring of a peer
 * that closed with bytes unread (a token on its socket, so the kernel
 * reset the connection; or none, and the kernel shut it) would make no
 * system call that could see it. When close() is the caller this runs
 * after the kernel's close (lf__shm_closed), so a writer that looks
 * because the word moved finds the socket ended (other processes may
 * still hold it: then it finds it there, and looks again at their close). */
static atomic_int watchers;                 /* threads between lf__shm_watch and lf__shm_unwatch */
static _Atomic(struct lf_shm_conn *) limbo; /* connections gone meanwhile, their rings still mapped */

static void conn_free(struct lf_shm_conn *c)
{
	if (c->map)
		munmap(c->map, LF_RING_MAP_OF(c->rx.area));
	free(c);
}

static void to_limbo(struct lf_shm_conn *c)
{
	c->limbo_next = atomic_load(&limbo);
	while (!atomic_compare_exchange_weak(&limbo, &c->limbo_next, c))
		;
}

/* Frees what is in limbo once no epoll wait may hold it: taken first,
 * then the watchers counted. A wait that holds one took it from its
 * descriptor's entry before that entry let go of it (drop), so before the
 * last put, which put it here before this take: it is still counted.
 * What is put back while a wait is counted is that wait's to free at its
 * end, unless it ended while this put it back (its drain found the limbo
 * empty): so the count is read again after, and the limbo taken again if
 * it is 0 (left there, the connection's ring stayed mapped until another
 * epoll wait spun, or for ever). */
static void limbo_drain(void)
{
	for (struct lf_shm_conn *l; (l = atomic_exchange(&limbo, NULL));) {
		bool none = atomic_load(&watchers) == 0;
		while (l) {
			struct lf_shm_conn *next = l->limbo_next;
			if (none)
				conn_free(l);
			else
				to_limbo(l);
			l = next;
		}
		if (none || atomic_load(&watchers))
			return;
	}
}

/* A hidden descriptor of the connection's (lf__fd_hide) closed, only if
 * still ours: a close_range may have taken the number, and the program
 * reused it. */
bool lf__shm_ours(int fd, unsigned long ino)
{
	struct stat st;

	return fd >= 0 && !fstat(fd, &st) && (unsigned long)st.st_ino == ino;
}

void lf__shm_unkeep(int *home, unsigned long ino)
{
	int fd = *home;

	if (fd < 0)
		return;
	lf__fd_unhide_home(fd, home); /* its entry points at the connection's word */
	if (lf__shm_ours(fd, ino))
		lf__sys_close(fd);
	*home = -1;
}

static void conn_put(struct lf_shm_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	/* The last close's takes (lf__shm_hold), through the kept socket: a
	 * call that found its descriptor closed never touches the number
	 * again, and a token it left for bytes it read reset the peer at the
	 * kept socket's close, where TCP gives EOF. */
	if (c->map && atomic_load(&c->state) == ON && lf__shm_alone(c) && lf__shm_ours(c->kept, c->kept_ino))
		lf__shm_io_spent(c, c->kept);
	holder_gone(c);
	if (c->map && atomic_load(&c->state) == ON) {
		atomic_fetch_or(&c->tx.h->fin, 1);
		atomic_fetch_add(&c->tx.h->fin, 2);
	}
	lf__shm_set_state(c, BROKEN);
	lf__shm_set_full(c, false);
	lf__shm_mem_forget(c);
	lf__shm_unkeep(&c->mfd, c->mfd_ino);
	lf__shm_unkeep(&c->kept, c->kept_ino); /* the peer sees the end now */
	lf__shm_board_free(c);
	atomic_fetch_sub(&lf__shm_live, 1);
	if (atomic_load(&watchers)) /* an epoll wait may be looking at its ring */
		to_limbo(c);
	else
		conn_free(c);
	limbo_drain(); /* and what a fork's child has from its parent's waits */
}

/* The memfd stays open with the connection (one hidden descriptor per
 * connection), so that an exec that keeps the socket open can keep the
 * rings too (shm_exec.c): the kernel gives no way back to a memfd from
 * its mapping without CAP_CHECKPOINT_RESTORE (/proc/self/map_files). */
void lf__shm_keep_memfd(struct lf_shm_conn *c, int mfd)
{
	lf__shm_keep(mfd, &c->mfd, &c->mfd_ino);
}

bool lf__shm_keep(int fd, int *home, unsigned long *ino)
{
	struct stat st;

	if (fstat(fd, &st)) {
		lf__sys_close(fd);
		return false;
	}
	*ino = (unsigned long)st.st_ino;
	lf__fd_hide(fd, home);
	return true;
}

__thread bool lf__shm_closing_range;

/* The kernel keeps a socket open while a system call uses it; a call of
 * the tier's may be in user space (a spinning poll, a read's look at its
 * ring) when another thread closes its descriptor, and the kernel then
 * freed the socket at once: its peer saw the end (EPIPE on its next
 * write) while the call went on, where over TCP it sees it when the call
 * returns. So such a close keeps a duplicate of the socket (hidden) for
 * the connection's last put. Once per connection. Not in a close_range
 * (lf__shm_closing_range): the kernel closes the duplicate with the rest. */
static void keep_socket(struct lf_shm_conn *c, int fd)
{
	int k;

	/* Not after a dup2 over fd, whose drop comes after the kernel's: fd
	 * names the new file then, and the socket is gone already. */
	if (lf__shm_closing_range || !lf__shm_ours(fd, c->kept_ino) || atomic_exchange(&c->keeping, true) ||
	    (k = lf__fd_dup_hidden(fd)) < 0)
		return;
	lf__fd_hide(k, &c->kept);
}

/* A call of another thread may be using the connection through this
 * entry (lf__shm_use) when its descriptor is closed or dup2'd over: a
 * read blocked on the socket, a poll that returned for it. The kernel
 * keeps a socket open while a system call uses it, whatever close does
 * meanwhile (the peer sees no end until that call returns); so here the
 * entry's reference is parked on the entry and put by the last such
 * call as it ends (before: the state freed under the call, SIGSEGV). The
 * close publishes the park and then counts the calls, a call counts
 * itself and then reads the entry, and each looks again at the other's
 * word after it changed its own (all sequentially consistent): one of
 * them puts it, once. */
static void park_on(struct lf_fd *f, struct lf_shm_conn *c)
{
	c->park_next = __atomic_load_n(&f->shm_parked, __ATOMIC_SEQ_CST);
	while (!__atomic_compare_exchange_n(&f->shm_parked, &c->park_next, c, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
}

/* What it takes is put only if no call is counted after the take: one
 * that found the count 0 may find the park there only after a new call
 * came (a number closed and reused meanwhile) and had its connection
 * parked by another close, which it still uses (the last call to leave
 * put it under the new one: SIGSEGV, with 300 ms between the count and
 * the look). Else it goes back, for that call's end to put, and the count
 * is read again, as drop reads it (limbo_drain's way). */
static void unpark(struct lf_fd *f)
{
	int e = errno;

	for (struct lf_shm_conn *l; (l = __atomic_exchange_n(&f->shm_parked, NULL, __ATOMIC_SEQ_CST));) {
		bool none = atomic_load(&f->shm_busy) == 0;
		for (struct lf_shm_conn *c = l, *next; c; c = next) {
			next = c->park_next;
			if (none)
				conn_put(c);
			else
				park_on(f, c);
		}
		if (none || atomic_load(&f->shm_busy))
			break;
	}
	errno = e;
}

struct lf_shm_conn *lf__shm_use(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);

	if (!f || !(atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_SHM))
		return NULL;
	atomic_fetch_add(&f->shm_busy, 1);
	struct lf_shm_conn *c = __atomic_load_n(&f->shm, __ATOMIC_SEQ_CST);
	if (!c)
		lf__shm_done(fd);
	return c;
}

void lf__shm_done(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);

	if (atomic_fetch_sub(&f->shm_busy, 1) == 1 && __atomic_load_n(&f->shm_parked, __ATOMIC_SEQ_CST))
		unpark(f);
}

static void drop(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	/* off the entry before the put: an epoll wait that takes it from
	 * there counts itself first (lf__shm_watch, limbo_drain) */
	struct lf_shm_conn *c = f ? __atomic_exchange_n(&f->shm, NULL, __ATOMIC_SEQ_CST) : NULL;
	if (!c)
		return;
	if (!atomic_load(&f->shm_busy)) {
		conn_put(c);
		return;
	}
	keep_socket(c, fd);
	park_on(f, c);
	if (!atomic_load(&f->shm_busy))
		unpark(f);
}

/* A dup (lf__fd_copy) shares fd's connection, taken as a call takes it
 * (a dup racing a close of fd: the copy took the reference of a
 * connection the close freed). */
static struct lf_shm_conn *share(int fd)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (c) {
		atomic_fetch_add(&c->refs, 1);
		lf__shm_done(fd);
	}
	return c;
}

static void reg(void)
{
	lf__fd_on_drop(LF_F_SHM, drop);
	lf__fd_on_share(share);
}

static void attach(int fd, struct lf_shm_conn *c)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct lf_fd *f = lf__fd(fd);

	pthread_once(&once, reg);
	lf__fork_init();
	struct stat st;
	c->kept_ino = fstat(fd, &st) ? 0 : (unsigned long)st.st_ino; /* the socket's, for keep_socket */
	f->shm = c;
	atomic_fetch_or(&f->flags, LF_F_SHM);
	for (int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED);
	     fd > hi && !__atomic_compare_exchange_n(&lf__shm_fd_hi, &hi, fd, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);)
		;
	lf__shm_used = true;
	for (int i = 0; i < LF_EPOLL_MAX; i++) /* registrations carried over from before connect */
		if (f->ep[i].epfd1 && (f->ep[i].ev.events & EPOLLET))
			lf__shm_want_edges(fd);
	atomic_fetch_add(&lf__shm_watchable, 1); /* an epoll wait may watch it now */
}

/* A peer that broke the protocol: the connection is reset (both ways),
 * and the next calls go to the Unix socket, which answers as a reset one. */
int lf__shm_broken(struct lf_shm_conn *c, int fd)
{
	lf__shm_set_state(c, BROKEN);
	lf__sys_shutdown(fd, SHUT_RDWR);
	errno = ECONNRESET;
	return -1;
}

void lf__shm_fin(int fd)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (c && atomic_load(&c->state) == ON)
		atomic_fetch_or(&c->tx.h->fin, 1);
	if (c)
		lf__shm_done(fd);
}

/* A client that closes before it took the server's answer would leave
 * the answer's byte unread, and the kernel would reset the server's end
 * where TCP gives it EOF: the last descriptor takes it first (if it has
 * come; never waiting); so too the tokens left for bytes already read
 * (lf__shm_io_spent). Not after a fork: another process may hold the
 * socket and still need the answer, or read the ring. */
struct lf_shm_conn *lf__shm_hold(int fd)
{
	struct lf_shm_conn *c = lf__shm_use(fd); /* another thread's close or dup2 over fd meanwhile */

	if (!c)
		return NULL;
	if (atomic_load(&c->refs) == 1 && lf__shm_alone(c)) {
		lf__shm_decide(c, fd);
		if (atomic_load(&c->state) == ON) {
			lf__shm_io_spent(c, fd); /* tokens left for bytes already read (shm_io.c) */
			lf__shm_leave_met(c, fd); /* and a leave's bytes (shm_leave.c) */
		}
	}
	atomic_fetch_add(&c->refs, 1);
	lf__shm_done(fd);
	return c;
}

void lf__shm_closed(struct lf_shm_conn *c)
{
	int e = errno;

	if (c)
		conn_put(c);
	errno = e;
}

void lf__shm_sndbuf(int fd)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (c) {
		lf__shm_mem_sndbuf(c, fd);
		lf__shm_done(fd);
	}
}

/* ---- negotiation */

bool lf__shm_wants(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	bool w = fd > LF_SHM_STDIO_MAX && (lf__shm_global || (f && (atomic_load(&f->flags) & LF_F_TIER)));

	if (w)
		lf__shm_used = true;
	return w;
}

/* Each direction's data area: room for the largest buffer SO_SNDBUF can
 * give (twice net.core.wmem_max, read once per process) and the slack a
 * Unix stream takes past it (lf__shm_mem_want), as a power of two from
 * LF_RING_SIZE to LF_RING_MAX. Holes until written: an area costs address
 * space, not memory. */
static uint32_t ring_area(void)
{
	static _Atomic uint32_t area;
	uint32_t a = atomic_load_explicit(&area, memory_order_relaxed);
	char buf[32] = "";

	if (a)
		return a;
	int fd = open("/proc/sys/net/core/wmem_max", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (lf__sys_read(fd, buf, sizeof(buf) - 1) < 0)
			buf[0] = 0;
		lf__sys_close(fd);
	}
	long long max = atoll(buf);
	uint32_t want = lf__shm_mem_want((int)(max > 0 && max < LF_RING_MAX ? 2 * max : max > 0 ? LF_RING_MAX : 212992 * 2));
	for (a = LF_RING_SIZE; a < want && a < LF_RING_MAX; a *= 2)
		;
	atomic_store_explicit(&area, a, memory_order_relaxed);
	return a;
}

/* The server's memfd: made, sized, initialised, mapped, then sealed so
 * that its size can never change under the client's mapping. */
static struct lf_shm_conn *make_rings(int *mfd)
{
	struct lf_shm_conn *c = lf__shm_conn_new(true);
	int fd = memfd_create("loopfast-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *map = MAP_FAILED;
	uint32_t area = ring_area();

	if (!c || fd < 0 || ftruncate(fd, (off_t)LF_RING_MAP_OF(area)) ||
	    (map = mmap(NULL, LF_RING_MAP_OF(area), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ||
	    lf__sys_fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		if (map != MAP_FAILED)
			munmap(map, LF_RING_MAP_OF(area));
		if (fd >= 0)
			lf__sys_close(fd);
		if (c)
			atomic_fetch_sub(&lf__shm_live, 1);
		free(c);
		return NULL;
	}
	struct lf_ring_page *p = map;
	p->magic = LF_RING_MAGIC;
	p->version = LF_PROTO_VERSION;
	p->size = area;
	c->map = map;
	lf__ring_views(map, area, true, &c->rx, &c->tx);
	*mfd = fd;
	return c;
}

struct lf_shm_conn *lf__shm_offer(int unx, int lfd, int fd, bool asked, bool *fail)
{
	struct lf_fd *l = lf__fd(lfd);
	struct lf_shm_conn *c = NULL;
	int mfd = -1;

	*fail = false;
	if (!asked)
		return NULL;
	if (fd > LF_SHM_STDIO_MAX && (lf__shm_global || (l && (atomic_load(&l->flags) & LF_F_TIER))))
		c = make_rings(&mfd);
	char v = c ? 'Y' : 'N';
	struct iovec iov = { &v, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm = { { 0 } }; /* its padding too: the kernel reads the whole buffer (valgrind) */
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (c) {
		m.msg_control = cm.buf;
		m.msg_controllen = sizeof(cm.buf);
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &mfd, sizeof(int));
	}
	ssize_t r = lf__sys_sendmsg(unx, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	int e = r < 0 ? errno : 0;
	if (mfd >= 0)
		lf__shm_keep_memfd(c, mfd);
	if (r != 1) {
		/* EPIPE: the client has gone (or shut its reading side) before
		 * the answer: no tier, and what it wrote is read from the stream
		 * (TCP accepts it too), not a reset. */
		*fail = e != EPIPE;
		if (c)
			conn_put(c);
		return NULL;
	}
	return c;
}

void lf__shm_put(struct lf_shm_conn *c)
{
	if (c)
		conn_put(c);
}

void lf__shm_attach(int fd, struct lf_shm_conn *c)
{
	if (c)
		attach(fd, c);
}

/* The client's map of the server's memfd: only a sealed memfd of exactly
 * the rings' size for the area its header names (a power of two from
 * LF_RING_SIZE to LF_RING_MAX; a smaller file would fault past its end).
 * *area: that area, read once here (the peer may write the header later). */
void *lf__shm_map(int mfd, uint32_t *area)
{
	struct stat st;
	int seals = lf__sys_fcntl(mfd, F_GET_SEALS, 0);
	int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

	if (seals < 0 || (seals & need) != need || fstat(mfd, &st) || st.st_size < (off_t)LF_RING_MAP ||
	    st.st_size > (off_t)LF_RING_MAP_OF(LF_RING_MAX))
		return NULL;
	size_t len = (size_t)st.st_size;
	void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (map == MAP_FAILED)
		return NULL;
	const struct lf_ring_page *p = map;
	uint32_t a = p->size;
	if (p->magic != LF_RING_MAGIC || p->version != LF_PROTO_VERSION || (a & (a - 1)) || a < LF_RING_SIZE ||
	    a > LF_RING_MAX || LF_RING_MAP_OF(a) != len) {
		munmap(map, len);
		return NULL;
	}
	*area = a;
	return map;
}

void lf__shm_attach_client(int fd)
{
	struct lf_shm_conn *c = lf__shm_conn_new(false);

	if (!c) { /* no memory: the answer stays on the stream; reset rather than misread it */
		lf__sys_shutdown(fd, SHUT_RDWR);
		return;
	}
	attach(fd, c);
	lf__shm_decide(c, fd);
}

/* ---- what waits and ioctl see */

/* An epoll ET registration: TCP gives an edge for every write that adds
 * data, the doorbell only for a ring that was empty. The writer reads the
 * reader's edges word and then sends an edge byte for each push that
 * found the bell already set (shm_io.c); the reader takes those bytes
 * along with the tokens. Once asked, for the connection's life. */
void lf__shm_want_edges(int fd)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (!c)
		return;
	atomic_store(&c->edges, true);
	if (atomic_load(&c->state) == ON)
		atomic_store(&c->rx.h->edges, 1);
	lf__shm_done(fd);
}

static bool inq_held(struct lf_shm_conn *c, int fd, int *out)
{
	lf__shm_decide(c, fd);
	int st = atomic_load(&c->state);
	if (st == OFF || st == BROKEN)
		return false;
	if (st == UNDECIDED) {
		*out = 0;
		return true;
	}
	if (c->server && !c->stream_done) {
		int q = 0;
		lf__sys_ioctl(fd, FIONREAD, &q);
		if (atomic_load_explicit(&c->rx.h->switched, memory_order_acquire)) {
			uint64_t pre = atomic_load(&c->rx.h->pre);
			q = pre > c->stream_in ? (int)(pre - c->stream_in) : 0;
			long a = lf__shm_avail(c);
			q += a > 0 ? (int)a : 0;
		}
		*out = q;
		return true;
	}
	long a = lf__shm_avail(c);
	*out = a > 0 ? (int)lf__shm_io_unread(c, a) : 0;
	return true;
}

bool lf__shm_inq(int fd, int *out)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (!c)
		return false;
	bool r = inq_held(c, fd, out);
	lf__shm_done(fd);
	return r;
}

/* What POLLIN and POLLOUT mean on the tier: readable when a read would
 * not wait (the socket's answer, once the client's answer byte is taken
 * and the tokens of bytes already read and edge bytes are set aside),
 * writable when the ring has room. Before a wait that will not look at
 * its ring (sleep), a socket polled for POLLIN says its reader does not
 * poll the ring (awake 0: its writer rings); a wait that spins says it
 * polls at each look (lf__shm_watch_ready_poll), and clearing the word
 * first would have the answer's writer ring in between. After a wait
 * that returned, the word stays as the wait left it: a
 * ping-pong's reader that spun is about to read, answer and wait again,
 * and its answer's write renews it (lf__shm_spin_busy), so the next
 * message is handed off with no token. */
static void poll_fix_held(struct lf_shm_conn *c, struct pollfd *p, bool *full, bool sleep)
{
	lf__shm_decide(c, p->fd);
	lf__shm_io_flush(c, p->fd);
	int st = atomic_load(&c->state);
	if (sleep && st == ON && (p->events & (POLLIN | POLLRDNORM)))
		lf__shm_spin_sleep(c);
	if (st == ON && (p->events & (POLLOUT | POLLWRNORM)) && !atomic_load(&c->tx_left) && space_now(c) == 0) {
		p->revents &= (short)~(POLLOUT | POLLWRNORM);
		*full = true;
	}
	if ((p->revents & (POLLIN | POLLRDNORM)) && !lf__fd_shut_rd(p->fd) &&
	    (st == OFF || (st == ON && lf__shm_avail(c) == 0 && (!c->server || c->stream_done)))) {
		char b;
		ssize_t r;
		if (st == ON) { /* edge bytes of pushes already read say nothing */
			/* nor do tokens of bytes already read (shm_io.c); not
			 * while another process may hold the end: it may be
			 * reading the ring, and its settle owes the token this
			 * would take */
			if (lf__shm_alone(c))
				lf__shm_io_spent(c, p->fd);
			pthread_mutex_lock(&c->rxl);
			r = lf__shm_io_skip_edges(c, p->fd, &b);
			lf__ring_sync(&c->rx, true);
			/* Only after this end answered: a peer's LF_BYTE_LEFT otherwise
			 * stays for the read, which resets (its error the read's). */
			if (r == 1 && b == LF_BYTE_LEFT && atomic_load(&c->tx_left) && lf__ring_avail(&c->rx) == 0 &&
			    !atomic_load(&c->rx.h->bell) && !lf__shm_io_met_leave(c, p->fd)) /* the stream's from here */
				r = lf__sys_recvfrom(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL);
			pthread_mutex_unlock(&c->rxl);
		} else {
			r = lf__sys_recvfrom(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL);
		}
		if (r < 0 && errno == EAGAIN)
			p->revents &= (short)~(POLLIN | POLLRDNORM);
		lf__shm_io_end_seen(c, p->fd, r, true); /* the peer's reset: the application's to read */
	}
	if (atomic_load_explicit(&c->asked, memory_order_relaxed))
		lf__shm_io_answer(c, p->fd); /* a request met in the look */
}

static void poll_fix(struct pollfd *p, bool *full, bool sleep)
{
	struct lf_shm_conn *c = lf__shm_use(p->fd);

	if (c) {
		poll_fix_held(c, p, full, sleep);
		lf__shm_done(p->fd);
	}
}

int lf__shm_poll(struct pollfd *fds, unsigned long n, long long timeout_ns, const void *mask,
		 int (*wait)(struct pollfd *, unsigned long, long long, const void *))
{
	uint64_t start = lf__sys_now_ns();
	bool any = false;

	for (unsigned long i = 0; i < n && !any; i++)
		any = lf__shm_conn_of(fds[i].fd) != NULL;
	if (!any && !atomic_load_explicit(&lf__shm_due, memory_order_relaxed)) {
		/* a wait all the same: what it reports (a pidfd, a pipe) may be a peer's end */
		int r = wait(fds, n, timeout_ns, mask);
		lf__shm_waited();
		return r;
	}
	bool spins = false; /* the wait will (wait.c, poll_spinner), and watch the rings polled for POLLIN alone */
	for (unsigned long i = 0; i < n && !spins; i++)
		spins = (fds[i].events & POLLIN) && lf__may_spin(fds[i].fd);
	for (;;) {
		bool full = false;
		for (unsigned long i = 0; i < n; i++) {
			fds[i].revents = 0;
			/* takes answers; notes full rings */
			poll_fix(&fds[i], &full, !spins || (fds[i].events & ~(POLLIN | POLLRDNORM)));
		}
		long long left = timeout_ns < 0 ? -1 : timeout_ns - (long long)(lf__sys_now_ns() - start);
		if (timeout_ns >= 0 && left < 0)
			left = 0;
		/* A full ring has no kernel event: look again every millisecond. */
		long long slice = full && (left < 0 || left > 1000000) ? 1000000 : lf__shm_mem_slice(left);
		int r = wait(fds, n, slice, mask);
		lf__shm_waited();
		if (r == 0)
			lf__shm_mem_sweep(); /* due give-backs (shm_mem.c) */
		if (r <= 0) {
			if (r < 0 || slice == left)
				return r;
			continue;
		}
		int k = 0;
		for (unsigned long i = 0; i < n; i++) {
			if (fds[i].revents)
				poll_fix(&fds[i], &full, false);
			k += fds[i].revents != 0;
		}
		if (k || slice == 0)
			return k;
	}
}

/* Level-triggered EPOLLOUT on a full ring (docs/shm.md, "The doorbell"):
 * epoll sees the Unix socket, which is writable, so a writer that waits
 * level-triggered for room would be woken at once, over and over, while
 * its reader reads nothing (228,778 times a second, a whole CPU). So while
 * a connection of the process has a non-blocking writer that found no
 * room (lf__shm_full), an EPOLLOUT event of a tier socket whose ring is
 * still full is taken out, and its registration made edge-triggered for
 * the rest of this wait: the kernel then reports it again only at the
 * next edge, when the reader takes the writer's token (which the write
 * that found no room left: shm_io.c, ring_bell's full), once it has
 * emptied the ring. A write that met the reader's give-back (trim) said
 * EAGAIN with room: that registration is parked too, and looked at again
 * each millisecond (lf__shm_parked_trim: wait.c's epoll_loop cuts its
 * wait so and unparks at each slice's end), since a reader may read
 * nothing for a while after its give-back. Before the wait returns the registration is made
 * level-triggered again (lf__shm_epoll_unpark), so the application never
 * sees an edge-triggered EPOLLIN. Edge-triggered, one-shot and exclusive
 * registrations are left alone (an edge-triggered one's edge comes from
 * the token already), and so is one that cannot be made edge-triggered
 * (more than LF_PARK_MAX in one wait): the kernel's word stands, and so
 * is a socket ever registered edge-triggered (c->edges: nginx's). A registration is the
 * application's as the interposed epoll_ctl recorded it (interpose.c
 * records every one of a tier socket, in up to LF_EPOLL_MAX sets; the
 * kernel's fdinfo costs 1.4 ms a read for a set of 1,000, measured); an
 * event is known by its data among the full tier sockets' registrations,
 * and one whose data two of them share is left as the kernel gave it
 * (another socket's registration with that data would lose EPOLLOUT
 * while the ring is full: programs name each registration by its socket).
 * Another thread that changes the registration during the wait: the
 * kernel has what it made, and the unpark leaves it so; this wait parks
 * it again (the change made it level-triggered: the kernel would report
 * EPOLLOUT at once, over and over, and the wait spun). The application's
 * calls count in the socket's epgen (interpose.c), odd while one runs: a
 * MOD made from the record is made again if one ran meanwhile (it could
 * have come between the record's read and the MOD, which then undid it);
 * the unparks count in eprest (another thread's wait, in this set or
 * another, parks again after one). */
#define LF_PARK_MAX 16
static __thread struct parked {
	int epfd, fd;
	unsigned gen, rest; /* the socket's epgen and eprest when this wait made it edge-triggered */
	unsigned sgen;      /* and the set's record's gen: the application's calls on this set */
} parked[LF_PARK_MAX];
__thread int lf__shm_parked;
__thread bool lf__shm_parked_trim;

/* Another look at a socket whose epgen moved or is odd: yes for 100
 * tries, then for 50 ms from the first of those past it. A bound, for a
 * call that never ends here (a signal handler's wait that interrupted its
 * own thread's epoll_ctl); not a count of tries alone: a MOD made from a
 * record that changed under it must be made again once the change is
 * done, and another thread inside epoll_ctl may be off its CPU for longer
 * than 100 yields (the kernel then kept the old record's MOD: 1 to 3
 * runs in 40 of shm_rearm's race, 2026-11-29). */
static bool try_again(int tries, uint64_t *end)
{
	if (tries < 100)
		return true;
	if (!*end)
		*end = lf__sys_now_ns() + 50000000ull;
	return lf__sys_now_ns() < *end;
}

/* The kernel's registration of fd on epfd made as the record says (with
 * EPOLLET if et), with no epoll_ctl of the application under way or
 * begun meanwhile. Returns the epgen it was made at, or -1 (no record,
 * the kernel said no, or changes without end). */
static long record_mod(int epfd, int fd, bool et, unsigned *sgen)
{
	struct lf_fd *f = lf__fd_peek(fd);
	uint64_t end = 0;

	for (int tries = 0; f && try_again(tries, &end); tries++) {
		unsigned g = __atomic_load_n(&f->epgen, __ATOMIC_ACQUIRE);
		if (g & 1) { /* another thread's epoll_ctl of fd is under way */
			sched_yield();
			continue;
		}
		int r = 0;
		while (r < LF_EPOLL_MAX && f->ep[r].epfd1 != epfd + 1)
			r++;
		if (r == LF_EPOLL_MAX)
			return -1;
		struct epoll_event ev = f->ep[r].ev;
		*sgen = f->ep[r].gen;
		ev.events |= et ? EPOLLET : 0;
		int bad = lf__sys_epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&f->epgen, __ATOMIC_RELAXED) == g)
			return bad ? -1 : (long)g;
	}
	return -1;
}

/* A fork taken while another thread's epoll_ctl of a tier socket ran
 * leaves the socket's epgen odd in the child, where that call never ends
 * (and a call using a socket its count, lf__shm_use):
 * every park there would wait for it, give up, and leave the EPOLLOUT of
 * a full ring in (a forked child woken over and over; 193 children in
 * 200 whose parent re-armed in a loop). */
void lf__shm_epoll_fork_child(void)
{
	int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED);

	atomic_store(&watchers, 0); /* the waits were other threads' */
	for (int x = 0; lf__shm_used && x <= hi; x++) {
		struct lf_fd *f = lf__fd_peek(x);
		if (f && (f->epgen & 1))
			f->epgen++;
		/* so were the calls (and a park whose last call had left, but
		 * not yet put it, when the fork came) */
		if (f && (atomic_load(&f->shm_busy) || __atomic_load_n(&f->shm_parked, __ATOMIC_SEQ_CST))) {
			atomic_store(&f->shm_busy, 0);
			unpark(f);
		}
	}
}

/* As the application's record says; another thread's wait that parked it
 * (in this set or another) parks it again (eprest moves). Not one the
 * application changed in this set since this wait parked it (the set's
 * record's gen moved): its epoll_ctl came after the park (none ran during
 * it), so the kernel has what it made, and a MOD would re-arm a one-shot
 * registration the wait had spent. A change in another set is none: the
 * socket's epgen alone skipped the restore then, and left this set's
 * registration edge-triggered (test_shm.py, two sets, `-late`). */
static bool set_changed(struct lf_fd *f, const struct parked *p)
{
	uint64_t end = 0;

	for (int tries = 0; try_again(tries, &end); tries++) {
		unsigned g = __atomic_load_n(&f->epgen, __ATOMIC_ACQUIRE);
		if (g == p->gen)
			return false;
		if (g & 1) { /* a call under way: its set is not known yet */
			sched_yield();
			continue;
		}
		bool changed = true; /* no record for the set: deleted */
		for (int r = 0; r < LF_EPOLL_MAX; r++)
			if (f->ep[r].epfd1 == p->epfd + 1)
				changed = f->ep[r].gen != p->sgen;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&f->epgen, __ATOMIC_RELAXED) == g)
			return changed;
	}
	return true;
}

void lf__shm_epoll_unpark(void)
{
	for (int i = 0; i < lf__shm_parked; i++) {
		struct lf_fd *f = lf__fd_peek(parked[i].fd);
		unsigned sgen;
		if (f && !set_changed(f, &parked[i]) && record_mod(parked[i].epfd, parked[i].fd, false, &sgen) >= 0)
			__atomic_add_fetch(&f->eprest, 1, __ATOMIC_RELEASE);
	}
	lf__shm_parked = 0;
	lf__shm_parked_trim = false;
}

/* fd's registration on epfd is edge-triggered now: this wait made it so
 * and nobody has changed it since (the kernel reports the MOD's own
 * EPOLLOUT once more), or it is made so here. */
static bool park(int epfd, int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);
	int i = 0;

	while (i < lf__shm_parked && !(parked[i].epfd == epfd && parked[i].fd == fd))
		i++;
	/* read before the MOD: a restore that comes after it is seen */
	unsigned rest = __atomic_load_n(&f->eprest, __ATOMIC_ACQUIRE);
	if (i < lf__shm_parked && parked[i].gen == __atomic_load_n(&f->epgen, __ATOMIC_ACQUIRE) && parked[i].rest == rest)
		return true;
	unsigned sgen = 0;
	long g = i < LF_PARK_MAX ? record_mod(epfd, fd, true, &sgen) : -1;
	if (g < 0)
		return false;
	parked[i] = (struct parked){ epfd, fd, (unsigned)g, rest, sgen };
	lf__shm_parked += i == lf__shm_parked;
	return true;
}

/* The tier socket among those pick says yes to whose registration on
 * epfd (as interpose.c recorded it) has data: its descriptor and the
 * registration into reg; -1 if none, or more than one, has it. */
static int registered(int epfd, uint64_t data, bool (*pick)(int fd), struct epoll_event *reg)
{
	int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED), fd = -1, seen = 0;

	for (int x = 0; x <= hi && seen < 2; x++) {
		struct lf_fd *f = lf__fd_peek(x);
		if (!f || !f->shm || !pick(x))
			continue;
		for (int r = 0; r < LF_EPOLL_MAX; r++)
			if (f->ep[r].epfd1 == epfd + 1 && f->ep[r].ev.data.u64 == data)
				fd = x, *reg = f->ep[r].ev, seen++;
	}
	return seen == 1 ? fd : -1;
}

static bool any_tier(int fd) { (void)fd; return true; }

/* A full ring whose writer waits level-triggered (never edge-triggered). */
static bool full_lt(int fd)
{
	struct lf_shm_conn *c = lf__shm_use(fd);
	bool r = c && atomic_load(&c->full) && !atomic_load(&c->edges) && atomic_load(&c->state) == ON;
	if (c)
		lf__shm_done(fd);
	return r;
}

static int room_fix(int epfd, struct epoll_event *ev, int n)
{
	int k = 0;

	for (int i = 0; i < n; i++) {
		struct epoll_event reg = { 0 };
		int fd = ev[i].events & EPOLLOUT ? registered(epfd, ev[i].data.u64, full_lt, &reg) : -1;
		/* With the peer's end (EPOLLERR, EPOLLHUP) EPOLLOUT stays, as
		 * TCP's: the write then says so. */
		struct lf_shm_conn *c = fd >= 0 && !(ev[i].events & (EPOLLERR | EPOLLHUP)) ? lf__shm_use(fd) : NULL;
		bool trim = c && atomic_load(&c->tx.h->trim);
		if (c && !(reg.events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE)) && (trim || space_now(c) == 0) &&
		    park(epfd, fd)) {
			ev[i].events &= ~(uint32_t)(EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND);
			lf__shm_parked_trim |= trim;
		}
		if (c)
			lf__shm_done(fd);
		if (ev[i].events)
			ev[k++] = ev[i];
	}
	return k;
}

/* epoll, which the kernel answers alone, reports a client's socket
 * readable when the server's answer comes (the first byte the server
 * sends, before any of its data): a read then takes the answer and finds
 * nothing, where TCP reports nothing (wrk counted each such EAGAIN as an
 * error and reconnected, and each new connection did it again; a program
 * that reads a blocking socket after epoll's word would wait). So while a
 * client of the process waits for its answer, the EPOLLIN of each event
 * of a tier socket registered on epfd is checked as poll's is (poll_fix:
 * the answer taken, POLLIN only where a read would not wait), and taken
 * out where it says nothing to read; an event left with nothing goes. An
 * event is known by the registration's data (as bell.c's are): one whose
 * data two tier sockets share is left as the kernel gave it. Then
 * EPOLLOUT as room_fix says (above). Returns the events left. */
int lf__shm_epoll_fix(int epfd, struct epoll_event *ev, int n)
{
	int k = 0;

	if (!atomic_load_explicit(&lf__shm_undecided, memory_order_relaxed))
		return atomic_load_explicit(&lf__shm_full, memory_order_relaxed) ? room_fix(epfd, ev, n) : n;
	for (int i = 0; i < n; i++) {
		struct epoll_event reg;
		int fd = ev[i].events & (EPOLLIN | EPOLLRDNORM) ? registered(epfd, ev[i].data.u64, any_tier, &reg) : -1;
		if (fd >= 0) {
			bool full = false;
			int rev = lf__sys_poll1(fd, POLLIN, 0);
			struct pollfd p = { fd, POLLIN, (short)(rev > 0 ? rev : 0) };
			poll_fix(&p, &full, false);
			if (!(p.revents & (POLLIN | POLLRDNORM)))
				ev[i].events &= ~(uint32_t)(EPOLLIN | EPOLLRDNORM);
			if (!ev[i].events)
				continue;
		}
		ev[k++] = ev[i];
	}
	return atomic_load_explicit(&lf__shm_full, memory_order_relaxed) ? room_fix(epfd, ev, k) : k;
}

/* An epoll wait that spins (wait.c, epoll_spin) on a set holding tier
 * sockets looks at their rings too (docs/shm.md, "Spinning"): the kernel
 * sees a ring's bytes only through the writer's token, and a writer whose
 * reader polls owes none (lf__shm_spin_handed_off), so without the look
 * the wait would see nothing and the writer would ring every time. The
 * sockets registered on epfd level-triggered for EPOLLIN (not edge-
 * triggered, one-shot or exclusive: their edges come from the tokens), as
 * interpose.c recorded them, up to LF_WATCH_MAX, each held (watchers)
 * while the wait looks. Only registrations for nothing but EPOLLIN (and
 * EPOLLRDNORM; EPOLLHUP and EPOLLERR, which the kernel gives to all; and
 * EPOLLPRI, below): a ring's bytes say nothing of EPOLLOUT or EPOLLRDHUP,
 * which the kernel gives with EPOLLIN in the same event. EPOLLPRI is the
 * urgent byte's signal on the socket, which its writer sends only after
 * it has stored a mark in the page (urg, never 0 again): while urg is 0
 * there is none, and the ring's answer is the kernel's (sockperf
 * registers EPOLLIN|EPOLLPRI). Only on the set that the record was made on
 * (epset: another set may have its number since). */
#define WATCHED_EVENTS (EPOLLIN | EPOLLRDNORM | EPOLLPRI | EPOLLHUP | EPOLLERR | EPOLLWAKEUP)

/* Moves whenever a socket may have become one that a wait watches: a
 * tier socket attached (shm.c), its state ON, an epoll_ctl recorded
 * (interpose.c). The descriptors that a thread's last look through the
 * whole table found for a set stand until it moves: that look costs a
 * look at every descriptor up to lf__shm_fd_hi, at each epoll_wait that
 * spins (31 us a wait with 3,000 connections in the process, 0.12 us
 * with one, measured; a set holding one of them found it last). Each is
 * looked at again as a whole at every wait: one that no longer fits is
 * left out; one that fits again has moved this count on its way. */
atomic_uint lf__shm_watchable;
static __thread struct scanned {
	int epfd, n;
	unsigned set, gen;
	int fd[LF_WATCH_MAX];
} scanned = { .epfd = -1 };

/* w[n] and on: fd x's registrations on epfd (its set s) that a wait
 * watches. Returns the new n. */
static int watch_fd(int epfd, unsigned s, int x, struct lf_shm_watch *w, int n)
{
	struct lf_fd *f = lf__fd_peek(x);
	struct lf_shm_conn *c = f ? __atomic_load_n(&f->shm, __ATOMIC_SEQ_CST) : NULL;

	if (!c || atomic_load(&c->state) != ON || atomic_load(&c->edges))
		return n;
	unsigned g = __atomic_load_n(&f->epgen, __ATOMIC_ACQUIRE), n0 = n;
	for (int r = 0; r < LF_EPOLL_MAX && !(g & 1) && n < LF_WATCH_MAX; r++) {
		struct lf_epreg e = f->ep[r];
		if (e.epfd1 == epfd + 1 && e.set == s && (e.ev.events & (EPOLLIN | EPOLLRDNORM)) &&
		    !(e.ev.events & ~(uint32_t)WATCHED_EVENTS))
			w[n++] = (struct lf_shm_watch){ c, x, g, e.ev.events & (EPOLLIN | EPOLLRDNORM),
							e.ev.events & EPOLLPRI, e.ev.data.u64 };
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&f->epgen, __ATOMIC_RELAXED) != g ? (int)n0 : n; /* changed while read: not this time */
}

int lf__shm_watch(int epfd, struct lf_shm_watch *w)
{
	int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED), n = 0;
	struct lf_fd *set = lf__fd_peek(epfd);
	unsigned s = set ? set->epset : 0, gen = atomic_load(&lf__shm_watchable);

	atomic_fetch_add(&watchers, 1);
	if (scanned.epfd == epfd && scanned.set == s && scanned.gen == gen) {
		for (int i = 0; i < scanned.n; i++)
			n = watch_fd(epfd, s, scanned.fd[i], w, n);
	} else {
		struct scanned now = { .epfd = epfd, .set = s, .gen = gen };
		for (int x = 0; s && x <= hi && n < LF_WATCH_MAX; x++) {
			int n0 = n;
			if ((n = watch_fd(epfd, s, x, w, n)) > n0)
				now.fd[now.n++] = x;
		}
		scanned = now;
	}
	if (!n)
		lf__shm_unwatch(w, 0, false);
	return n;
}

/* The events of the watched sockets whose rings hold bytes, as the
 * kernel would give them, added to the k events in ev that the kernel
 * gave (one with the registration's data takes its EPOLLIN): only while
 * the socket is still the one that was registered (not closed, its
 * registration not changed since), and while neither end has begun to
 * close or shut a side (fin, LF_F_SHUT_RD, LF_F_SHUT_WR: the kernel's
 * event then says more than EPOLLIN, EPOLLHUP or EPOLLERR with the reset;
 * it has the token of those bytes); and each reader says it polls
 * (awake), so its writer hands off. In turn, as the kernel's ready list
 * goes round (a level-triggered event that it gave goes to the back):
 * with fewer events asked for than rings with bytes, the first socket
 * was given every time while it kept bytes, the others never (1000 of
 * 1000 waits with maxevents 1; TCP 500 and 500). */
static bool watched_ready(const struct lf_shm_watch *w, uint64_t now)
{
	struct lf_shm_conn *c = w->c;

	if (atomic_load_explicit(&c->state, memory_order_relaxed) != ON)
		return false;
	lf__shm_spin_wake(c, now);
	if (lf__shm_avail(c) <= 0 || atomic_load_explicit(&c->rx.h->fin, memory_order_relaxed) ||
	    (w->pri && atomic_load_explicit(&c->rx.h->urg, memory_order_acquire)))
		return false;
	struct lf_fd *f = lf__fd_peek(w->fd);
	return __atomic_load_n(&f->shm, __ATOMIC_SEQ_CST) == c && __atomic_load_n(&f->epgen, __ATOMIC_ACQUIRE) == w->gen &&
	       !(atomic_load_explicit(&f->flags, memory_order_relaxed) & (LF_F_SHUT_RD | LF_F_SHUT_WR));
}

int lf__shm_watch_ready(const struct lf_shm_watch *w, int n, struct epoll_event *ev, int k, int max)
{
	static __thread int turn;
	uint64_t now = lf__sys_now_ns();

	for (int j = 0, i = turn < n ? turn : 0; j < n; j++, i = i + 1 < n ? i + 1 : 0) {
		if (!watched_ready(&w[i], now))
			continue;
		int e = 0;
		while (e < k && ev[e].data.u64 != w[i].data)
			e++;
		if (e < k) {
			ev[e].events |= w[i].events;
		} else if (k < max) {
			ev[k++] = (struct epoll_event){ .events = w[i].events, .data.u64 = w[i].data };
			turn = i + 1; /* to the back */
		}
	}
	return k;
}

/* A poll or ppoll that spins (wait.c, poll_common) looks at the rings the
 * same way: the entries of fds that are tier sockets polled for POLLIN
 * (and POLLRDNORM) alone, up to LF_WATCH_MAX, each held as an epoll
 * wait's (data: the entry's index). Not those polled for more: the
 * ring's bytes say nothing of POLLOUT or POLLRDHUP, which the kernel
 * would give with POLLIN in the same answer; nor POLLPRI, which epoll's
 * watch takes (EPOLLPRI): MariaDB's server polls POLLIN|POLLPRI, and
 * with those polls watched sysbench's point selects fell from 34,571-
 * 39,139 a second to 21,494-22,378 (its writer waiting out hand-offs:
 * docs/shm.md). */
int lf__shm_watch_poll(const struct pollfd *fds, unsigned long n, struct lf_shm_watch *w)
{
	int k = 0;

	atomic_fetch_add(&watchers, 1);
	for (unsigned long i = 0; i < n && k < LF_WATCH_MAX; i++) {
		struct lf_fd *f = fds[i].fd >= 0 ? lf__fd_peek(fds[i].fd) : NULL;
		struct lf_shm_conn *c = f ? __atomic_load_n(&f->shm, __ATOMIC_SEQ_CST) : NULL;
		short in = fds[i].events & (POLLIN | POLLRDNORM);
		if (c && in && !(fds[i].events & ~(POLLIN | POLLRDNORM)) && atomic_load(&c->state) == ON &&
		    !atomic_load(&c->edges))
			w[k++] = (struct lf_shm_watch){ c, fds[i].fd, __atomic_load_n(&f->epgen, __ATOMIC_ACQUIRE),
							(uint32_t)in, false, i };
	}
	if (!k)
		lf__shm_unwatch(w, 0, false);
	return k;
}

/* The POLLIN of the watched entries whose rings hold bytes, added to the
 * answer in fds (as lf__shm_watch_ready's); returns how many entries now
 * have events, of the k that had. */
int lf__shm_watch_ready_poll(const struct lf_shm_watch *w, int n, struct pollfd *fds, int k)
{
	uint64_t now = lf__sys_now_ns();

	for (int i = 0; i < n; i++) {
		if (!watched_ready(&w[i], now))
			continue;
		k += fds[w[i].data].revents == 0;
		fds[w[i].data].revents |= (short)w[i].events;
	}
	return k;
}

/* The wait is done with them; sleeping: it goes on in the kernel, so the
 * writers ring (awake 0) rather than wait for a hand-off. */
void lf__shm_unwatch(const struct lf_shm_watch *w, int n, bool sleeping)
{
	for (int i = 0; sleeping && i < n; i++)
		lf__shm_spin_sleep(w[i].c);
	atomic_fetch_sub(&watchers, 1);
	limbo_drain();
}

long lf__shm_room(int fd)
{
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (!c)
		return -1;
	lf__shm_decide(c, fd);
	long r = atomic_load(&c->state) == ON && !atomic_load(&c->tx_left) ? space_now(c) : -1;
	lf__shm_done(fd);
	return r;
}

/* A descriptor passed with SCM_RIGHTS arrives without the connection's
 * state (its rings, its place in the stream), and the peer goes on
 * writing to the ring: the receiver would read tokens as data. So a
 * message that carries a socket on the tier (or still waiting for the
 * server's answer) goes through shm_pass.c, which sends the rings along
 * or refuses it (docs/shm.md, "Passing the socket"); sendmmsg asks here
 * which messages do. */
bool lf__shm_in_rights(const struct msghdr *m)
{
	for (struct cmsghdr *h = CMSG_FIRSTHDR(m); h; h = CMSG_NXTHDR((struct msghdr *)m, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS || h->cmsg_len < CMSG_LEN(0))
			continue;
		for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int x;
			memcpy(&x, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
			struct lf_shm_conn *c = lf__shm_use(x);
			if (!c)
				continue;
			lf__shm_decide(c, x);
			int st = atomic_load(&c->state);
			lf__shm_done(x);
			if (st == ON || st == UNDECIDED)
				return true;
		}
	}
	return false;
}

/* ---- opting in */

int lf__shm_set_tier(int fd, int tier)
{
	struct lf_fd *f = lf__fd(fd);

	if (!f)
		return -EBADF;
	if (tier != LF_TIER_UDS && tier != LF_TIER_SHM)
		return -EINVAL;
	if (atomic_load(&f->flags) & LF_F_FAST)
		return -EISCONN; /* a connection's path is chosen once */
	if (tier == LF_TIER_SHM) {
		atomic_fetch_or(&f->flags, LF_F_TIER);
		lf__shm_used = true;
		lf__signals_wrap();
	} else {
		atomic_fetch_and(&f->flags, ~LF_F_TIER);
	}
	return 0;
}

/* The client's answer (the first byte its socket gets) decides: wait for
 * it (EAGAIN when non-blocking; EINTR for a signal), so that the answer
 * is the connection's for life (RIO asks before it takes a socket). */
static int tier_held(struct lf_shm_conn *c, struct lf_fd *f, int fd)
{
	for (lf__shm_decide(c, fd); atomic_load(&c->state) == UNDECIDED; lf__shm_decide(c, fd))
		if (atomic_load(&f->flags) & LF_F_NONBLOCK)
			return -EAGAIN;
		else if (lf__sys_poll1(fd, POLLIN, -1) < 0)
			return -errno;
	return atomic_load(&c->state) == ON ? LF_TIER_SHM : LF_TIER_UDS;
}

int lf__shm_get_tier(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	struct lf_shm_conn *c = lf__shm_use(fd);

	if (c) {
		int r = tier_held(c, f, fd);
		lf__shm_done(fd);
		return r;
	}
	return f && (atomic_load(&f->flags) & LF_F_TIER) && !(atomic_load(&f->flags) & LF_F_FAST) ? LF_TIER_SHM
												    : LF_TIER_UDS;
}
