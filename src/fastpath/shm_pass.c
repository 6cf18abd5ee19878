/* Passing a tier socket with SCM_RIGHTS (docs/shm.md, "Passing the
 * socket"): the rings travel with the socket, through the exec's record
 * and adoption (shm_exec.c).
 *
 * - The sender (sendmsg on a socket that is not a fast-path one: the Unix
 *   socket that passes descriptors) puts before the message's descriptors
 *   a record memfd (sealed, named LF_PASS_NAME: src/protocol/pass.h), then
 *   each passed connection's memfd; the record says, by position, which
 *   socket each memfd goes with and the end's state that
 *   lives in the process. Only when the receiving process maps loopfast
 *   (the kernel's SO_PEERCRED, then its /proc/PID/maps): a receiver
 *   without it would get stray descriptors, and a socket whose reads give
 *   tokens as data. Otherwise each connection leaves the tier first
 *   (shm_leave.c). A client still waiting for the server's answer waits
 *   for it first, up to LF_SHM_ANSWER_NS (not in a non-blocking send),
 *   then EOPNOTSUPP and nothing sent.
 * - The receiver (recvmsg and recvmmsg with a control buffer on a socket
 *   that is not a fast-path one) receives into a control buffer wide
 *   enough for the extra descriptors, adopts each named socket whose
 *   record checks out (shm_exec.c: the socket's inode, the memfd's name,
 *   inode and seals), closes the extra descriptors, and gives the
 *   application what the kernel would have given it for its own
 *   descriptors alone: its buffer's room, MSG_CTRUNC and the descriptors
 *   that do not fit closed.
 *
 * Both processes then hold the end, as after a fork: the sender counts
 * the receiver among its holders before the message goes (docs/shm.md,
 * "Who holds an end"). */
#include "internal.h"
#include "pass.h"
#include "shm_conn.h"
#include "syscalls.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEALS (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* The control bytes the extra descriptors take at most. */
#define ROOM CMSG_SPACE((LF_PASS_RECS + 1) * sizeof(int))

/* ---- the sender */

/* Whether the process at the other end of the Unix socket unx, as the
 * kernel attests it (SO_PEERCRED: for a socketpair its creator, whose
 * forked children inherit the preload), maps this library. No: no peer
 * (a datagram with a destination), /proc says nothing (another uid), or
 * no loopfast mapped. */
static bool peer_runs_loopfast(int unx, const struct msghdr *m)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);
	int dom = 0;
	socklen_t dl = sizeof(dom);
	char p[48], buf[4096 + 64];
	size_t keep = 0;
	bool yes = false;

	if (m->msg_name || lf__sys_getsockopt(unx, SOL_SOCKET, SO_DOMAIN, &dom, &dl) || dom != AF_UNIX ||
	    lf__sys_getsockopt(unx, SOL_SOCKET, SO_PEERCRED, &cr, &l) || cr.pid <= 0)
		return false;
	if (cr.pid == getpid())
		return true;
	snprintf(p, sizeof(p), "/proc/%d/maps", (int)cr.pid);
	int f = open(p, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return false;
	for (ssize_t k; !yes && (k = lf__sys_read(f, buf + keep, 4096)) > 0;) {
		size_t n = keep + (size_t)k;
		yes = memmem(buf, n, "/libloopfast.so", 15) || memmem(buf, n, "/libloopfast-preload.so", 23);
		keep = n < 64 ? n : 64; /* a name across two reads */
		memmove(buf, buf + n - keep, keep);
	}
	lf__sys_close(f);
	return yes;
}

