/* The shared-memory tier across exec (docs/shm.md, "exec: the rings are
 * re-adopted"). A tier connection whose socket stays open across an exec
 * keeps its rings:
 *
 * - Before the exec (the preload's exec wrappers, src/preload/exec.c):
 *   lf__shm_exec_prepare finds the tier sockets that are not
 *   close-on-exec, clears close-on-exec on their memfds (each kept open,
 *   hidden and close-on-exec, for the connection's life: shm.c,
 *   lf__shm_keep_memfd) and writes LOOPFAST_SHM_EXEC for the new
 *   environment: the pid, then for each such socket its number and inode,
 *   its memfd's number and inode, its end, and the few words of its state
 *   that live in the process rather than the page (the server's count of
 *   stream bytes read before the ring, tokens owed or unsent, an ET
 *   request, whether another process may hold the end (lf__shm_alone)).
 * - In the new image (lf__shm_exec_adopt, at the preload's start-up): the
 *   variable leaves the environment, and each socket whose record checks
 *   out is on the tier again: the same pid (exec keeps it; a child that
 *   inherited a stale variable has another), the socket's and the
 *   memfd's inodes as recorded, the memfd a sealed loopfast ring of the
 *   right size (lf__shm_map). The positions are the page's: each end
 *   re-reads its own from there before each ring operation, so no byte
 *   is lost, doubled or reordered. The memfds are close-on-exec again.
 *
 * Trust: the variable is written by this process's previous image and read
 * by its next; nothing the peer can write (the page is the peer's too)
 * decides which memfd goes with which socket, or which end is ours. A
 * memfd loses close-on-exec only while a socket of its connection stays
 * open across the exec, so it reaches only a program that gets the socket.
 * A tier socket whose record does not check out is shut down both ways:
 * its program reads the end, never a token as data.
 *
 * A program that cannot load this library (static, set-id: the wrappers
 * look at the file) gets its tier sockets shut down before the exec
 * instead (lf__shm_exec_shut). Not covered (docs/shm.md): posix_spawn and
 * the exec inside system() and popen (glibc's own, past the wrappers), raw
 * execve system calls, more than LF_SHM_EXEC_FDS tier sockets carried by
 * one exec. */
#include "internal.h"
#include "shm_conn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define VAR "LOOPFAST_SHM_EXEC"
#define ENTRY_MAX 176 /* ":fd,ino,mfd,ino,k,count,flags,owed,box,ino,box,ino" at its longest, and slack */

size_t lf__shm_exec_room(void)
{
	return atomic_load(&lf__shm_live) ? sizeof(VAR) + 16 + LF_SHM_EXEC_FDS * ENTRY_MAX : 0;
}

bool lf__shm_exec_rec(int fd, struct lf_shm_conn *c, struct lf_shm_rec *r)
{
	int st = atomic_load(&c->state);
	char kind = st == UNDECIDED ? 'u' : st != ON ? 0 : c->server ? 's' : 'c';
	struct stat s;

	if (!kind || fstat(fd, &s))
		return false;
	*r = (struct lf_shm_rec){ .fd = fd, .ino = (unsigned long)s.st_ino, .mfd = -1, .kind = kind,
				  .count = kind == 'u' ? *lf__shm_stream_out(c) : c->stream_in, .owed = c->owed,
				  .box = { -1, -1 } };
	int mfd = kind == 'u' ? c->bfd : c->mfd;
	unsigned long mino = kind == 'u' ? c->bfd_ino : c->mfd_ino;
	if (lf__shm_ours(mfd, mino)) {
		r->mfd = mfd;
		r->mino = mino;
	}
	for (int i = 0; kind == 'u' && r->mfd >= 0 && i < 2; i++) { /* the board's pair */
		if (!lf__shm_ours(c->box[i], c->box_ino[i])) {
			r->mfd = -1; /* a close_range took it: no board */
			break;
		}
		r->box[i] = c->box[i];
		r->boxino[i] = c->box_ino[i];
	}
	if (r->mfd < 0)
		r->box[0] = r->box[1] = -1;
	r->flags = (c->stream_done ? LF_SHM_REC_DONE : 0) | (atomic_load(&c->unsent) ? LF_SHM_REC_UNSENT : 0) |
		   (atomic_load(&c->edges) ? LF_SHM_REC_EDGES : 0) |
		   (lf__shm_alone(c) ? 0 : LF_SHM_REC_FORKED) |
		   (atomic_load(&c->tx_left) ? LF_SHM_REC_TX_LEFT : 0);
	return true;
}