/* The record memfd for recs, sealed; -1 with errno: none could be made. */
static int record_memfd(const struct lf_pass_hdr *h, const struct lf_pass_rec *recs)
{
	int f = memfd_create(LF_PASS_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (f < 0)
		return -1; /* memfd_create's errno (EMFILE at the descriptor limit) */
	size_t len = LF_PASS_SIZE(h->n);
	if (lf__sys_write(f, h, sizeof(*h)) != (ssize_t)sizeof(*h) ||
	    lf__sys_write(f, recs, len - sizeof(*h)) != (ssize_t)(len - sizeof(*h)) ||
	    lf__sys_fcntl(f, F_ADD_SEALS, SEALS)) {
		int e = errno;
		lf__sys_close(f);
		errno = e;
		return -1;
	}
	return f;
}

/* One holder more or fewer for each connection of a message (once each:
 * a socket passed twice is one end). */
static void holders(struct lf_shm_conn **conns, uint32_t n, bool more)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = 0;
		while (j < i && conns[j] != conns[i])
			j++;
		if (j == i)
			lf__shm_holder(conns[i], more);
	}
}

ssize_t lf__shm_pass_sendmsg(int fd, const struct msghdr *m, int flags)
{
	struct lf_pass_rec recs[LF_PASS_RECS];
	struct lf_shm_conn *conns[LF_PASS_RECS];
	int socks[LF_PASS_RECS];
	int mfds[LF_PASS_RECS + 1];
	struct lf_pass_hdr h = { .magic = LF_PASS_MAGIC };
	uint32_t nm = 0;
	bool refuse = false;
	uint64_t end = 0; /* of the wait for answers (one bound for the message) */
	int held[LF_PASS_FDS]; /* descriptors whose connections this send uses (lf__shm_use) */
	size_t nh = 0;
	ssize_t ret = -1;
	int e = ENOMEM;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++, h.napp++) {
			int x;
			memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			struct lf_shm_conn *sc = nh < LF_PASS_FDS ? lf__shm_use(x) : NULL;
			struct lf_shm_rec r;
			if (!sc) {
				refuse = refuse || (nh == LF_PASS_FDS && lf__shm_conn_of(x));
				continue;
			}
			held[nh++] = x; /* another thread's close of x cannot free it (or its memfd) under the send */
			lf__shm_decide(sc, x);
			/* A client just connected: its answer is coming. Not
			 * waited for by a send that must not wait (refused). */
			if (atomic_load(&sc->state) == UNDECIDED && !(flags & MSG_DONTWAIT) &&
			    (end || !lf__sys_file_nonblocking(fd))) {
				end = end ? end : lf__sys_now_ns() + LF_SHM_ANSWER_NS;
				lf__shm_decide_by(sc, x, end);
			}
			int st = atomic_load(&sc->state);
			if (st != ON && st != UNDECIDED)
				continue; /* on the Unix stream: it passes as it is */
			if (st == UNDECIDED || h.n == LF_PASS_RECS || h.napp >= LF_PASS_FDS ||
			    !lf__shm_exec_rec(x, sc, &r) || r.mfd < 0) {
				refuse = true;
				continue;
			}
			uint32_t j = 0;
			while (j < h.n && conns[j] != sc)
				j++;
			recs[h.n] = (struct lf_pass_rec){ .ino = r.ino, .mino = r.mino, .count = r.count,
							  .sock = h.napp, .mfd = j < h.n ? -1 : (int32_t)nm,
							  .owed = r.owed, .kind = (uint8_t)r.kind,
							  .flags = (uint8_t)r.flags };
			if (j == h.n)
				mfds[nm++] = r.mfd;
			socks[h.n] = x;
			conns[h.n++] = sc;
		}
	}
	if (!h.n && !refuse) {
		ret = REAL(sendmsg)(fd, m, flags);
		e = errno;
		goto out;
	}
	if (!refuse && !peer_runs_loopfast(fd, m)) {
		/* A receiver that cannot take the rings: each connection leaves
		 * the tier first, onto its Unix stream, which the message then
		 * passes as it came (shm_leave.c). */
		bool left = true;
		for (uint32_t i = 0; i < h.n && left; i++)
			left = atomic_load(&conns[i]->state) == OFF || lf__shm_leave(conns[i], socks[i]);
		if (left) {
			ret = REAL(sendmsg)(fd, m, flags);
			e = errno;
			goto out;
		}
		refuse = true;
	}
	if (refuse || h.napp + nm + 1 > LF_PASS_FDS) {
		e = EOPNOTSUPP; /* the peer did not answer, or too many: the sender keeps a working connection */
		goto out;
	}
	for (uint32_t i = 0; i < h.n; i++) /* memfd positions follow the application's descriptors */
		if (recs[i].mfd >= 0)
			recs[i].mfd += (int32_t)h.napp;
	if ((mfds[nm] = record_memfd(&h, recs)) < 0) {
		e = errno; /* the caller's limit, not a memory shortage */
		goto out;
	}
	/* One SCM_RIGHTS of the extra descriptors, the record first, then the
	 * message's control: the kernel joins the application's descriptors
	 * to them, after them, in one array, and installs them in that order
	 * at the receiver, stopping at its descriptor limit: a cut leaves no
	 * tier socket without its record and ring (take_record). */
	size_t at = CMSG_SPACE((nm + 1) * sizeof(int)), len = at + m->msg_controllen;
	char *cbuf = calloc(1, len);
	if (cbuf) {
		struct cmsghdr *x = (struct cmsghdr *)(void *)cbuf;
		x->cmsg_level = SOL_SOCKET;
		x->cmsg_type = SCM_RIGHTS;
		x->cmsg_len = CMSG_LEN((nm + 1) * sizeof(int));
		memcpy(CMSG_DATA(x), &mfds[nm], sizeof(int)); /* the record */
		memcpy(CMSG_DATA(x) + sizeof(int), mfds, nm * sizeof(int));
		memcpy(cbuf + at, m->msg_control, m->msg_controllen);
		struct msghdr copy = *m;
		copy.msg_control = cbuf;
		copy.msg_controllen = len;
		/* The receiver holds each end too (docs/shm.md, "Who holds an
		 * end"): counted before it can look, taken back if nothing went. */
		holders(conns, h.n, true);
		ret = REAL(sendmsg)(fd, &copy, flags);
		e = errno;
		if (ret < 0)
			holders(conns, h.n, false);
		free(cbuf);
	}
	lf__sys_close(mfds[nm]);
out:
	while (nh)
		lf__shm_done(held[--nh]);
	errno = e;
	return ret;
}

/* ---- the receiver */

/* mfd is a record memfd as the sender makes it: its bytes into buf
 * (LF_PASS_SIZE(LF_PASS_RECS) of room); their count, or -1. The seals are
 * asked first: every descriptor but a sealed memfd (a socket, a pipe, a
 * file) fails there, in one cheap call, so that a program passing its own
 * descriptors does not pay the readlink (3 us a message measured, the
 * receive itself 1.8) and the fstat. */
static ssize_t read_record(int mfd, void *buf)
{
	char p[48], name[64];
	struct stat st;
	int seals = lf__sys_fcntl(mfd, F_GET_SEALS, 0);

	if (seals < 0 || (seals & SEALS) != SEALS)
		return -1;
	snprintf(p, sizeof(p), "/proc/self/fd/%d", mfd);
	ssize_t l = readlink(p, name, sizeof(name) - 1);
	if (l < 0 || fstat(mfd, &st) || !S_ISREG(st.st_mode) || st.st_size < 0 ||
	    st.st_size > (off_t)LF_PASS_SIZE(LF_PASS_RECS))
		return -1;
	name[l] = 0;
	if (strncmp(name, "/memfd:" LF_PASS_NAME " ", sizeof("/memfd:" LF_PASS_NAME)))
		return -1;
	return pread(mfd, buf, (size_t)st.st_size, 0) == st.st_size ? st.st_size : -1;
}