/* A vfork child that closed the hidden memfd (Python's subprocess closes
 * all but pass_fds): the parent, whose table this is, holds it still;
 * opened again through its /proc entry (the same uid: a read-mode ptrace
 * check), checked by inode. Listed in undo as ~mfd: closed again after
 * an exec that failed (each of a PATH search's tries opens its own). */
static int reopen(const struct lf_shm_conn *c, int *undo, size_t *nu)
{
	char p[48];

	snprintf(p, sizeof(p), "/proc/%d/fd/%d", (int)getppid(), c->mfd);
	int mfd = c->mfd >= 0 ? open(p, O_RDWR) : -1;
	if (mfd >= 0 && !lf__shm_ours(mfd, c->mfd_ino)) {
		lf__sys_close(mfd);
		mfd = -1;
	}
	if (mfd >= 0)
		undo[(*nu)++] = ~mfd;
	return mfd;
}

/* The record of one tier socket fd that stays open, appended at buf + *n;
 * its memfd made inheritable (and listed in undo) if it was not yet. */
static void record(int fd, struct lf_shm_conn *c, char *buf, size_t room, size_t *n, int *undo, size_t *nu,
		   bool vforked)
{
	struct lf_shm_rec r;

	if (c->board && !vforked)
		lf__shm_decide(c, fd); /* another process may have taken the answer: the rings go with the exec */
	if (room - *n < ENTRY_MAX || *nu + 3 > LF_SHM_EXEC_FDS || !lf__shm_exec_rec(fd, c, &r))
		return;
	if (vforked && r.kind == 'u') {
		r.flags |= LF_SHM_REC_FORKED; /* the parent holds it too, and cannot be counted (no page yet) */
		r.mfd = r.box[0] = r.box[1] = -1; /* nor can its board be given: the numbers are the parent's */
	} else if (vforked && r.mfd < 0) {
		if ((r.mfd = reopen(c, undo, nu)) >= 0)
			r.mino = c->mfd_ino;
	} else if (r.mfd >= 0) {
		int keep[3] = { r.mfd, r.box[0], r.box[1] };
		for (int i = 0; i < 3 && keep[i] >= 0; i++) {
			int fl = lf__sys_fcntl(keep[i], F_GETFD, 0);
			if (fl >= 0 && (fl & FD_CLOEXEC) && !lf__sys_fcntl(keep[i], F_SETFD, fl & ~FD_CLOEXEC))
				undo[(*nu)++] = keep[i];
		}
	}
	/* The new image is among the end's holders as this one is (an exec
	 * of this process: the same holder), or as lf__shm_exec_counted
	 * counts it (a vfork child's): its exit lets go (shm.c, shm_exit). */
	if (r.kind != 'u' && atomic_load(&c->state) == ON &&
	    (vforked || atomic_load(&c->forks_seen) == atomic_load(&lf__shm_forks)))
		r.flags |= LF_SHM_REC_COUNTED;
	*n += (size_t)snprintf(buf + *n, room - *n, ":%d,%lu,%d,%lu,%c,%llu,%u,%u,%d,%lu,%d,%lu", fd, r.ino, r.mfd,
			       r.mino, r.kind, r.count, r.flags, r.owed, r.box[0], r.boxino[0], r.box[1], r.boxino[1]);
}