/* Whether the process the kernel names as the peer of the passed socket
 * sock (SO_PEERCRED: the other end's connecting process, or the
 * listener's maker) maps the ring memfd of inode mino. A record pairs a
 * socket with a ring by the sender's word alone: a forger could pair a
 * fast-path socket to some third party (off the tier) with a ring of its
 * own, and read there what the receiver writes to that party. The real
 * other end maps the ring; a third party never maps the forger's. No:
 * the peer's maps unreadable (another uid, gone), or no such mapping. */
static bool peer_maps_ring(int sock, unsigned long mino)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);
	char p[48], buf[4096 + 512];
	size_t keep = 0;
	bool yes = false;

	if (lf__sys_getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &l) || cr.pid <= 0)
		return false;
	snprintf(p, sizeof(p), "/proc/%d/maps", (int)cr.pid);
	int f = open(p, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return false;
	for (ssize_t k; !yes && (k = lf__sys_read(f, buf + keep, sizeof(buf) - 1 - keep)) > 0;) {
		size_t n = keep + (size_t)k;
		char *line = buf, *nl;
		buf[n] = 0;
		while (!yes && (nl = memchr(line, '\n', (size_t)(buf + n - line)))) {
			unsigned long ino = 0;
			*nl = 0;
			yes = sscanf(line, "%*s %*s %*s %*s %lu", &ino) == 1 && ino == mino &&
			      strstr(line, "/memfd:loopfast-shm");
			line = nl + 1;
		}
		keep = (size_t)(buf + n - line); /* a line across two reads (a longer one is skipped) */
		if (keep > 512)
			keep = 0;
		memmove(buf, line, keep);
	}
	lf__sys_close(f);
	return yes;
}

/* Closes fd as the application's close would (a tier socket's peer told). */
static void close_app(int fd)
{
	struct lf_shm_conn *c = lf__shm_hold(fd);
	lf__fd_reset(fd);
	lf__sys_close(fd);
	lf__shm_closed(c);
}

/* The count of descriptors the sender put in the message whose record is
 * raw (len bytes): 1 (the record) + the memfds + the application's; 0
 * when it does not say (lf__pass_parse checks the rest). */
static size_t sent_count(const char *raw, size_t len)
{
	struct lf_pass_hdr h;
	size_t nm = 0;

	if (len < sizeof(h))
		return 0;
	memcpy(&h, raw, sizeof(h));
	if (h.n > LF_PASS_RECS || len != LF_PASS_SIZE(h.n) || h.napp >= LF_PASS_FDS)
		return 0;
	for (uint32_t i = 0; i < h.n; i++) {
		struct lf_pass_rec r;
		memcpy(&r, raw + sizeof(h) + i * sizeof(r), sizeof(r));
		nm += r.mfd >= 0;
	}
	return 1 + nm + h.napp <= LF_PASS_FDS ? 1 + nm + h.napp : 0;
}

/* The descriptors fds[0..n) of one SCM_RIGHTS as received: when the first
 * is a record memfd, the named sockets adopted, the extras closed;
 * returns how many of them are the application's (moved to the front).
 * The sender puts the record first, then the memfds, then the
 * application's descriptors, so that a message the kernel cut (no room
 * under RLIMIT_NOFILE: it installs in order and stops) never leaves a
 * tier socket here without its record and ring: what was cut is a tail.
 * The record's positions are in the order the application sees: its
 * descriptors [0, napp), the memfds after, the record last (pass.h);
 * pos maps them to what came (-1: cut). */