/* The connection of the socket fd names. The table is kept in step with
 * the kernel's descriptors, but not by a vfork child, whose closes and
 * dups go to the kernel alone (its table is the parent's: interpose.c):
 * there fd's entry counts only if its socket is fd's, else the entry
 * whose socket is (a socket dup2'd to stdin: Python's subprocess). */
static struct lf_shm_conn *conn_for(int fd, bool vforked)
{
	struct lf_shm_conn *c = lf__shm_conn_of(fd);
	int hi = __atomic_load_n(&lf__shm_fd_hi, __ATOMIC_RELAXED);
	struct stat st;

	if (!vforked)
		return c;
	if (fstat(fd, &st) || !S_ISSOCK(st.st_mode))
		return NULL;
	if (c && c->kept_ino == (unsigned long)st.st_ino)
		return c;
	for (int x = 0; x <= hi; x++)
		if ((c = lf__shm_conn_of(x)) && c->kept_ino == (unsigned long)st.st_ino)
			return c;
	return NULL;
}

void lf__shm_exec_counted(const char *rec, bool more)
{
	if (!lf__sys_vfork_child())
		return; /* an exec of this process: the same holder */
	for (const char *p = strchr(rec, ':'); p; p = strchr(p + 1, ':')) {
		struct lf_shm_conn *c = conn_for(atoi(p + 1), true);
		if (c && atomic_load(&c->state) == ON)
			lf__shm_holder(c, more); /* a dup recorded too: counted twice, never too few */
		else if (c) /* no page to count in: the parent is never alone again */
			atomic_store(&c->forks_seen, LF_SHM_UNCOUNTED);
	}
}

/* Reads the process's state and writes only buf and undo (a vfork child
 * calls it): no allocation, no lock. */
void lf__shm_exec_prepare(char *buf, size_t room, int *undo, size_t *nu)
{
	char d[4096] __attribute__((aligned(8)));
	size_t n;
	long k;

	*nu = 0;
	if (room)
		buf[0] = 0;
	if (room < lf__shm_exec_room() || !room)
		return;
	int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return;
	n = (size_t)snprintf(buf, room, VAR "=%d", (int)getpid());
	size_t empty = n;
	bool vforked = lf__sys_vfork_child();
	while ((k = lf__sys_getdents64(dir, d, sizeof(d))) > 0) {
		for (long at = 0; at < k;) {
			struct dirent64 *e = (struct dirent64 *)(void *)(d + at);
			at += e->d_reclen;
			int fd = atoi(e->d_name);
			struct lf_shm_conn *c;
			if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dir || !(c = conn_for(fd, vforked)))
				continue;
			int fl = lf__sys_fcntl(fd, F_GETFD, 0);
			if (fl < 0 || (fl & FD_CLOEXEC))
				continue;
			/* stdio's (a vfork child's dup2, which acts on its parent's
			 * table, or a dup the interposer did not see): the program
			 * would read and write it past its interposer; off the tier
			 * if it can be (shm.h, LF_SHM_STDIO_MAX) */
			if (fd <= LF_SHM_STDIO_MAX && (atomic_load(&c->state) == OFF || lf__shm_leave(c, fd)))
				continue;
			record(fd, c, buf, room, &n, undo, nu, vforked);
		}
	}
	lf__sys_close(dir);
	if (n == empty)
		buf[0] = 0;
}

/* The exec goes to a program that will not load this library: each
 * recorded socket leaves the tier first if it can (shm_leave.c: the
 * program then reads and writes the Unix stream, as over TCP), else it is
 * shut down both ways, then what its receive queue holds is dropped
 * (tokens, edge bytes, the server's answer with its memfd, stream bytes
 * before the switch: after the shutdown nothing more can come), so that
 * the program reads the end at once, never a token as data; its writing
 * direction's fin moves, as at a close, so that the peer's next write
 * looks at the socket and fails as after a close (a write into the ring
 * makes no system call otherwise). A vfork child calls it: a leave there
 * is the parent's too (the same socket, off the tier for both), and
 * allocates nothing. */
void lf__shm_exec_shut(const char *rec)
{
	int e = errno;
	char b[4096];
	bool vforked = lf__sys_vfork_child();

	for (const char *p = strchr(rec, ':'); p; p = strchr(p + 1, ':')) {
		int fd = atoi(p + 1);
		struct lf_shm_conn *c = conn_for(fd, vforked);
		if (c && (atomic_load(&c->state) == OFF || lf__shm_leave(c, fd)))
			continue; /* on the Unix stream: the program's as it is (a dup recorded too: left already) */
		lf__sys_shutdown(fd, SHUT_RDWR);
		while (lf__sys_recvfrom(fd, b, sizeof(b), MSG_DONTWAIT, NULL, NULL) > 0)
			;
		if (c && atomic_load(&c->state) == ON) { /* the peer's next write looks, and finds the end (EPIPE) */
			atomic_fetch_or(&c->tx.h->fin, 1);
			atomic_fetch_add(&c->tx.h->fin, 2);
		}
	}
	errno = e;
}

void lf__shm_exec_undo(const int *undo, size_t nu, const char *counted)
{
	int e = errno;

	for (size_t i = 0; i < nu; i++)
		if (undo[i] >= 0)
			lf__sys_fcntl(undo[i], F_SETFD, FD_CLOEXEC);
		else
			lf__sys_close(~undo[i]); /* opened again for the exec (reopen) */
	if (counted)
		lf__shm_exec_counted(counted, false);
	errno = e;
}

/* A board a 'u' record carried and nothing took: its descriptors, the
 * exec made them inheritable, closed (each only if it is the recorded one). */
static void drop_board(const struct lf_shm_rec *r)
{
	int fds[3] = { r->mfd, r->box[0], r->box[1] };
	unsigned long inos[3] = { r->mino, r->boxino[0], r->boxino[1] };

	for (int i = 0; i < 3; i++)
		if (lf__shm_ours(fds[i], inos[i]))
			lf__sys_close(fds[i]);
}

/* A memfd named as loopfast names its rings, with the recorded inode. */
static bool our_memfd(int mfd, unsigned long ino)
{
	char p[48], name[64];

	snprintf(p, sizeof(p), "/proc/self/fd/%d", mfd);
	ssize_t l = mfd >= 0 ? readlink(p, name, sizeof(name) - 1) : -1;
	if (l < 0 || !lf__shm_ours(mfd, ino))
		return false;
	name[l] = 0;
	return !strncmp(name, "/memfd:loopfast-shm", 19);
}