static size_t take_record(int *fds, size_t n)
{
	static_assert(LF_PASS_RECS <= LF_SHM_EXEC_FDS, "a seen entry per record");
	union {
		char b[LF_PASS_SIZE(LF_PASS_RECS)];
		uint64_t align;
	} raw;
	struct lf_pass_rec recs[LF_PASS_RECS];
	struct lf_pass_hdr h;
	int pos[LF_PASS_FDS];
	ssize_t len;
	size_t total;

	if (n < 1 || (len = read_record(fds[0], raw.b)) < 0)
		return n;
	lf__sys_close(fds[0]);
	int k = -1;
	total = sent_count(raw.b, (size_t)len);
	if (total >= n && total >= 2) {
		memcpy(&h, raw.b, sizeof(h));
		size_t nm = total - 1 - h.napp;
		for (size_t i = 0; i < total - 1; i++) { /* the application's, then the memfds */
			size_t at = i < total - 1 - nm ? 1 + nm + i : 1 + (i - (total - 1 - nm));
			pos[i] = at < n ? fds[at] : -1;
		}
		pos[total - 1] = -1; /* the record: closed */
		k = lf__pass_parse(raw.b, (size_t)len, total, &h, recs);
	}
	if (k < 0) {
		if (lf__debug_on)
			lf__debug("a passed record that does not check out: its descriptors go to the application as sent");
		memmove(fds, fds + 1, (n - 1) * sizeof(int));
		return n - 1;
	}
	bool took[LF_PASS_FDS] = { false };
	struct lf_shm_seen seen[LF_PASS_RECS];
	size_t nseen = 0;
	for (int i = 0; i < k; i++) {
		const struct lf_pass_rec *p = &recs[i];
		struct lf_shm_rec r = { .fd = pos[p->sock], .mfd = p->mfd >= 0 ? pos[p->mfd] : -1, .ino = p->ino,
					.mino = p->mino, .kind = (char)p->kind, .count = p->count,
					.flags = p->flags, .owed = p->owed };
		if (r.fd < 0) /* cut with the rest */
			continue;
		if (p->mfd >= 0 && (r.mfd < 0 || !peer_maps_ring(r.fd, r.mino))) { /* not this socket's ring */
			if (lf__debug_on)
				lf__debug("a passed socket whose peer does not map the ring it came with: shut down");
		} else if (lf__shm_exec_adopt_one(&r, seen, &nseen) && p->mfd >= 0) {
			took[p->mfd] = true;
		}
		if (!lf__shm_conn_of(r.fd)) /* named a tier socket, and not one: never a token read as data */
			lf__sys_shutdown(r.fd, SHUT_RDWR);
	}
	for (size_t i = h.napp; i < total - 1; i++)
		if (!took[i] && pos[i] >= 0)
			lf__sys_close(pos[i]);
	size_t app = 0;
	while (app < h.napp && pos[app] >= 0) /* what came of them: a prefix */
		app++;
	memcpy(fds, pos, app * sizeof(int));
	return app;
}

/* put_cmsg's copy (net/core/scm.c) of one message of len data bytes into
 * the application's control at *out with *left bytes of room. */
static void put(char **out, size_t *left, int *mflags, const struct cmsghdr *c, const void *data, size_t len)
{
	size_t cl = CMSG_LEN(len), sp = CMSG_SPACE(len);

	if (*left < sizeof(struct cmsghdr)) {
		*mflags |= MSG_CTRUNC;
		return;
	}
	if (*left < cl) {
		*mflags |= MSG_CTRUNC;
		cl = *left;
	}
	struct cmsghdr hd = { .cmsg_len = cl, .cmsg_level = c->cmsg_level, .cmsg_type = c->cmsg_type };
	memcpy(*out, &hd, sizeof(hd));
	memcpy(*out + CMSG_LEN(0), data, cl - CMSG_LEN(0));
	sp = sp < *left ? sp : *left;
	*out += sp;
	*left -= sp;
}

/* The kernel's answer got (its control in the widened buffer) made the
 * application's m: records taken, and its control as the kernel would
 * have placed it in m's room (scm_detach_fds: the descriptors that fit,
 * the rest closed, MSG_CTRUNC). */
static void narrow(struct msghdr *m, struct msghdr *got)
{
	char *out = m->msg_control;
	size_t room = out ? m->msg_controllen : 0, left = room;
	int mflags = got->msg_flags & ~MSG_CTRUNC;
	bool mine = false;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(got); c; c = CMSG_NXTHDR(got, c))
		mine |= c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int));
	if (!mine && got->msg_controllen <= room && !(got->msg_flags & MSG_CTRUNC)) {
		if (got->msg_controllen) /* the common case: as it came */
			memcpy(out, got->msg_control, got->msg_controllen);
		m->msg_controllen = got->msg_controllen;
		m->msg_flags = got->msg_flags;
		return;
	}
	mflags |= got->msg_flags & MSG_CTRUNC; /* truncated in the wider room: in the narrower too */
	for (struct cmsghdr *c = CMSG_FIRSTHDR(got); c; c = CMSG_NXTHDR(got, c)) {
		size_t len = c->cmsg_len - CMSG_LEN(0);
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			put(&out, &left, &mflags, c, CMSG_DATA(c), len);
			continue;
		}
		int fds[LF_PASS_FDS];
		size_t n = len / sizeof(int), fit = 0;
		if (n > LF_PASS_FDS)
			n = LF_PASS_FDS;
		memcpy(fds, CMSG_DATA(c), n * sizeof(int));
		n = take_record(fds, n);
		if (left > sizeof(struct cmsghdr))
			fit = (left - sizeof(struct cmsghdr)) / sizeof(int);
		if (fit < n || (n && !fit))
			mflags |= MSG_CTRUNC;
		fit = fit < n ? fit : n;
		for (size_t i = fit; i < n; i++) /* the kernel would not have installed them */
			close_app(fds[i]);
		if (fit)
			put(&out, &left, &mflags, c, fds, fit * sizeof(int));
	}
	m->msg_controllen = room - left;
	m->msg_flags = mflags;
}

/* The caller's msghdr widened into w, its control into buf (ROOM more
 * than the caller's; *heap when it had to be allocated). false: no memory. */
static bool widen(const struct msghdr *m, struct msghdr *w, char *stack, size_t nstack, char **heap)
{
	size_t len = m->msg_controllen + ROOM;

	*heap = NULL;
	*w = *m;
	w->msg_controllen = len;
	if (len <= nstack) {
		w->msg_control = stack;
		return true;
	}
	return (w->msg_control = *heap = malloc(len)) != NULL;
}

ssize_t lf__shm_pass_recvmsg(int fd, struct msghdr *m, int flags)
{
	union {
		char b[4096];
		struct cmsghdr align;
	} st;
	struct msghdr w;
	char *heap;

	if (!widen(m, &w, st.b, sizeof(st.b), &heap))
		return REAL(recvmsg)(fd, m, flags);
	ssize_t r = REAL(recvmsg)(fd, &w, flags);
	if (r >= 0) {
		int e = errno;
		m->msg_namelen = w.msg_namelen;
		narrow(m, &w);
		errno = e;
	}
	free(heap);
	return r;
}

int lf__shm_pass_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts)
{
	struct mmsghdr *w = calloc(n, sizeof(*w));
	char **heap = calloc(n, sizeof(*heap));
	unsigned k = 0;

	while (w && heap && k < n && widen(&v[k].msg_hdr, &w[k].msg_hdr, NULL, 0, &heap[k]))
		k++;
	int r = k == n ? REAL(recvmmsg)(fd, w, n, flags, ts) : REAL(recvmmsg)(fd, v, n, flags, ts);
	int e = errno;
	for (int i = 0; k == n && i < r; i++) {
		v[i].msg_len = w[i].msg_len;
		v[i].msg_hdr.msg_namelen = w[i].msg_hdr.msg_namelen;
		narrow(&v[i].msg_hdr, &w[i].msg_hdr);
	}
	for (unsigned i = 0; heap && i < k; i++)
		free(heap[i]);
	free(heap);
	free(w);
	errno = e;
	return r;
}