bool lf__shm_exec_adopt_one(const struct lf_shm_rec *r, struct lf_shm_seen *seen, size_t *nseen)
{
	struct stat st;
	int family, fd = r->fd, mfd = r->mfd;
	struct lf_shm_conn *c = NULL;
	bool mine = r->kind != 'u' && our_memfd(mfd, r->mino), took = mine;
	bool board = r->kind != 'u' || mfd < 0; /* no board to take, or taken (below) */

	for (size_t i = 0; i < *nseen; i++) {
		if (seen[i].ino == r->ino)
			c = seen[i].c;
		if (seen[i].c->mfd_ino == r->mino)
			mine = took = false; /* held by that connection already */
		if (seen[i].c->bfd >= 0 && seen[i].c->bfd_ino == r->mino)
			board = true; /* a dup's record: its board is that connection's */
	}
	if (mine)
		lf__sys_fcntl(mfd, F_SETFD, FD_CLOEXEC);
	if (fstat(fd, &st) || !S_ISSOCK(st.st_mode) || (unsigned long)st.st_ino != r->ino) {
		if (mine) /* the socket is not there: neither is its connection */
			lf__sys_close(mfd);
		if (!board)
			drop_board(r);
		return took;
	}
	if (!lf__fast_family(fd, &family)) {
		c = NULL;
	} else if (c) { /* a dup of a socket adopted already */
		atomic_fetch_add(&c->refs, 1);
	} else if ((c = lf__shm_conn_new(r->kind == 's'))) {
		uint32_t area = 0;
		if (r->kind == 'u') {
			c->stream_out = r->count;
			if (!board)
				board = lf__shm_board_adopt(c, r->mfd, r->mino, r->box, r->boxino);
		} else if (mine && (r->kind == 's' || r->kind == 'c') && (c->map = lf__shm_map(mfd, &area))) {
			lf__ring_views(c->map, area, r->kind == 's', &c->rx, &c->tx);
			lf__shm_set_state(c, ON);
			c->stream_in = r->count;
			c->stream_done = r->flags & LF_SHM_REC_DONE;
			c->owed = r->owed;
			atomic_store(&c->unsent, (r->flags & LF_SHM_REC_UNSENT) != 0);
			atomic_store(&c->edges, (r->flags & LF_SHM_REC_EDGES) != 0);
			atomic_store(&c->tx_left, (r->flags & LF_SHM_REC_TX_LEFT) != 0);
			lf__shm_keep_memfd(c, mfd);
			mine = false;
		} else {
			lf__shm_put(c);
			c = NULL;
		}
		if (c && *nseen < LF_SHM_EXEC_FDS)
			seen[(*nseen)++] = (struct lf_shm_seen){ r->ino, c };
	}
	if (mine)
		lf__sys_close(mfd);
	if (!board)
		drop_board(r);
	if (!c) {
		if (lf__debug_on)
			lf__debug("fd %d: its shm rings could not be adopted: shut down", fd);
		lf__sys_shutdown(fd, SHUT_RDWR);
		return took;
	}
	if ((r->flags & (LF_SHM_REC_FORKED | LF_SHM_REC_COUNTED)) == LF_SHM_REC_FORKED && !c->board) /* the previous image was not alone, and not counted: nor is this one */
		atomic_store(&c->forks_seen, LF_SHM_UNCOUNTED); /* (with the board, it was counted there, and is still) */
	struct lf_fd *f = lf__fd(fd);
	int fl = lf__sys_fcntl(fd, F_GETFL, 0);
	if (f && fl >= 0 && (fl & O_NONBLOCK))
		atomic_fetch_or(&f->flags, LF_F_NONBLOCK);
	if (f)
		atomic_fetch_or(&f->flags, lf__fd_timeouts(fd));
	lf__shm_attach(fd, c);
	lf__signals_wrap(); /* the tier's own waits end as the application's call would (as lf_set_tier) */
	return took;
}

void lf__shm_exec_adopt(void)
{
	const char *v = getenv(VAR);
	struct lf_shm_seen seen[LF_SHM_EXEC_FDS];
	size_t nseen = 0;

	if (!v)
		return;
	size_t len = strlen(v);
	char buf[len + 1];
	memcpy(buf, v, len + 1);
	unsetenv(VAR);
	char *p = buf, *end;
	long pid = strtol(p, &end, 10);
	if (end == p || pid != (long)getpid())
		return;
	for (p = end; *p == ':'; p = end) {
		struct lf_shm_rec r;
		int used = 0;
		if (sscanf(p, ":%d,%lu,%d,%lu,%c,%llu,%u,%u,%d,%lu,%d,%lu%n", &r.fd, &r.ino, &r.mfd, &r.mino, &r.kind,
			   &r.count, &r.flags, &r.owed, &r.box[0], &r.boxino[0], &r.box[1], &r.boxino[1], &used) != 12 ||
		    !used)
			return;
		end = p + used;
		lf__shm_exec_adopt_one(&r, seen, &nseen);
	}
}
